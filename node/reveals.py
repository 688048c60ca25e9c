"""A host's reveals of its challenged segments, apart from its training and without torch: a
restarted host reveals what its last rounds owe within a second or two of starting (from its
resume record, :func:`early_revealer`) and serves what they name (:func:`serve_early`), not once
its model is built — seconds here, minutes at 8B, against a reveal window of a few blocks that
a host misses at the price of a slash."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from cosmpy.aerial.tx_helpers import TxResponse

from dilochain.artifacts.blob_service import serve_blobs
from dilochain.artifacts.store import LocalArtifactStore
from dilochain.client import TxRefused
from dilochain.endpoints import transient
from dilochain.node.resume import RecordDamaged, ResumeState, run_instance, state_file
from dilochain.poc_client import PocClient
from dilochain.protocol.merkle import merkle_proof
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgRegisterHost, MsgRevealCheckpoints
from dilochain.protocol.pb.poc.v1.types_pb2 import Params, Run
from dilochain.protocol.schedule import in_flight, round_window

log = logging.getLogger(__name__)

Hashes = dict[int, list[bytes]]  # per round this host trained lately: its checkpoints' names


class Revealer:
    """Reveals, for every round in flight, this host's challenged segments once the round's
    reveal window opens, on a thread of its own (:meth:`start`). What it knows of the host's
    rounds (``hashes``) and how it reveals (``end_of``, a behaviour's) the node hands it
    when it takes over from an early revealer (:meth:`take_over`)."""

    def __init__(
        self, poc: PocClient, run: Run, params: Params, address: str,
        send: Callable[..., TxResponse], poll_seconds: float, stop: threading.Event,
    ):  # fmt: skip
        self.poc, self.run, self.params, self.address = poc, run, params, address
        self.send, self.poll_seconds, self.stop = send, poll_seconds, stop
        self.hashes: Callable[[], Hashes] = dict
        self.end_of: Callable[[bytes], bytes | None] = lambda end: end  # the honest reveal
        self.round_info = self._round_info
        self.revealed: set[int] = set()  # rounds with nothing left to reveal
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def take_over(
        self, hashes: Callable[[], Hashes], end_of: Callable[[bytes], bytes | None],
        round_info: Callable[[], q.QueryRoundInfoResponse],
    ) -> None:  # fmt: skip
        """From now on reveal ``hashes()``'s rounds the way ``end_of`` says, asking
        ``round_info`` for the chain's height."""
        self.hashes, self.end_of, self.round_info = hashes, end_of, round_info

    def start(self) -> None:
        """Reveal on a thread until :meth:`close` (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="reveals", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop revealing and wait for the thread."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def point_to(self, endpoint: str) -> None:
        """Register ``endpoint`` as this host's blob service where the chain names another (a
        restart listening on a new port): the verifiers fetch what its reveals name there, not
        at the dead one's. Left to the node, which registers once its model is built, when the
        host is no member or the tx fails."""
        try:
            mine = next((h for h in self.poc.hosts(self.run.run_id)
                         if h.address == self.address), None)  # fmt: skip
            if mine is None or mine.left_height or mine.endpoint == endpoint:
                return
            self.send(MsgRegisterHost(host=self.address, run_id=self.run.run_id,
                                      endpoint=endpoint))  # fmt: skip
        except (TxRefused, grpc.RpcError) as err:
            log.warning("blob endpoint not moved to %s yet: %s", endpoint, err)
            return
        log.info("blob endpoint moved to %s", endpoint)

    def window(self, round_: int) -> range:
        """The blocks in which round ``round_``'s challenged segments are revealed."""
        selection = round_window(self.run, self.params, round_).selection
        return range(selection + 1, selection + 1 + self.params.reveal_window_blocks)

    def reveal(self, round_: int, last_height: int) -> bool:
        """Reveal every challenged segment of this host's round ``round_`` (with Merkle proofs),
        waiting for the tx no longer than ``last_height``; whether nothing is left to reveal
        (False: the tx was refused or not included, and the next poll tries again)."""
        leaves = self.hashes().get(round_)
        mine = [c for c in self.poc.challenges(self.run.run_id, round_)
                if c.host == self.address and not c.revealed]  # fmt: skip
        if not leaves:
            if mine:
                log.error("round %d: segments %s are challenged, and this node has no names "
                          "of the round's checkpoints to reveal", round_,
                          [c.segment for c in mine])  # fmt: skip
            return True
        if not mine:  # believed of a node that has drawn the round's challenges (a failover
            # between the height asked and this query may have reached one that has not)
            return self.round_info().height >= round_window(
                self.run, self.params, round_).selection  # fmt: skip
        msgs = []
        for c in mine:
            end = self.end_of(leaves[c.segment + 1])
            if end is None:
                continue
            msgs.append(MsgRevealCheckpoints(
                host=self.address, run_id=self.run.run_id, round=round_, segment=c.segment,
                start_hash=leaves[c.segment], end_hash=end, final_hash=leaves[-1],
                start_proof=merkle_proof(leaves, c.segment),
                end_proof=merkle_proof(leaves, c.segment + 1),
                final_proof=merkle_proof(leaves, len(leaves) - 1),
            ))  # fmt: skip
        if not msgs:
            return True
        try:
            self.send(*msgs, until_height=last_height)
        except TxRefused as err:
            log.warning("round %d reveal refused: %s; trying again", round_, err)
            return False
        log.info("round %d: revealed segments %s", round_, [c.segment for c in mine])
        return True

    def _loop(self) -> None:
        """Reveal until closed (whether the host committed is the chain's to say: a commit sent
        before a crash may be included after the restart). It never dies of an error: a
        reveal it misses is a slash, so it logs the error and tries again."""
        for _ in self.poc.blocks.passes(self._done, self.poll_seconds):
            try:
                next_block = self.round_info().height + 1
                for window in in_flight(self.run, self.params, next_block):
                    last = self.window(window.round)
                    if next_block in last and window.round not in self.revealed:
                        if self.reveal(window.round, last[-1]):
                            self.revealed.add(window.round)
                        else:
                            self._done.wait(1.0)  # refused: again at the next poll, not at once
            except grpc.RpcError as err:
                log.warning("reveals: chain error %s; retrying", err.code())
            except Exception:  # logged; the next block tries again
                log.exception("reveals: unexpected error; retrying")

    def _round_info(self) -> q.QueryRoundInfoResponse:
        return patient_round_info(self.poc, self.run.run_id, self.stop)


