"""The host node: registers, trains round after round, publishes, commits, resumes.

Each round r: bring the global state up to θ_r (aggregating the resolved rounds' unexcluded
pseudo-gradients, or syncing to the chain's recorded global checkpoint), train H inner steps,
publish the checkpoints and the compressed pseudo-gradient, commit their hashes in a
``MsgCommitRound``, reveal whichever segments the chain challenges, and wait for the round to
resolve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from functools import cached_property

import grpc
import torch
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.wallet import Wallet

from dilochain.client import TxRefused, submit
from dilochain.node.artifacts import ArtifactError, LocalArtifactStore
from dilochain.node.blob_service import PeerFetchingStore, serve_blobs
from dilochain.node.cheats import cheat_round
from dilochain.node.compress import decompress
from dilochain.node.config import NodeConfig
from dilochain.node.data import Corpus, corpus_hash, load_text
from dilochain.node.diloco import initial_global, outer_step, params_of
from dilochain.node.errors import NodeError
from dilochain.node.model import build_model
from dilochain.node.round_work import RoundResult, train_round
from dilochain.node.tensor_codec import decode_state, encode_state
from dilochain.node.train_step import eval_loss, set_deterministic
from dilochain.poc_client import InsufficientFunds, PocClient, ensure_bonded
from dilochain.protocol.merkle import merkle_proof
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitRound,
    MsgRegisterHost,
    MsgRevealCheckpoints,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Run

log = logging.getLogger(__name__)


@dataclass
class GlobalView:
    """The global state the node knows: θ_round and the outer momentum (never mutated)."""

    round: int
    state: dict[str, torch.Tensor]

    @cached_property
    def encoded(self) -> bytes:
        """The canonical encoding, as published."""
        return encode_state(self.state)

    @cached_property
    def hash(self) -> bytes:
        """Hash of the canonical encoding (what the chain records)."""
        return hashlib.sha256(self.encoded).digest()


class HostNode:
    """One host operator's node for one run."""

    def __init__(self, cfg: NodeConfig, client: LedgerClient, wallet: Wallet):
        self.cfg = cfg
        self.client = client
        self.wallet = wallet
        self.address = str(wallet.address())
        self.poc = PocClient(cfg.chain)
        self.rc = self._query_run().config
        text = load_text(cfg.data)
        if corpus_hash(text) != self.rc.corpus_hash:
            raise NodeError(
                f"the training text does not match run {cfg.run_id!r}'s corpus "
                f"({corpus_hash(text)[:12]}… vs {self.rc.corpus_hash[:12]}…)"
            )
        self.corpus = Corpus.from_text(text, self.rc.num_shards)
        self.heldout = self.corpus.heldout_batches(4, self.rc.batch_size, self.rc.model.context)
        self.device = torch.device(cfg.device)
        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise NodeError("--device cuda: no CUDA device is available")
        set_deterministic(cfg.threads)
        self.model = build_model(self.rc.model, self.rc.seed).to(self.device)
        self.local = LocalArtifactStore(cfg.artifact_dir)
        self.store = PeerFetchingStore(self.local, self._peer_endpoints)
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.eval_losses: dict[int, float] = {}
        self.checkpoint_hashes: list[bytes] = []  # of the last round this node committed

    # ---- chain queries -----------------------------------------------------------------------
    def _query_run(self) -> Run:
        try:
            run = self.poc.run(self.cfg.run_id)
        except grpc.RpcError as err:
            raise NodeError(f"chain unreachable at {self.cfg.chain}: {err.details()}") from None
        if run is None:
            raise NodeError(f"unknown run {self.cfg.run_id!r}")
        return run

    def _peer_endpoints(self) -> list[str]:
        hosts = self.poc.hosts(run_id=self.cfg.run_id)
        return [h.endpoint for h in hosts if h.address != self.address and h.endpoint]

    def _round_info(self) -> q.QueryRoundInfoResponse:
        return self.poc.round_info(run_id=self.cfg.run_id)

    def _commits(self, round_: int):
        return self.poc.commits(self.cfg.run_id, round_)

    def _recorded_globals(self) -> dict[int, bytes]:
        return {g.round: g.hash for g in self.poc.global_checkpoints(self.cfg.run_id)}

    def _send(self, *msgs) -> None:
        submit(self.client, self.wallet, *msgs, poll=self.cfg.poll_seconds)

    # ---- registration ------------------------------------------------------------------------
    def ensure_registered(self, endpoint: str) -> None:
        """Bond the run's minimum collateral and register (or move) this host's endpoint."""
        hosts = {h.address: h for h in self.poc.hosts(self.cfg.run_id)}
        mine = hosts.get(self.address)
        if mine is not None and mine.endpoint == endpoint:
            return
        msgs = []
        if mine is None:
            try:
                msgs = ensure_bonded(
                    self.client, self.poc, self.wallet, int(self.rc.min_collateral)
                )
            except InsufficientFunds as err:
                raise NodeError(f"no collateral for run {self.cfg.run_id!r}: {err}") from None
        msgs.append(MsgRegisterHost(host=self.address, run_id=self.cfg.run_id, endpoint=endpoint))
        try:
            self._send(*msgs)
        except TxRefused as err:
            raise NodeError(f"registration in run {self.cfg.run_id!r} refused: {err}") from None
        log.info("registered in run %s (blob endpoint %s)", self.cfg.run_id, endpoint)

    # ---- global state ------------------------------------------------------------------------
    def _state_file(self):
        return self.cfg.state_dir / "state.json"

    def _save(
        self, view: GlobalView, error: dict[str, torch.Tensor] | None, attempted: int
    ) -> None:
        self.local.put(view.encoded)
        record = {
            "round": view.round,
            "global_hash": view.hash.hex(),
            "error_hash": self.local.put(encode_state(error)).hex() if error else None,
            "attempted": attempted,
            "checkpoint_hashes": [h.hex() for h in self.checkpoint_hashes],
        }
        tmp = self._state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._state_file())

    def _load(self) -> tuple[GlobalView, dict[str, torch.Tensor] | None, int]:
        """Resume from the state file, else from the chain's latest global checkpoint, else θ_0."""
        path = self._state_file()
        if path.exists():
            try:
                record = json.loads(path.read_text())
                self.checkpoint_hashes = [bytes.fromhex(h) for h in record["checkpoint_hashes"]]
                global_hash, error_hash = record["global_hash"], record["error_hash"]
                round_, attempted = int(record["round"]), int(record["attempted"])
            except (ValueError, KeyError, TypeError) as err:
                raise NodeError(f"{path} is unreadable ({err!r}); move it away to resync") from None
            state = decode_state(self.local.get(bytes.fromhex(global_hash)))
            error = decode_state(self.local.get(bytes.fromhex(error_hash))) if error_hash else None
            return GlobalView(round_, state), error, attempted
        recorded = self._recorded_globals()
        if recorded:
            latest = max(recorded)
            return GlobalView(latest, decode_state(self._fetch(recorded[latest]))), None, -1
        params = {n: p.detach().cpu().clone() for n, p in self.model.named_parameters()}
        return GlobalView(0, initial_global(params)), None, -1

    def _fetch(self, digest: bytes, patience: float = 120.0) -> bytes:
        """An artifact from the local store or a peer, waiting for a peer that is restarting."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return self.store.get(digest)
            except ArtifactError as err:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for artifact %s: %s", digest.hex()[:12], err)
                time.sleep(1.0)

    def advance(self, view: GlobalView) -> GlobalView:
        """θ_{r+1} from θ_r and round r's accepted commits (those that started from θ_r)."""
        recorded = self._recorded_globals().get(view.round)
        if recorded is not None and recorded != view.hash:
            log.warning(
                "round %d: local global state differs from the chain's; resyncing", view.round
            )
            view = GlobalView(view.round, decode_state(self._fetch(recorded)))
        base = view.hash
        deltas = [
            decompress(self._fetch(c.pseudo_grad_hash))
            for c in self._commits(view.round)
            if c.base_hash == base and not c.excluded
        ]
        state = outer_step(view.state, deltas, self.rc.outer_lr, self.rc.outer_momentum)
        nxt = GlobalView(view.round + 1, state)
        self.local.put(nxt.encoded)
        log.info("round %d aggregated %d pseudo-gradients; eval loss %.4f",
                 view.round, len(deltas), self.evaluate(nxt))  # fmt: skip
        return nxt

    def evaluate(self, view: GlobalView) -> float:
        """Held-out loss of a global state (cached per round)."""
        if view.round not in self.eval_losses:
            params = {k: v.to(self.device) for k, v in params_of(view.state).items()}
            self.model.load_state_dict(params, strict=True)
            self.eval_losses[view.round] = eval_loss(self.model, self.heldout)
        return self.eval_losses[view.round]

    # ---- the loop ------------------------------------------------------------------------------
    def publish_and_commit(self, view: GlobalView, result: RoundResult) -> bool:
        """Publish a round's artifacts and commit their hashes; False if the chain refused."""
        for data in result.checkpoints:
            self.local.put(data)
        pg_hash = self.local.put(result.pseudo_grad)
        msg = MsgCommitRound(
            host=self.address, run_id=self.cfg.run_id, round=view.round,
            ckpt_root=result.ckpt_root, pseudo_grad_hash=pg_hash, data_seed=result.data_seed,
            tokens=result.tokens, loss=result.loss, base_hash=view.hash,
            eval_loss=self.evaluate(view),
        )  # fmt: skip
        try:
            self._send(msg)
        except TxRefused as err:
            log.warning("round %d commit refused: %s", view.round, err)
            return False
        log.info("round %d committed: loss %.4f, pseudo-gradient %s (%d bytes)",
                 view.round, result.loss, pg_hash.hex()[:12], len(result.pseudo_grad))  # fmt: skip
        return True

    def _wait_for_height(
        self, height: int, stop: threading.Event, prefetch_round: int | None = None
    ) -> None:
        """Poll until ``height`` is committed, meanwhile fetching the round's new pseudo-gradients
        (while their hosts are surely up) so aggregation does not depend on them later."""
        while not stop.is_set() and self._round_info().height < height:
            if prefetch_round is not None:
                self._prefetch(prefetch_round)
            stop.wait(self.cfg.poll_seconds)

    def _prefetch(self, round_: int) -> None:
        for c in self._commits(round_):
            if not self.local.has(c.pseudo_grad_hash):
                try:
                    self.store.get(c.pseudo_grad_hash)
                except ArtifactError as err:
                    log.debug("prefetch of %s failed: %s", c.pseudo_grad_hash.hex()[:12], err)

    def reveal(self, round_: int) -> None:
        """Reveal every challenged segment of this host's round ``round_`` (with Merkle proofs)."""
        mine = [c for c in self.poc.challenges(self.cfg.run_id, round_)
                if c.host == self.address and not c.revealed]  # fmt: skip
        if not mine or self.cfg.behavior == "no-reveal" or not self.checkpoint_hashes:
            return
        leaves, msgs = self.checkpoint_hashes, []
        for c in mine:
            end = leaves[c.segment + 1]
            if self.cfg.behavior == "bad-reveal":
                end = hashlib.sha256(b"not my checkpoint" + end).digest()
            msgs.append(MsgRevealCheckpoints(
                host=self.address, run_id=self.cfg.run_id, round=round_, segment=c.segment,
                start_hash=leaves[c.segment], end_hash=end, final_hash=leaves[-1],
                start_proof=merkle_proof(leaves, c.segment),
                end_proof=merkle_proof(leaves, c.segment + 1),
                final_proof=merkle_proof(leaves, len(leaves) - 1),
            ))  # fmt: skip
        try:
            self._send(*msgs)
            log.info("round %d: revealed segments %s", round_, [c.segment for c in mine])
        except TxRefused as err:
            log.warning("round %d reveal refused: %s", round_, err)

    def _train(self, view: GlobalView, error, progress) -> RoundResult:
        args = (
            self.model,
            self.rc,
            self.corpus,
            self.address,
            view.round,
            view.state,
            error,
            progress,
        )
        if self.cfg.behavior in ("honest", "bad-reveal", "no-reveal"):
            return train_round(*args)
        if self.cfg.behavior == "copy-pg":
            result = train_round(*args)
            result.pseudo_grad = self._copied_pseudo_grad(view.round) or result.pseudo_grad
            return result
        return cheat_round(self.cfg.behavior, *args)

    def _copied_pseudo_grad(self, round_: int) -> bytes | None:
        """Another host's pseudo-gradient of this round once one is committed (a cheat)."""
        info = self._round_info()
        while info.round == round_ and info.height + 2 < info.window_end:
            others = [c for c in self._commits(round_) if c.host != self.address]
            if others:
                return self.store.get(others[0].pseudo_grad_hash)
            time.sleep(self.cfg.poll_seconds)
            info = self._round_info()
        return None

    def run(self, stop: threading.Event, progress=None) -> int:
        """Train until the run's last round or ``stop``; returns rounds committed."""
        view, error, attempted = self._load()
        committed = 0
        while not stop.is_set():
            info = self._round_info()
            if info.finished:
                log.info("run %s finished at round %d", self.cfg.run_id, info.round)
                break
            if info.height + 1 < info.window_start:
                self._wait_for_height(info.window_start - 1, stop)  # the round has not begun
                continue
            while view.round < info.round:
                view = self.advance(view)
                self._save(view, error, attempted)
            in_window = info.height + 1 <= info.window_end
            mine = any(c.host == self.address for c in self._commits(view.round))
            if in_window and not mine and attempted < view.round:
                result = self._train(view, error, progress)
                if stop.is_set():
                    break
                attempted = view.round
                if self.publish_and_commit(view, result):
                    error, self.checkpoint_hashes = result.error, result.checkpoint_hashes
                    mine = True
                    committed += 1
                self._save(view, error, attempted)
            if mine:
                self._wait_for_height(info.selection_height, stop, view.round)
                if not stop.is_set():
                    self.reveal(view.round)
            self._wait_for_height(info.resolution_height, stop, view.round)
        return committed

    def serve_and_run(self, stop: threading.Event, progress=None) -> int:
        """Serve the blob service, register, run; stop the server on the way out."""
        try:
            server, endpoint = serve_blobs(self.local, self.cfg.blob_address)
        except ArtifactError as err:
            raise NodeError(str(err)) from None
        try:
            self.ensure_registered(endpoint)
            return self.run(stop, progress)
        except grpc.RpcError as err:
            raise NodeError(f"chain at {self.cfg.chain}: {err.details() or err.code()}") from None
        finally:
            server.stop(grace=1)
