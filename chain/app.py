"""The dilochain state machine: the ABCI++ application CometBFT drives (``chain.abci``).

``init_chain`` writes genesis state, ``check_tx`` admits txs to CometBFT's mempool against a
check state, ``prepare_proposal``/``process_proposal`` build and vet block proposals,
``finalize_block`` executes a decided block's txs and end-of-block work, and ``commit`` persists
it atomically. Everything a block computes depends only on the block (its height, header time,
hash and txs) and on committed state, never on the local clock, so every validator reaches the
same app hash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxMsgData, TxResponse
from google.protobuf.any_pb2 import Any

from dilochain.chain.ante import Mode, SignatureCache, run_ante
from dilochain.chain.context import Context, MsgSpec, block_timestamp
from dilochain.chain.errors import CODESPACE, TxError, codes
from dilochain.chain.modules import (
    bank,
    beacon,
    challenges,
    collateral,
    registry,
    rewards,
    rounds,
    screening,
    validator_set,
    verifiers,
)
from dilochain.chain.state import CacheStore, GasMeter
from dilochain.chain.state_tree import StateTree
from dilochain.chain.store import ChainStore, StoredBlock, StoreError
from dilochain.chain.tx import DecodedTx, DecodedTxCache
from dilochain.genesis.document import AppState, GenesisDoc
from dilochain.protocol.hashing import tx_hash

log = logging.getLogger(__name__)
T = TypeVar("T")
# The state commits to the block it is the state of (height, header time, hash): a node
# restoring a snapshot learns them from state the app hash proves, not from the peer.
BLOCK_KEY = b"chain/block"

MSG_SPECS: list[MsgSpec] = [
    *bank.MSGS, *collateral.MSGS, *registry.MSGS, *rounds.MSGS, *verifiers.MSGS,
    *beacon.MSGS, *screening.MSGS, *challenges.MSGS, *rewards.MSGS, *validator_set.MSGS,
]  # fmt: skip


# Mempool admission runs a tx's messages, so that most txs that would fail are refused before a
# block (and with the handler's own error), but only for so long: a tx of 60 messages whose last
# fails cost 57 ms a CheckTx against 2.5 ms for one refused by its ante checks, for nothing (a
# refused tx pays no fee and takes no sequence, and can be sent again). Past this budget the
# rest of a tx's messages are left to the block, as the Cosmos SDK leaves all of them.
CHECK_SECONDS = 0.005

# End-of-block work, in order: a round's seed before its challenges are drawn; hosts
# and verifiers that left, after their last round's slashes.
END_BLOCKERS = [collateral, rounds, beacon, challenges, registry, verifiers]


def _isolated(name: str, work: Callable[[Context], T], ctx: Context) -> T | None:
    """One module's block-level work in a layer of its own: if it fails (a bug), its writes and
    events are dropped and the block goes on, the same on every validator, instead of the
    chain halting on one module's error; returns what the work returned (None if it failed)."""
    layer = ctx.store.child()
    events: list = []
    try:
        result = work(Context(layer, ctx.height, ctx.time_ns, ctx.chain_id, ctx.params,
                              events, ctx.last_block_hash))  # fmt: skip
    except Exception:
        log.exception("block %d: %s failed; its work in this block is dropped", ctx.height, name)
        return None
    layer.write()
    ctx.events.extend(events)
    return result


@dataclass(frozen=True)
class FinalizedBlock:
    """The outcome of executing a block, before it is committed."""

    block: StoredBlock
    txs: list[bytes]
    results: list[TxResponse]
    app_hash: bytes
    validator_updates: list[tuple[bytes, int]] = field(default_factory=list)  # (ed25519 key, power)
    events: list = field(default_factory=list)  # the block's own (begin and end of block)


def tx_failure(code: int, log_line: str, gas_wanted: int = 0, gas_used: int = 0) -> TxResponse:
    """A rejected tx's response: an ABCI code in the ``sdk`` codespace and a log line."""
    return TxResponse(
        code=code,
        codespace=CODESPACE if code else "",
        raw_log=log_line,
        gas_wanted=gas_wanted,
        gas_used=gas_used,
    )