def patient_round_info(
    poc: PocClient, run_id: str, stop: threading.Event
) -> q.QueryRoundInfoResponse:
    """The chain's height and run ``run_id``'s round. While no chain node answers it asks
    again every half second until ``stop``: every loop of a host waits on the chain's height
    anyway, an outage must not end a loop, and a chain back from one goes on at once (a reveal
    window is a few blocks)."""
    while True:
        try:
            return poc.round_info(run_id)
        except grpc.RpcError as err:
            if not transient(err) or stop.is_set():
                raise
            stop.wait(0.5)


def early_revealer(
    chain: Sequence[str], run_id: str, chain_id: str, state_dir: Path, address: str,
    send: Callable[..., TxResponse], poll_seconds: float, stop: threading.Event,
) -> Revealer | None:  # fmt: skip
    """A revealer of the rounds this host's resume record owes reveals for, started, before
    the node builds its model (which the node then hands its rounds, and whose chain client it
    uses: :meth:`Revealer.take_over`); None when the record names none of this chain's run
    (no record, a damaged one, which the node rebuilds from its ledger, or another run's)."""
    try:
        record = ResumeState.load(state_file(state_dir))
    except (RecordDamaged, OSError):  # the node says what is wrong with it
        return None
    if record is None or not record.checkpoint_hashes:
        return None
    poc = PocClient(chain)
    try:
        run, params = poc.run(run_id), poc.params()
    except grpc.RpcError:  # the node says what is wrong with the chain
        run = None
    if run is None or (record.run and record.run != run_instance(chain_id, run)):
        poc.close()
        return None
    revealer = Revealer(poc, run, params, address, send, poll_seconds, stop)
    owed = record.checkpoint_hashes
    revealer.hashes = lambda: owed
    revealer.start()
    log.info("revealing what rounds %s owe while the node starts", sorted(owed))
    return revealer


@dataclass(frozen=True)
class Served:
    """A host's blob service, begun before its model is built (:func:`serve_early`)."""

    server: grpc.Server
    endpoint: str  # what it registers (the advertised address, else the one it listens on)
    store: LocalArtifactStore


def serve_early(artifact_dir: Path, blob_address: str, advertise_address: str) -> Served:
    """Serve the host's artifact store from the moment ``node start`` begins: what a
    restart's early reveals name must be fetchable before the verifiers' patience (a few
    blocks after the reveal window) runs out, and a model of 8B takes minutes to build. Raises
    :class:`ArtifactError` when it cannot listen there."""
    store = LocalArtifactStore(artifact_dir)
    server, endpoint = serve_blobs(store, blob_address)
    return Served(server, advertise_address or endpoint, store)
