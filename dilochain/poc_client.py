"""A typed client of ``dilochain.poc.v1.Query``, in cosmpy's style, and the bonding path (and
the word on a slash) that hosts and verifiers share."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import grpc
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.wallet import Wallet

from dilochain.block_watch import BlockWatch
from dilochain.endpoints import open_channel
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1 import query_pb2_grpc as poc_grpc
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgDepositCollateral
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    Beacon,
    ChainValidator,
    Challenge,
    Claimable,
    CollateralInfo,
    EpochInfo,
    GlobalCheckpoint,
    Host,
    Params,
    RoundCommit,
    Run,
    Screen,
    Slash,
    Verifier,
    VestingGrant,
)

PAGE = 500  # items a page of a list query asks for


class InsufficientFunds(Exception):
    """An account cannot pay the collateral it must bond."""


class PocClient:
    """The poc module's queries over one channel to the chain nodes at ``addresses``
    (:class:`~dilochain.endpoints.FailoverChannel`), which the client owns and closes."""

    def __init__(self, addresses: str | Sequence[str]):
        self._channel = open_channel(addresses)
        self.addresses = self._channel.addresses
        self._stub = poc_grpc.QueryStub(self._channel)
        self._blocks: BlockWatch | None = None
        self._lock = threading.Lock()

    @property
    def blocks(self) -> BlockWatch:
        """The chain's committed height, pushed by its node (a stream opened at first use)."""
        with self._lock:  # every loop of a node asks from a thread of its own
            if self._blocks is None:
                self._blocks = BlockWatch(self._channel)
            return self._blocks

    def close(self) -> None:
        """Close the block stream, if one was opened, and the channel."""
        if self._blocks is not None:
            self._blocks.close()
        self._channel.close()

    def __enter__(self) -> PocClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def params(self) -> Params:
        """The module's parameters."""
        return self._stub.Params(q.QueryParamsRequest()).params

    def collateral(self, address: str) -> CollateralInfo:
        """Bonded and unbonding collateral of ``address``."""
        return self._stub.Collateral(q.QueryCollateralRequest(address=address)).collateral

    def run(self, run_id: str) -> Run | None:
        """The run ``run_id``, or None if there is none."""
        try:
            return self._stub.Run(q.QueryRunRequest(run_id=run_id)).run
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise

    def _all(self, call, request, field: str) -> list:
        """Every item of a paged list query, page after page."""
        found, key = [], b""
        while True:
            request.pagination.CopyFrom(q.PageRequest(key=key, limit=PAGE))
            answer = call(request)
            found += getattr(answer, field)
            key = answer.pagination.next_key
            if not key:
                return found

    def runs(self, active: bool = False) -> list[Run]:
        """Every run (``active``: only those whose last round has not resolved)."""
        return self._all(self._stub.Runs, q.QueryRunsRequest(active=active), "runs")

    def hosts(self, run_id: str) -> list[Host]:
        """The hosts registered in a run."""
        return self._all(self._stub.Hosts, q.QueryHostsRequest(run_id=run_id), "hosts")

    def roster(self, run_id: str, round: int) -> list[str] | None:
        """The hosts of one round, sorted (None until the chain draws it as the round's commit
        window opens)."""
        found = self._stub.Roster(q.QueryRosterRequest(run_id=run_id, round=round))
        return list(found.roster.hosts) if found.drawn else None

    def round_info(self, run_id: str) -> q.QueryRoundInfoResponse:
        """The chain's height and the run's current round with its windows."""
        return self._stub.RoundInfo(q.QueryRoundInfoRequest(run_id=run_id))

    def commits(self, run_id: str, round: int) -> list[RoundCommit]:
        """The commits of one round."""
        request = q.QueryCommitsRequest(run_id=run_id, round=round)
        return self._all(self._stub.Commits, request, "commits")

    def global_checkpoints(self, run_id: str) -> list[GlobalCheckpoint]:
        """The recorded global checkpoint of every round so far."""
        request = q.QueryGlobalCheckpointsRequest(run_id=run_id)
        return self._all(self._stub.GlobalCheckpoints, request, "checkpoints")

    def challenges(self, run_id: str, round: int) -> list[Challenge]:
        """The challenges of one round."""
        request = q.QueryChallengesRequest(run_id=run_id, round=round)
        return self._all(self._stub.Challenges, request, "challenges")

    def slashes(self, address: str = "") -> list[Slash]:
        """Slashes of ``address`` (of everyone when empty)."""
        request = q.QuerySlashesRequest(address=address)
        return self._all(self._stub.Slashes, request, "slashes")

    def verifiers(self) -> list[Verifier]:
        """Registered verifiers."""
        return self._all(self._stub.Verifiers, q.QueryVerifiersRequest(), "verifiers")

    def verifier_endpoints(self) -> list[str]:
        """The blob services registered verifiers serve what they fetched from (hosts fetch
        accepted artifacts there that their own host does not serve)."""
        return [v.endpoint for v in self.verifiers() if v.endpoint]

    def validators(self) -> list[ChainValidator]:
        """Every member (or past member) of the validator set."""
        return self._all(self._stub.Validators, q.QueryValidatorsRequest(), "validators")

    def beacon(self, run_id: str, round: int) -> Beacon:
        """A round's beacon: verifiers' commitments and secrets, anchor and seed."""
        return self._stub.Beacon(q.QueryBeaconRequest(run_id=run_id, round=round)).beacon

    def epoch(self, epoch: int | None = None) -> EpochInfo:
        """Epoch ``epoch`` (the current one when None): bounds, pool, total work."""
        request = (
            q.QueryEpochRequest(current=True) if epoch is None else q.QueryEpochRequest(epoch=epoch)
        )
        return self._stub.Epoch(request).epoch

    def screens(self, run_id: str, round: int) -> list[Screen]:
        """The screens of a round's commits (votes so far; ``failed`` from the selection on)."""
        request = q.QueryScreensRequest(run_id=run_id, round=round)
        return self._all(self._stub.Screens, request, "screens")

    def vesting(self, address: str) -> list[VestingGrant]:
        """``address``'s claimed rewards still vesting or not yet paid, by epoch."""
        return self._all(self._stub.Vesting, q.QueryVestingRequest(address=address), "grants")

    def claimable(self, address: str, epoch: int) -> Claimable:
        """What ``address`` earned in ``epoch`` and whether it was claimed."""
        request = q.QueryClaimableRequest(address=address, epoch=epoch)
        return self._stub.Claimable(request).claimable


