"""The global state a host knows, and how it moves forward: the outer step over a round's
accepted pseudo-gradients, fetched from peers while their hosts are up."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import cached_property

import torch

from dilochain.artifacts.blob_service import PeerFetchingStore
from dilochain.artifacts.store import ArtifactError, ArtifactTooLarge
from dilochain.node.errors import NodeError
from dilochain.poc_client import PocClient
from dilochain.protocol.hashing import content_hash
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    CommitOutcome,
    GlobalCheckpoint,
    RoundCommit,
    RunConfig,
)
from dilochain.protocol.schedule import base_round
from dilochain.training.artifact_limits import ArtifactLimits
from dilochain.training.compress import CompressionError, decompress
from dilochain.training.diloco import (
    global_state_problem,
    outer_step,
    params_of,
    pseudo_gradient_problem,
    relative_l2,
)
from dilochain.training.tensor_codec import CodecError, decode_state, encode_state

log = logging.getLogger(__name__)

# How far (relative L2 over the whole state, parameters and momentum) the chain's global state
# of a round may be from the one this host computed for it and still be adopted: machines may
# differ in the last bits (another machine's float64 DCT breaking a tie another way), which is
# orders of magnitude less; anything more is not the aggregate of the round before.
ADOPT_TOLERANCE = 1e-5


class UncheckedGlobalState(ArtifactError):
    """The chain recorded a global state other than this host's for a round, and its bytes
    are on no peer (or are not a state of the run): the host cannot compare them with its
    own, so it sits the round out and asks again; it never jumps past the round to the
    chain's latest state (withholding a foreign state for a round would otherwise make every
    honest host take the next one unchecked)."""


class ForeignGlobalState(NodeError):
    """The chain recorded a global state that is not the aggregate this host computed: most
    of a round's commits named it (hosts that outnumbered the honest ones, or one commit in a
    round every honest host sat out). The host trains no further on it."""


@dataclass
class GlobalView:
    """The global state the node knows: θ_round and the outer momentum (never mutated)."""

    round: int
    state: dict[str, torch.Tensor]
    parent: bytes = b""  # hash of θ_{round-1}, when this node computed θ_round from it

    @cached_property
    def encoded(self) -> bytes:
        """The canonical encoding, as published."""
        return encode_state(self.state)

    @cached_property
    def hash(self) -> bytes:
        """Hash of the canonical encoding (what the chain records)."""
        return content_hash(self.encoded)


def aggregated(commit: RoundCommit, fail_closed: bool = True) -> bool:
    """Whether a resolved commit enters the next global state: on a fail-closed chain only
    when its resolution ACCEPTED it (a quorum screened it passing, every challenge passed);
    otherwise whenever it did not fail."""
    if fail_closed:
        return commit.outcome == CommitOutcome.COMMIT_OUTCOME_ACCEPTED
    return not commit.excluded


class Aggregator:
    """Advances a run's global state round by round, as every host and the chain agree."""

    def __init__(
        self,
        poc: PocClient,
        run_id: str,
        rc: RunConfig,
        store: PeerFetchingStore,
        accepted: PeerFetchingStore | None = None,
        patience: float = 120.0,
        min_hosts: int = 1,
        fail_closed: bool = True,
        reference: dict[str, torch.Tensor] | None = None,
    ):
        self.poc = poc
        self.run_id = run_id
        self.rc = rc
        self.store = store
        self.accepted = accepted or store  # what the chain accepted: also from its verifiers
        self.patience = patience
        self.min_hosts = min_hosts
        self.fail_closed = fail_closed
        self.reference = reference  # the model's parameters: what a global state must fit

    def recorded(self) -> dict[int, bytes]:
        """The chain's global checkpoint hash of every round so far."""
        return {g.round: g.hash for g in self.poc.global_checkpoints(self.run_id)}

    def fetch(self, digest: bytes, limit: int, last: str | None = None) -> bytes:
        """An accepted artifact of at most ``limit`` bytes from the local store or a source of
        accepted ones (peers, then verifiers; ``last``, the endpoint of the host that committed
        it, after them all), waiting for one that is restarting."""
        deadline, logged = time.monotonic() + self.patience, False
        while True:
            try:
                return self.accepted.get(digest, limit=limit, last=last)
            except ArtifactTooLarge:  # as large on every disk: waiting cannot change it
                raise
            except ArtifactError as err:
                if time.monotonic() > deadline:
                    raise
                if not logged:
                    log.warning("waiting up to %.0f s for artifact %s: %s", self.patience,
                                digest.hex()[:12], err)  # fmt: skip
                    logged = True
                time.sleep(1.0)

    def _decided_commits(self, round_: int) -> list:
        """A round's commits once the chain has decided their outcomes. The round is decided
        when this is asked, but the node that answers may be a block or two behind the one that
        said so (clients fail over between nodes): a pending outcome is asked for again, for up
        to ``patience`` seconds, on any chain (a fail-open one aggregates a pending commit the
        decision may yet exclude), and then an :class:`ArtifactError` (the host resyncs or sits
        the round out), never a state built on outcomes the others do not see."""
        deadline = time.monotonic() + self.patience
        while True:
            found = self.poc.commits(self.run_id, round_)
            pending = [c for c in found if c.outcome == CommitOutcome.COMMIT_OUTCOME_PENDING]
            if not pending:
                return found
            if time.monotonic() > deadline:
                raise ArtifactError(f"round {round_}: {len(pending)} commits still undecided "
                                    f"after {self.patience:.0f} s")  # fmt: skip
            time.sleep(0.5)

    def global_state(self, digest: bytes) -> dict[str, torch.Tensor]:
        """The global state the chain names by ``digest``, fetched and checked: bytes that are
        not a state of the run (most of a round's commits may name anything) are an
        :class:`ArtifactError`, which a host answers by resyncing or sitting the round out."""
        try:
            state = decode_state(self.fetch(digest, ArtifactLimits.of(self.rc).state),
                                 self.reference)  # fmt: skip
        except CodecError as err:
            raise ArtifactError(
                f"global state {digest.hex()[:12]}… does not decode: {err}"
            ) from None
        problem = None if self.reference is None else global_state_problem(state, self.reference)
        if problem is not None:
            raise ArtifactError(f"global state {digest.hex()[:12]}… is not one of the run's "
                                f"model: {problem}")  # fmt: skip
        return state

    def prefetch(self, rounds: range) -> None:
        """Fetch the committed pseudo-gradients of ``rounds`` that are not here yet."""
        for c in (c for r in rounds for c in self.poc.commits(self.run_id, r)):
            if not self.store.has(c.pseudo_grad_hash):
                try:  # one pass over the peers, to disk (an artifact of up to the run's
                    # largest size, whatever a stranger committed, is not held in memory)
                    self.store.warm(c.pseudo_grad_hash, ArtifactLimits.of(self.rc).pseudo_grad,
                                    attempts=1)  # fmt: skip
                except ArtifactError as err:
                    log.debug("prefetch of %s failed: %s", c.pseudo_grad_hash.hex()[:12], err)

    def latest(self, vouched: bool = False) -> GlobalView | None:
        """The chain's latest recorded global state, fetched (None before round 0 is; with
        ``vouched``, also when most of the roster of the round whose commits recorded it did
        not name it: a host that cannot check a state takes it only on that word)."""
        records = self.poc.global_checkpoints(self.run_id)
        if not records:
            return None
        record = max(records, key=lambda g: g.round)
        if vouched and not self._vouched_for(record):
            return None
        return GlobalView(record.round, self.global_state(record.hash))

    def _vouched_for(self, record: GlobalCheckpoint) -> bool:
        """Whether most of the roster of the round whose commits recorded ``record`` named it
        (in an overlapped run θ_r is recorded by round r+1's commits; θ_0 by round 0's)."""
        named_by = record.round + 1 if self.rc.overlap and record.round else record.round
        roster = self.poc.roster(self.run_id, named_by)
        return roster is not None and 2 * record.agreeing > len(roster)

    def adopted(self, view: GlobalView, digest: bytes) -> GlobalView:
        """The chain's global state ``digest`` of ``view``'s round in place of this host's
        (:meth:`checked`), or :class:`UncheckedGlobalState` if it cannot be read."""
        try:
            theirs = self.global_state(digest)
        except ArtifactError as err:
            raise UncheckedGlobalState(
                f"round {view.round}: the chain's global state differs "
                f"from this host's and cannot be checked: {err}"
            ) from None
        return self.checked(view, GlobalView(view.round, theirs))

    def checked(self, ours: GlobalView, theirs: GlobalView) -> GlobalView:
        """``theirs`` (the chain's state of ``ours``'s round) when the two differ by float
        differences between machines at most; else :class:`ForeignGlobalState`."""
        try:
            gap = relative_l2(theirs.state, ours.state)
        except ValueError:  # not even the same tensors (a state checked against no model)
            gap = float("inf")
        if gap > ADOPT_TOLERANCE:
            what = f"the aggregate of round {ours.round - 1}" if ours.round else "the initial state"
            raise ForeignGlobalState(
                f"round {ours.round}: the chain recorded global state {theirs.hash.hex()[:12]}…, "
                f"which is not {what} that this host computed "
                f"({ours.hash.hex()[:12]}…; relative distance {gap:.1e}, more than machines' "
                f"float differences, {ADOPT_TOLERANCE:g}): most of the round's commits named a "
                "state their hosts did not aggregate. Not training on it; see 'Foreign global "
                "states' in docs/DESIGN.md"
            )
        if gap:
            log.warning("round %d: local global state differs from the chain's by float "
                        "differences (relative %.1e); adopting the chain's",
                        ours.round, gap)  # fmt: skip
        return theirs

    def advance(self, view: GlobalView) -> GlobalView:
        """θ_{r+1} from θ_r and round r's aggregated commits (:func:`aggregated`, built on the
        global state round r builds on: θ_r, or θ_{r-1} in an overlapped run); θ_r itself
        (momentum too) when fewer than ``min_hosts`` were accepted."""
        recorded = self.recorded()
        if recorded.get(view.round, view.hash) != view.hash:
            view = self.adopted(view, recorded[view.round])
        based_on = base_round(self.rc, view.round)
        known = view.hash if based_on == view.round else view.parent
        base, params = recorded.get(based_on, known), params_of(view.state)
        if not base:  # overlapped, θ_{r-1} unrecorded and this view's parent forgotten
            raise ArtifactError(f"round {view.round}: the state its commits built on (round "
                                f"{based_on}'s) is neither recorded nor known here")  # fmt: skip
        deltas, owners, undecided = [], None, 0
        for c in self._decided_commits(view.round):
            undecided += c.outcome == CommitOutcome.COMMIT_OUTCOME_UNDECIDED
            if c.base_hash != base or not aggregated(c, self.fail_closed):
                continue
            if owners is None and not self.accepted.has(c.pseudo_grad_hash):
                owners = {h.address: h.endpoint for h in self.poc.hosts(self.run_id)}
            # Its own host last: one that served its screeners and drips it to hosts would
            # otherwise hold every host for the stream's whole allowance before the verifiers.
            owner = (owners or {}).get(c.host)
            try:
                limit = ArtifactLimits.of(self.rc).pseudo_grad
                data = self.fetch(c.pseudo_grad_hash, limit, last=owner)
                delta = decompress(data, params, self.rc.compression)
            except CompressionError as err:
                problem = str(err)
            else:
                problem = pseudo_gradient_problem(delta, params)
            if problem is None:
                deltas.append(delta)
            else:
                log.warning("round %d: %s's pseudo-gradient is left out: %s",
                            view.round, c.host, problem)  # fmt: skip
        if 0 < len(deltas) < self.min_hosts:
            log.warning("round %d: %d accepted pseudo-gradients, fewer than the %d a round "
                        "needs; the global state carries over", view.round, len(deltas),
                        self.min_hosts)  # fmt: skip
            deltas = []
        if undecided and not deltas:  # what a run with too few verifiers meets, and nothing said
            log.warning("round %d: %d commits undecided (their challenges had no quorum of "
                        "verifier votes): neither paid nor aggregated, the model does not "
                        "move; the run needs as many verifiers serving it as the chain's "
                        "quorum (`dilochain query poc params`)", view.round,
                        undecided)  # fmt: skip
        state = outer_step(view.state, deltas, self.rc.outer_lr, self.rc.outer_momentum)
        nxt = GlobalView(view.round + 1, state, view.hash)
        self.store.put(nxt.encoded)
        log.info("round %d aggregated %d pseudo-gradients", view.round, len(deltas))
        return nxt


def advance_or_resync(aggregator: Aggregator, view: GlobalView, round_: int) -> GlobalView | None:
    """``view`` one aggregation on, for a host catching up to round ``round_``. If a
    pseudo-gradient (or a global state) it needs is on no peer, it logs one line and takes the
    chain's newest recorded global state instead, when there is a newer one that most of its
    round's hosts named, but never past a recorded state that differs from its own and cannot
    be checked: then None (the host sits the round out)."""
    try:
        return aggregator.advance(view)  # evaluated by the committer
    except UncheckedGlobalState as err:  # never skipped for the chain's latest
        log.warning("round %d: sitting it out: %s", round_, err)
        return None
    except ArtifactError as err:
        log.warning("round %d: cannot aggregate round %d (%s); resyncing from the "
                    "chain's global checkpoints", round_, view.round, err)  # fmt: skip
    try:  # unchecked: only a state most of its round's hosts named
        latest = aggregator.latest(vouched=True)
    except ArtifactError as again:
        log.warning("round %d: sitting it out: %s", round_, again)
        return None
    if latest is None or latest.round <= view.round:
        log.warning("round %d: sitting it out: no newer global state recorded "
                    "that most of its round's hosts named", round_)  # fmt: skip
        return None
    return latest