class Application:
    """The chain's ABCI-shaped application over a :class:`ChainStore`."""

    def __init__(self, store: ChainStore, genesis: GenesisDoc):
        self.store = store
        self.genesis = genesis
        self.chain_id = genesis.chain_id
        self.params = genesis.params
        self.registry = {spec.type_url: spec for spec in MSG_SPECS}
        self.sig_cache = SignatureCache()
        self.decoded = DecodedTxCache(self.registry, self.params.auth)
        self.check_state = CacheStore(store)
        self._partly_checked: set[str] = set()  # signers of a tx CheckTx cut short, till a block
        # Those txs by hash, this block's and the last's (what a recheck looks them up in).
        self._cut_short: dict[bytes, list[str]] = {}
        self._cut_short_before: dict[bytes, list[str]] = {}
        self._pending: tuple[FinalizedBlock, CacheStore] | None = None
        self.tree = self._verified_tree()

    def _verified_tree(self) -> StateTree:
        """The state's Merkle tree, rebuilt from the store and checked against the app hash
        this node committed last: a store damaged since (a flipped byte, a lost write) is
        refused with one line instead of serving wrong state. Rows without a genesis behind
        them (a snapshot restore cut short) are dropped unread."""
        if self.store.meta("genesis") is None:
            self.store.clear_state()
        tree = StateTree(self.store.iterate(b""))
        committed = self.store.meta("app_hash")
        started = self.store.meta("genesis") is not None and committed is not None
        if started and tree.root != committed:
            raise StoreError(
                f"{self.store.path}: the state on disk does not match the app hash this "
                f"node committed at height {self.store.height} ({committed.hex()[:16]}…, "
                f"the state hashes to {tree.root.hex()[:16]}…): the database is damaged. "
                "Move it away together with CometBFT's data/ folder and start the node "
                "again to sync from its peers, or restore it from a backup"
            )
        return tree

    # ---- info --------------------------------------------------------------------------------
    @property
    def height(self) -> int:
        """Last committed height."""
        return self.store.height

    @property
    def finalizing(self) -> bool:
        """Whether a block is finalized and not yet committed (its writes are in the tree)."""
        return self._pending is not None

    @property
    def app_hash(self) -> bytes:
        """App hash after the last commit."""
        return self.store.meta("app_hash") or b""

    @property
    def last_block_time_ns(self) -> int:
        """Time of the last committed block (genesis time before the first)."""
        raw = self.store.meta("time_ns")
        return int(raw) if raw else int(self.genesis.genesis_time.timestamp() * 1e9)

    def committed_view(self) -> CacheStore:
        """A read-only view of committed state for queries (it adds nothing to the store's
        read cache)."""
        return CacheStore(self.store.query_view())

    # ---- InitChain ---------------------------------------------------------------------------
    def init_chain(self, chain_id: str | None = None, app_state: bytes | None = None) -> bytes:
        """Write genesis state if this store is new; return the app hash either way.

        ``chain_id`` and ``app_state`` are what CometBFT read from genesis.json; they must be
        those of the genesis this application was started with.
        """
        if chain_id is not None and chain_id != self.chain_id:
            raise ValueError(f"CometBFT's chain id {chain_id!r} is not {self.chain_id!r}")
        same_state = (
            app_state is None or AppState.model_validate_json(app_state) == self.genesis.app_state
        )
        if not same_state:
            raise ValueError("CometBFT's app_state differs from this home's genesis")
        genesis_hash = self.genesis.model_dump_json().encode()
        stored = self.store.meta("genesis")
        if stored is not None:
            if stored != genesis_hash:
                raise ValueError("the genesis file differs from the one this chain started with")
            return self.app_hash
        state = CacheStore(self.store)
        for account in self.genesis.accounts:
            bank.mint(state, account.address, {c.denom: c.amount for c in account.coins})
        validator_set.init_genesis(state, self.genesis.validators,
                                   self.params.poc.collateral_denom)  # fmt: skip
        app_hash = self.tree.update(state.writes)
        self.store.commit(
            state.writes,
            {"genesis": genesis_hash, "app_hash": app_hash, "height": b"0"},
        )
        self._reset_check_state()
        return app_hash

    # ---- txs ---------------------------------------------------------------------------------
    def _run_tx(self, parent: CacheStore, raw: bytes, height: int, time_ns: int, mode: Mode):
        """Decode and run one tx over ``parent``: its response."""
        try:
            tx = self.decoded.decode(raw)
        except TxError as err:
            return tx_failure(err.code, err.log)
        return self._run_decoded(parent, tx, height, time_ns, mode)

    def _run_decoded(
        self, parent: CacheStore, tx: DecodedTx, height: int, time_ns: int, mode: Mode
    ) -> TxResponse:
        """Run one decoded tx over ``parent``. Events are built only where they are delivered
        (blocks and simulations, not the mempool); a recheck runs the ante checks alone, as
        the Cosmos SDK's ReCheckTx: only sequences and fee balances change between blocks."""
        gas_wanted = tx.gas_limit
        # Simulate meters against the chain's cap instead of the (unsigned) tx's own limit.
        limit = self.params.auth.simulate_gas_limit if mode is Mode.SIMULATE else gas_wanted
        meter = GasMeter(limit)
        ante_store = CacheStore(parent, meter)
        events = [] if mode in (Mode.DELIVER, Mode.SIMULATE) else None
        ctx = Context(ante_store, height, time_ns, self.chain_id, self.params, events)
        try:
            run_ante(ctx, tx, mode, self.sig_cache)
        except TxError as err:
            return tx_failure(err.code, err.log, gas_wanted, meter.consumed)
        if mode is Mode.RECHECK:
            ante_store.write()
            return TxResponse(code=0, gas_wanted=gas_wanted, gas_used=meter.consumed)
        msg_ctx = ctx.with_store(ante_store.child())
        msg_ctx.events = [] if events is not None else None
        responses = []
        started = time.perf_counter()
        try:
            for index, (spec, msg) in enumerate(tx.msgs):
                if mode is Mode.CHECK and index and time.perf_counter() - started > CHECK_SECONDS:
                    # Admitted on its ante checks, as the SDK admits every tx: the block runs
                    # its messages, and charges its fee and sequence should one fail there.
                    self._partly_checked.update(tx.signers)
                    self._cut_short[tx.hash] = tx.signers
                    ante_store.write()
                    return TxResponse(code=0, gas_wanted=gas_wanted, gas_used=meter.consumed)
                msg_ctx.emit(
                    "message",
                    action=spec.type_url,
                    sender=getattr(msg, spec.signer_field),
                    module=spec.message.DESCRIPTOR.full_name.split(".")[0],
                    msg_index=index,
                )
                response = spec.handler(msg_ctx, msg)
                packed = Any()
                packed.Pack(response, type_url_prefix="/")
                responses.append(packed)
        except TxError as err:
            ante_store.write()
            result = tx_failure(err.code, f"failed to execute message; {err.log}", gas_wanted)
            result.gas_used = meter.consumed
            result.events.extend(ctx.events or [])
            return result
        except Exception as err:  # a handler bug must not stop the chain
            log.exception("message handler failed")
            ante_store.write()
            return tx_failure(codes.INTERNAL, f"internal error: {err}", gas_wanted, meter.consumed)
        msg_ctx.store.write()
        ante_store.write()
        return TxResponse(
            code=0,
            raw_log="",
            data=TxMsgData(msg_responses=responses).SerializeToString().hex().upper(),
            gas_wanted=gas_wanted,
            gas_used=meter.consumed,
            events=[*(ctx.events or []), *(msg_ctx.events or [])],
        )

    def _reset_check_state(self) -> None:
        """Mempool admission starts again from the committed state."""
        self.check_state = CacheStore(self.store)
        self._partly_checked.clear()
        # A tx cut short that is still in the mempool after the block is rechecked (its ante
        # alone): it keeps its signers' later txs waiting, or they would pass CheckTx against
        # a balance it is about to spend, and take block space their fees never pay for.
        self._cut_short_before, self._cut_short = self._cut_short, {}

    def check_tx(self, raw: bytes, recheck: bool = False) -> TxResponse:
        """Mempool admission against the check state (kept on success): the full tx, or
        with ``recheck`` (a tx left in the mempool after a block) its ante checks alone."""
        try:
            tx = self.decoded.decode(raw)
            self._require_block_gas(tx)
            if not recheck and (cut := self._partly_checked.intersection(tx.signers)):
                # What the check state says of it no longer holds (an admitted tx's messages
                # past the budget were not run): its later txs wait for that one's block.
                raise TxError(
                    codes.INVALID_REQUEST,
                    f"a tx of {min(cut)} in the mempool was "
                    "too long to check in full; send this one once that is in a block",
                )
        except TxError as err:
            result = tx_failure(err.code, err.log)
        else:
            layer = self.check_state.child(GasMeter())
            mode = Mode.RECHECK if recheck else Mode.CHECK
            result = self._run_decoded(layer, tx, self.height + 1, self.last_block_time_ns, mode)
            if result.code == 0:
                layer.write()
                self.decoded.keep(tx)
                if recheck and (signers := self._cut_short_before.get(tx.hash)) is not None:
                    self._cut_short[tx.hash] = signers  # still waiting: so do its signers'
                    self._partly_checked.update(signers)
        result.txhash = tx_hash(raw).hex().upper()
        return result

    def simulate(self, raw: bytes) -> TxResponse:
        """Gas estimation: run the tx on a throw-away layer over the check state."""
        layer = self.check_state.child(GasMeter())
        return self._run_tx(layer, raw, self.height + 1, self.last_block_time_ns, Mode.SIMULATE)

    # ---- proposals ---------------------------------------------------------------------------
    @property
    def max_block_gas(self) -> int | None:
        """The gas limits of a block's txs may sum to (``consensus_params.block.max_gas``);
        None: no limit (-1)."""
        limit = self.genesis.consensus_params.block.max_gas
        return None if limit == -1 else limit

    def _require_block_gas(self, tx: DecodedTx) -> None:
        """Refuse a tx that no block can hold (as the Cosmos SDK's ante handler does)."""
        limit = self.max_block_gas
        if limit is not None and tx.gas_limit > limit:
            raise TxError(codes.INVALID_GAS_LIMIT, f"tx gas limit {tx.gas_limit} exceeds block "
                                                   f"max gas {limit}")  # fmt: skip

    def _gas_wanted(self, raw: bytes) -> int:
        """A proposed tx's gas limit (0 for one that does not decode: it never runs)."""
        try:
            return self.decoded.decode(raw).gas_limit
        except TxError:
            return 0

    def prepare_proposal(self, txs: list[bytes], max_tx_bytes: int) -> list[bytes]:
        """The proposer's block: mempool txs in order, those that do not decode left out, up
        to ``max_tx_bytes`` and :attr:`max_block_gas` of gas limits."""
        limit = self.max_block_gas
        picked, size, gas = [], 0, 0
        for raw in txs:
            if size + len(raw) > max_tx_bytes:
                break
            try:
                tx = self.decoded.decode(raw)
            except TxError:
                continue
            if limit is not None and gas + tx.gas_limit > limit:
                break
            picked.append(raw)
            size += len(raw)
            gas += tx.gas_limit
        return picked

    def process_proposal(self, txs: list[bytes], max_tx_bytes: int) -> bool:
        """Vote on another validator's proposal: accept any within the block size and whose
        txs' gas limits sum to :attr:`max_block_gas` at most.

        A tx that does not decode or fails is answered in FinalizeBlock with its code, as
        the Cosmos SDK's ante handler answers it; rejecting the whole block would only cost a
        consensus round.
        """
        if sum(len(raw) for raw in txs) > max_tx_bytes:
            return False
        limit = self.max_block_gas
        return limit is None or sum(self._gas_wanted(raw) for raw in txs) <= limit

    # ---- blocks ------------------------------------------------------------------------------
    def finalize_block(
        self, height: int, time_ns: int, txs: list[bytes], block_hash: bytes = b"",
        proposer: bytes = b"", votes: Sequence[validator_set.Vote] = (),
        evidence: Sequence[validator_set.Evidence] = (),
    ) -> FinalizedBlock:  # fmt: skip
        """Execute a block: what CometBFT reports of the last commit (``votes``) and of
        misbehaviour (``evidence``), the txs in order, then end-of-block work, which ends with
        the validator set's changes; nothing is persisted yet."""
        if height != self.height + 1:
            raise ValueError(f"expected block {self.height + 1}, got {height}")
        if self._pending is not None:  # finalized again without a commit: start over
            self.tree = StateTree(self.store.iterate(b""))
        state = CacheStore(self.store)
        last_hash = self.store.meta("last_block_hash") or b""
        block_ctx = Context(state, height, time_ns, self.chain_id, self.params, [], last_hash)
        for found in evidence:  # each on its own: one that fails drops no other
            _isolated("evidence", lambda c, e=found: validator_set.punish(c, e), block_ctx)
        _isolated("downtime", lambda c: validator_set.count_votes(c, votes), block_ctx)
        timestamp = block_timestamp(time_ns)
        results = []
        for raw in txs:
            result = self._run_tx(state, raw, height, time_ns, Mode.DELIVER)
            result.txhash = tx_hash(raw).hex().upper()
            result.height = height
            result.timestamp = timestamp
            results.append(result)
        for module in END_BLOCKERS:
            _isolated(module.__name__, module.end_block, block_ctx)
        updates = _isolated("validator_set", validator_set.end_block, block_ctx) or []
        state.set(BLOCK_KEY, b"%d/%d/%s" % (height, time_ns, block_hash.hex().encode()))
        finalized = FinalizedBlock(
            StoredBlock(height, block_hash, time_ns, proposer),
            txs,
            results,
            self.tree.update(state.writes),
            updates,
            block_ctx.events or [],
        )
        self._pending = (finalized, state)
        return finalized

    # ---- state sync --------------------------------------------------------------------------
    def restore_rows(self, rows: list[tuple[bytes, bytes]]) -> None:
        """Write one snapshot chunk's state rows (an empty node restoring)."""
        if self.height or self.store.meta("genesis") is not None:
            raise ValueError("only an empty node restores a snapshot")
        self.store.commit(dict(rows), {})  # no height or hash yet: see finish_restore

    def finish_restore(self, height: int, app_hash: bytes) -> bool:
        """Accept the restored state as that of ``height`` if its root is ``app_hash`` (the
        hash CometBFT verified) and it is the state of that block; else delete it."""
        tree = StateTree(self.store.iterate(b""))
        raw = self.store.get(BLOCK_KEY) or b"0/0/"
        block_height, time_ns, block_hash = raw.split(b"/", 2)
        if tree.root != app_hash or int(block_height) != height:
            log.warning("snapshot of height %d refused: its state hashes to %s, not %s",
                        height, tree.root.hex()[:16], app_hash.hex()[:16])  # fmt: skip
            self.store.clear_state()
            return False
        meta = {
            "genesis": self.genesis.model_dump_json().encode(),
            "height": str(height).encode(),
            "app_hash": app_hash,
            "time_ns": time_ns,
            "last_block_hash": bytes.fromhex(block_hash.decode()),
        }
        self.store.commit({}, meta)
        self.tree = tree
        self._reset_check_state()
        log.info("state restored from a snapshot of height %d", height)
        return True

    def abandon_restore(self) -> None:
        """Delete a partly restored state (before another snapshot is tried)."""
        if not self.height:
            self.store.clear_state()

    def commit(self) -> None:
        """Persist the finalized block and its state changes in one transaction."""
        if self._pending is None:
            raise ValueError("commit without a finalize_block")
        finalized, state = self._pending
        block = finalized.block
        meta = {
            "height": str(block.height).encode(),
            "app_hash": finalized.app_hash,
            "time_ns": str(block.time_ns).encode(),
            "last_block_hash": block.hash,
        }
        self.store.commit(state.writes, meta, block)
        self.decoded.discard(finalized.txs)
        self._pending = None
        self._reset_check_state()