def ensure_bonded(
    ledger: LedgerClient, poc: PocClient, wallet: Wallet, required: int
) -> list[MsgDepositCollateral]:
    """The deposit that brings ``wallet``'s free collateral (bonded, not locked by other runs or
    registrations) up to ``required`` (none if it is there already); raises
    :class:`InsufficientFunds` if the balance cannot pay it."""
    address = str(wallet.address())
    held = poc.collateral(address)
    need = required - (int(held.bonded) - int(held.locked or 0))
    if need <= 0:
        return []
    balance = ledger.query_bank_balance(wallet.address(), DENOM)
    if balance < need:
        raise InsufficientFunds(
            f"{address} must bond {need}{DENOM} more collateral and holds {balance}{DENOM}"
        )
    return [MsgDepositCollateral(depositor=address, amount=str(need))]


def last_slash(poc: PocClient, address: str, run_id: str | None = None) -> str:
    """Why ``address`` was last slashed (in run ``run_id``, if given), for its operator's log
    ("" if it never was): a host or verifier that bonds again after a slash says what for."""
    slashes = [s for s in poc.slashes(address) if run_id is None or s.run_id == run_id]
    if not slashes:
        return ""
    last = max(slashes, key=lambda s: s.height)
    where = f" in run {last.run_id} round {last.round}" if last.run_id else ""
    return f"slashed {last.amount}{DENOM} at block {last.height}{where}: {last.reason}"
