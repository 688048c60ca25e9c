"""The host node's loop: register, then round after round train, publish, commit, reveal.

Each round r: bring the global state up to the one round r builds on (θ_r; θ_{r-1} in an
overlapped run, :mod:`dilochain.node.aggregation`), train H inner steps from it (from
``diloco.round_start`` in an overlapped run) as the host's
:class:`~dilochain.node.behaviors.Behavior` does, publish the checkpoints and the compressed
pseudo-gradient, commit their hashes in a ``MsgCommitRound`` once round r's window is open, and
go on to round r+1 as soon as its roster is drawn: once round r resolves, or in an overlapped run
once round r-1 does (during round r's window), so a host that trains faster than the window
starts the next round early instead of waiting.
A thread beside the loop reveals whichever segments the chain challenges, in every round in
flight. What it needs to resume after a restart is saved after every step
(:mod:`dilochain.node.resume`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import astuple, dataclass
from pathlib import Path

import grpc
import torch
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.tx_helpers import TxResponse
from cosmpy.aerial.wallet import Wallet

from dilochain.artifacts.blob_service import PeerFetchingStore, fetch_from_peers, serve_blobs
from dilochain.artifacts.object_store import ObjectStore
from dilochain.artifacts.pruning import Entry, Kind, Ledger, Retention
from dilochain.artifacts.store import ArtifactError, LocalArtifactStore
from dilochain.auto_claim import AutoClaimer
from dilochain.client import Sender, TxRefused
from dilochain.endpoints import shown, transient
from dilochain.failpoints import armed, failpoint
from dilochain.metrics_http import set_standing
from dilochain.node import metrics
from dilochain.node.aggregation import Aggregator, GlobalView, advance_or_resync
from dilochain.node.behaviors import Behavior, RoundJob
from dilochain.node.config import NodeConfig
from dilochain.node.errors import NodeError
from dilochain.node.pace import Pace
from dilochain.node.ranks import HostRanks
from dilochain.node.resume import (
    PendingCommit,
    RecordDamaged,
    ResumeState,
    run_instance,
    state_file,
)
from dilochain.node.reveals import Revealer, Served, patient_round_info
from dilochain.poc_client import InsufficientFunds, PocClient, ensure_bonded, last_slash
from dilochain.protocol.hashing import content_hash
from dilochain.protocol.merkle import merkle_proof, merkle_root
from dilochain.protocol.model_config import ModelConfigError, config_hash
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitRound,
    MsgRegisterHost,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, Run
from dilochain.protocol.schedule import (
    Window,
    base_round,
    roster_height,
    round_window,
    window_at,
)
from dilochain.training.artifact_limits import ArtifactLimits
from dilochain.training.checkpoint_codec import (
    INDEX_BYTES,
    CheckpointEncoding,
    checkpoint_objects,
    fetch_checkpoint,
    index_objects,
    store_checkpoint,
)
from dilochain.training.compress import decompress
from dilochain.training.dataset import (
    MANIFEST,
    DataError,
    Dataset,
    DataUnavailable,
    file_sha256,
    find_dataset,
)
from dilochain.training.diloco import initial_global, params_of, round_start
from dilochain.training.model import (
    build_checked_model,
    build_model,
    load_params,
    max_artifact_bytes,
    parameter_count,
)
from dilochain.training.prepare import default_dataset
from dilochain.training.round_work import RoundResult
from dilochain.training.tensor_codec import CodecError, decode_state
from dilochain.training.train_step import EVAL_BATCHES, eval_loss, set_deterministic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chained:
    """What a host's round r commit hands its round r+1, as the chain chains them: the
    pseudo-gradient (an overlapped run's start), the error-feedback residual and the final
    checkpoint (AdamW's moments, in a run with ``carry_inner_state``)."""

    pseudo_grad_hash: bytes
    residual_hash: bytes
    final_hash: bytes


@dataclass(frozen=True)
class Sent:
    """A round handed to the committer thread: the last block its commit can land in, the
    commit's outcome, and what it hands the next round."""

    round: int
    window_end: int
    outcome: Future[bool]
    chained: Chained


def _stored(result: RoundResult) -> list[bytes]:
    """The hash of every object a round's checkpoints are stored as."""
    return [digest for checkpoint in result.checkpoints for digest in checkpoint.hashes()]


class HostNode:
    """One host operator's node for one run."""

    def __init__(
        self, cfg: NodeConfig, client: LedgerClient, wallet: Wallet, behavior: Behavior,
        objects: ObjectStore | None = None, sender: Sender | None = None,
        revealer: Revealer | None = None, served: Served | None = None,
    ):  # fmt: skip
        """``sender``, ``revealer`` and ``served``: what ``node start`` began before torch
        loaded (``reveals.early_revealer``, ``reveals.serve_early``): a restarted host reveals
        what it owes, and serves what its reveals name, before it builds its model."""
        self.cfg = cfg
        self.objects = objects  # where it publishes what others fetch (None: its blob service)
        self.client = client
        self.wallet = wallet
        self.behavior = behavior
        self.address = str(wallet.address())
        metrics.INFO.labels(cfg.run_id, self.address).set(1)
        self.poc = revealer.poc if revealer is not None else PocClient(cfg.chain)
        self.run_ = self._query_run()
        self.rc = self.run_.config
        params = self.chain_params = self.poc.params()
        self.data = self._dataset()
        self.device = torch.device(cfg.device)
        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise NodeError("--device cuda: no CUDA device is available")
        set_deterministic(cfg.threads)
        try:
            self.model = build_checked_model(
                self.rc.model_config, self.rc.seed, params.max_model_parameters
            ).to(self.device)
        except ModelConfigError as err:
            raise NodeError(f"run {cfg.run_id!r}: {err}") from None
        self.data.check_vocab(self.model.config.vocab_size)
        if cfg.compile:
            self._compile(params.verification_mode)
        self.heldout = self.data.heldout_batches(EVAL_BATCHES, self.rc.batch_size,
                                                 self.rc.seq_len)  # fmt: skip
        self.ranks = self._ranks(params.verification_mode)
        self._served = served
        self.local = served.store if served is not None else LocalArtifactStore(cfg.artifact_dir)
        for path, digest in self.data.files():  # served by hash to peers (and `dilochain export`)
            self.local.link_file(path, bytes.fromhex(digest))
        limit = max_artifact_bytes(self.model)
        self.limits = ArtifactLimits.of(self.rc)  # each kind's: a fetch stops past it
        self.like = dict(self.model.named_parameters())
        log.info("run %s: %s model, %d parameters, config sha256 %s…", cfg.run_id,
                 self.model.config.model_type, parameter_count(self.model),
                 config_hash(self.rc.model_config)[:12])  # fmt: skip
        log.info("data: %s (%d shards, vocabulary %d)", self.data.root, self.data.num_shards,
                 self.data.manifest.vocab_size)  # fmt: skip
        self.store = PeerFetchingStore(self.local, self._peer_endpoints, limit)
        self.aggregator = Aggregator(self.poc, cfg.run_id, self.rc, self.store,
                                     PeerFetchingStore(self.local, self._accepted_sources, limit),
                                     min_hosts=params.min_hosts_per_round,
                                     fail_closed=params.fail_closed,
                                     reference=self.like)  # fmt: skip
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.eval_losses: dict[int, float] = {}
        self._prefetching: threading.Thread | None = None  # fetching peers' pseudo-gradients
        # Commits and evaluations run beside training: they get a model of their own.
        self.eval_model = build_model(self.rc.model_config, self.rc.seed).to(self.device)
        self._eval_lock = threading.Lock()
        self.pace = Pace()
        # Per round this node trained lately: its checkpoint hashes (for its reveals).
        self.checkpoint_hashes: dict[int, list[bytes]] = {}
        self.sender = sender or Sender(self.client, wallet)  # the auto-claimer's key too
        self.ledger = Ledger(cfg.state_dir)
        self.retention = Retention(cfg.keep_global_states, cfg.archive_every,
                                   cfg.keep_decided_rounds)  # fmt: skip
        self._stopping = threading.Event()  # the run's stop, once it runs
        self.revealer = revealer or Revealer(
            self.poc,
            self.run_,
            params,
            self.address,
            self._send,
            cfg.poll_seconds,
            self._stopping,
        )

    # ---- chain -------------------------------------------------------------------------------
    def _query_run(self) -> Run:
        try:
            run = self.poc.run(self.cfg.run_id)
        except grpc.RpcError as err:
            nodes = shown(self.cfg.chain)
            raise NodeError(f"chain unreachable at {nodes}: {err.details()}") from None
        if run is None:
            raise NodeError(f"unknown run {self.cfg.run_id!r}")
        return run

    def _compile(self, verification_mode: str) -> None:
        """``torch.compile`` the model in place (parameter names unchanged). Compiled kernels
        round differently from the eager ones a verifier replays with, so only where the chain
        verifies in tolerance mode."""
        if verification_mode == "exact":
            raise NodeError("--compile: this chain verifies replays exactly, and compiled "
                            "kernels do not round as the verifiers' eager ones do")  # fmt: skip
        self.model.compile()
        log.info("model compiled with torch.compile (first steps include compilation)")

    def _ranks(self, verification_mode: str) -> HostRanks | None:
        """The host's other local ranks (``--nproc-per-node``), started; None for one process.
        One-process verifiers replay an N-process step within tolerance, never bit for bit."""
        world = self.cfg.nproc_per_node
        if world == 1:
            return None
        if verification_mode == "exact":
            raise NodeError(
                f"--nproc-per-node {world}: this chain verifies replays exactly, and averaged "
                "per-process gradients round otherwise"
            )
        if self.rc.batch_size % world:
            raise NodeError(f"--nproc-per-node {world}: run {self.cfg.run_id!r}'s batch size "
                            f"{self.rc.batch_size} does not divide by it")  # fmt: skip
        if self.cfg.device == "cuda" and torch.cuda.device_count() < world:
            raise NodeError(f"--nproc-per-node {world}: only {torch.cuda.device_count()} GPUs")
        log.info("training data-parallel over %d local processes", world)
        return HostRanks(world, self.rc, self.data, self.cfg.device, self.cfg.threads)

    def _dataset(self) -> Dataset:
        """The run's dataset: ``--data``; else the shipped one if the run uses it; else fetched
        by hash from the run's hosts into ``HOME/datasets/`` (kept for restarts)."""
        pins = (self.rc.data_manifest_hash, self.rc.tokenizer_hash)
        if self.cfg.data:
            return find_dataset([self.cfg.data], *pins)
        shipped = default_dataset(self.cfg.home)
        if file_sha256(shipped / MANIFEST) == self.rc.data_manifest_hash:
            return Dataset(shipped, *pins)
        root = self.cfg.home / "datasets" / self.rc.data_manifest_hash[:16]
        log.info("fetching run %s's dataset from its hosts into %s", self.cfg.run_id, root)
        return Dataset(root, *pins, fetch=self._fetch_data)

    def _fetch_data(self, digest: str, limit: int, out) -> None:
        try:
            fetch_from_peers(self._peer_endpoints(), bytes.fromhex(digest), limit, out=out)
        except ArtifactError as err:
            raise DataUnavailable(f"the run's dataset: {err}") from None

    def _peer_endpoints(self) -> list[str]:
        hosts = self.poc.hosts(self.cfg.run_id)
        return [h.endpoint for h in hosts if h.address != self.address and h.endpoint]

    def _accepted_sources(self) -> list[str]:
        """Where this host fetches what the chain accepted (pseudo-gradients, global states):
        the run's other hosts, then the verifiers' blob services, which serve what they
        screened (an accepted pseudo-gradient whose host serves it to its screeners and to no
        host would otherwise stall the run). Only there: a verifier is no source of what it
        never saw, and one that went silent would hold every other fetch for its timeout."""
        return self._peer_endpoints() + self.poc.verifier_endpoints()

    def _registered(self) -> bool:
        return any(h.address == self.address and not h.left_height
                   for h in self.poc.hosts(self.cfg.run_id))  # fmt: skip

    def _round_info(self) -> q.QueryRoundInfoResponse:
        """:func:`~dilochain.node.reveals.patient_round_info`, noting the height for the pace."""
        info = patient_round_info(self.poc, self.cfg.run_id, self._stopping)
        self.pace.observe(info.height)
        return info

    def _send(self, *msgs, until_height: int | None = None) -> TxResponse:
        """Send one tx; with ``until_height``, stop waiting for it once the chain is past that
        height (a window that closed: the tx can no longer be included)."""
        return self.sender.submit(*msgs, poll=self.cfg.poll_seconds, until_height=until_height)

    def ensure_registered(self, endpoint: str) -> None:
        """Bond the run's minimum collateral and register (or move) this host's endpoint."""
        hosts = {h.address: h for h in self.poc.hosts(self.cfg.run_id)}
        mine = hosts.get(self.address)
        member = mine is not None and not mine.left_height
        if member and mine.endpoint == endpoint:
            return
        msgs = []
        if not member:  # new, back after leaving, or back after a slash jailed it (its
            # record gone): the run's collateral is held anew
            if mine is not None:
                why = "it left"
            else:
                why = last_slash(self.poc, self.address, self.cfg.run_id)
            if why:
                log.warning("no longer a host of run %s (%s); bonding and registering again",
                            self.cfg.run_id, why)  # fmt: skip
            required = int(self.rc.min_collateral)
            try:
                msgs = ensure_bonded(self.client, self.poc, self.wallet, required)
            except InsufficientFunds as err:
                raise NodeError(f"no collateral for run {self.cfg.run_id!r}: {err}") from None
        msgs.append(MsgRegisterHost(host=self.address, run_id=self.cfg.run_id, endpoint=endpoint))
        try:
            self._send(*msgs)
        except TxRefused as err:
            raise NodeError(f"registration in run {self.cfg.run_id!r} refused: {err}") from None
        log.info("registered in run %s (blob endpoint %s)", self.cfg.run_id, endpoint)

    # ---- resume ------------------------------------------------------------------------------
    def _state_file(self):
        return state_file(self.cfg.state_dir)

    def _save(self, view: GlobalView, attempted: int) -> None:
        with self.ledger.storing(view.round, "global", [view.hash]):
            self.local.put(view.encoded, view.hash)
        self._publish([view.hash], f"round {view.round}'s global state")
        for old in [r for r in self.checkpoint_hashes if r < attempted - 2]:  # all revealed
            del self.checkpoint_hashes[old]
        record = ResumeState(view.round, view.hash, attempted, self.checkpoint_hashes,
                             self._run_instance())  # fmt: skip
        record.save(self._state_file())

    def _run_instance(self) -> str:
        return run_instance(self.client.network_config.chain_id, self.run_)

    def _load(self) -> tuple[GlobalView, int]:
        """Resume from the state file, else from the chain's latest global checkpoint, else θ_0.
        A saved global state that is damaged and on no peer is not a reason to stay down (the
        rounds the record owes reveals for would be slashed): the node starts from the
        chain's, keeping the record's reveals and attempted round."""
        try:
            record = ResumeState.load(self._state_file())
        except RecordDamaged as err:
            return self._rebuilt(err)
        if record is None:
            return self._latest(), -1
        if record.run and record.run != self._run_instance():
            return self._set_aside(record.run)
        self.checkpoint_hashes = record.checkpoint_hashes
        try:
            # a damaged copy: peers'
            state = decode_state(self.store.get(record.global_hash, limit=self.limits.state))
        except (ArtifactError, CodecError) as err:
            log.warning("round %d's global state, saved before the restart, is lost (%s); "
                        "starting from the chain's latest", record.round, err)  # fmt: skip
            return self._latest(), record.attempted
        return GlobalView(record.round, state), record.attempted

    def _set_aside(self, other: str) -> tuple[GlobalView, int]:
        """Start afresh from the chain's latest: the record (and a pending commit) is another
        run's of the same id, a chain reset since or another chain of the same name (resuming
        from its state stopped the host, the chain's record of the round differing)."""
        aside = self._state_file().with_name(f"state.{other.replace('/', '_')}.json")
        self._state_file().replace(aside)
        self._pending_file().unlink(missing_ok=True)
        log.warning("%s is a record of run %s, not of this chain's (%s): set aside as %s; "
                    "starting from the chain's latest state", self._state_file().name, other,
                    self._run_instance(), aside.name)  # fmt: skip
        return self._latest(), -1

    def _rebuilt(self, err: RecordDamaged) -> tuple[GlobalView, int]:
        """Resume without a readable record: the node starts from the chain's latest, and the
        checkpoint names of its last rounds, which it owes reveals for, are read back from its
        artifact ledger (kept where they hash to the commit's ``ckpt_root`` on chain). The
        record is moved aside once that is done: a chain that does not answer yet leaves it
        for the next start to rebuild from."""
        entries = self.ledger.entries()
        trained = [e.round for e in entries if e.kind in ("checkpoint", "final")]
        attempted = max(trained, default=-1)  # what publish() recorded: the rounds it trained
        leaves = self._leaves_in_ledger(entries, attempted)
        view = self._latest()
        damaged = self._state_file().with_suffix(".damaged")
        self._state_file().replace(damaged)
        self.checkpoint_hashes = leaves
        log.error("%s (moved to %s); starting from the chain's latest, with the reveals owed "
                  "for rounds %s from the artifact ledger", err, damaged.name,
                  sorted(leaves) or "none")  # fmt: skip
        return view, attempted

    def _leaves_in_ledger(self, entries: list[Entry], attempted: int) -> dict[int, list[bytes]]:
        """Per round from ``attempted - 2`` on (those whose reveals may still be owed) that
        this host committed: its checkpoints' names, as the ledger ``entries`` recorded them
        in order (the 64-byte index objects among the round's stored checkpoint objects),
        where their Merkle root is the commit's."""
        stored: dict[int, list[bytes]] = {}
        for entry in entries:
            if entry.kind == "checkpoint" and entry.round >= attempted - 2:
                digest = bytes.fromhex(entry.hash)
                if self.local.size(digest) == INDEX_BYTES:
                    stored.setdefault(entry.round, []).append(digest)
        found = {}
        for round_, names in stored.items():
            mine = [c for c in self.poc.commits(self.cfg.run_id, round_) if c.host == self.address]
            if mine and merkle_root(names) == mine[0].ckpt_root:
                found[round_] = names
        return found

    def _latest(self) -> GlobalView:
        """The chain's latest global checkpoint (θ_0 checked against the seed's), else θ_0."""
        try:
            latest = self.aggregator.latest()
        except ArtifactError as err:
            raise NodeError(f"run {self.cfg.run_id!r}: cannot start from the chain's latest "
                            f"global state: {err}") from None  # fmt: skip
        if latest is not None and latest.round > 0:
            return latest
        params = {n: p.detach().cpu().clone() for n, p in self.model.named_parameters()}
        initial = GlobalView(0, initial_global(params))
        if latest is None:
            return initial
        return self.aggregator.checked(initial, latest)  # θ_0 is the seed's: checked

    def _previous_commit(self, round_: int) -> Chained | None:
        """What this host's commit of the round before ``round_`` hands it (None if it made
        none)."""
        if round_ == 0:
            return None
        mine = [c for c in self.poc.commits(self.cfg.run_id, round_ - 1) if c.host == self.address]
        if not mine:
            return None
        return Chained(mine[0].pseudo_grad_hash, mine[0].residual_hash, mine[0].final_hash)

    def _start(
        self, view: GlobalView, previous: Chained | None
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None, dict | None]:
        """What a round built on ``view`` starts from, as the chain defines it from this host's
        ``previous`` commit: the parameters (in an overlapped run the outer step of ``view``
        over that commit's pseudo-gradient, ``diloco.round_start``), the error-feedback
        residual that commit left and, in a run with ``carry_inner_state``, its final
        checkpoint, whose AdamW moments the round continues from (None without a previous
        commit). Raises ArtifactError if one of them is lost."""
        residual = own = carried = None
        if previous is not None:
            limits = self.limits
            residual = decode_state(self.store.get(previous.residual_hash, limit=limits.residual))
            if self.rc.overlap:
                own = decompress(
                    self.store.get(previous.pseudo_grad_hash, limit=limits.pseudo_grad),
                    params_of(view.state),
                    self.rc.compression,
                )
            if self.rc.carry_inner_state:
                carried = fetch_checkpoint(self.store.get, previous.final_hash, like=self.like)
        start = round_start(view.state, own, self.rc.outer_lr, self.rc.outer_momentum)
        return start, residual, carried

    def evaluate(self, view: GlobalView) -> float:
        """Held-out loss of a global state (cached per round), on the evaluation model: the
        committer thread evaluates while the loop trains."""
        with self._eval_lock:
            if view.round not in self.eval_losses:
                params = {k: v.to(self.device) for k, v in params_of(view.state).items()}
                load_params(self.eval_model, params)
                self.eval_losses[view.round] = eval_loss(self.eval_model, self.heldout)
                metrics.EVAL_LOSS.set(self.eval_losses[view.round])
                log.info("round %d: eval loss %.4f", view.round, self.eval_losses[view.round])
            return self.eval_losses[view.round]

    def catch_up(self, view: GlobalView, round_: int, attempted: int) -> GlobalView:
        """``view`` advanced to ``round_`` (``advance_or_resync``), saved after each step;
        short of ``round_`` when it could not get there (the node then sits the round out). A
        full disk (``OSError``) part of the way returns the view it reached, so that the node
        prunes before it tries again instead of aggregating the same rounds into the same full
        disk again and again; with no step made it raises."""
        start = view.round
        while view.round < round_:
            try:
                reached = advance_or_resync(self.aggregator, view, round_)
                if reached is None:
                    return view
                self._save(reached, attempted)
                view = reached
            except OSError as err:
                if view.round == start:
                    raise
                log.warning("round %d: sitting it out at round %d: %s", round_, view.round, err)
                return view
        return view

    def prune(self, aggregated: range, resolved: int) -> None:
        """Note the peers' pseudo-gradients of the ``aggregated`` rounds (what their commits
        name, but for the run's data files, which a hostile commit could name to have every
        host delete them), then delete what no longer matters once round ``resolved`` is
        decided (:mod:`dilochain.artifacts.pruning`)."""
        data = self.data.hashes()  # a commit may name any bytes: never the run's data files
        for r in aggregated:
            hashes = [c.pseudo_grad_hash for c in self.poc.commits(self.cfg.run_id, r)
                      if c.pseudo_grad_hash.hex() not in data]  # fmt: skip
            self.ledger.record(r, "pseudo_grad", hashes)
        try:
            gone = self.ledger.prune(self.local, resolved, self.retention,
                                     published=self.objects)  # fmt: skip
        except ArtifactError as err:  # the object store's: nothing deleted, the next prune
            log.warning("pruning the object store: %s; again after the next round", err)
            return
        if gone:
            log.info("pruned %d artifacts (%.1f MB) of rounds up to %d", len(gone),
                     sum(size for _, size in gone) / 1e6, resolved)  # fmt: skip

    # ---- one round ---------------------------------------------------------------------------
    def _publish(self, digests: list[bytes], what: str) -> bool:
        """Upload ``digests`` from the local store to the object store, if the host has one,
        before anything names them on chain (so a reader finds them as soon as the chain
        does); False, with one log line, if that failed."""
        if self.objects is None:
            return True
        try:
            for digest in digests:
                if (path := self.local.file(digest)) is not None:
                    self.objects.publish(path, digest)
                elif digest not in self.objects.published:  # asked for again, never "done"
                    log.warning("%s: %s… is not in the local store: not published", what,
                                digest.hex()[:16])  # fmt: skip
                    return False
        except ArtifactError as err:
            log.warning("%s not published: %s", what, err)
            return False
        return True

    def _put_unsynced(self, round_: int, kind: Kind, data: bytes) -> bytes:
        digest = content_hash(data)
        with self.ledger.storing(round_, kind, [digest]):
            return self.local.put(data, digest, sync=False)

    def _sink(self, round_: int, checkpoint: CheckpointEncoding) -> None:
        """Where a round's checkpoints go as they are encoded: the store, fsynced later;
        recorded first, so no prune of another run deletes what this one is storing."""
        with self.ledger.storing(round_, "checkpoint", checkpoint.hashes()):
            store_checkpoint(functools.partial(self.local.put_parts, sync=False), checkpoint)

    def publish(self, round_: int, result: RoundResult) -> tuple[bytes, bytes]:
        """Store a round's checkpoints, pseudo-gradient and residual (served to peers from
        then on; not yet fsynced, see :meth:`run`); their (pseudo-gradient, residual) hashes."""
        started = time.perf_counter()
        for encoding in result.checkpoints:
            self._sink(round_, encoding)  # already there unless a behaviour changed it; recorded
        final = result.checkpoints[-1]
        self.ledger.record(round_, "final", final.hashes(moments=False))  # weights, index
        self.ledger.record(round_, "moments", [index_objects(final.index)[1]])
        failpoint("node.publish", round_)
        pg_hash = self._put_unsynced(round_, "pseudo_grad", result.pseudo_grad)
        residual_hash = self._put_unsynced(round_, "residual", result.residual)
        metrics.PROOF_SECONDS.inc(result.proof_seconds + time.perf_counter() - started)
        metrics.BYTES_PUBLISHED.inc(sum(map(len, result.checkpoints)) + len(result.pseudo_grad)
                                    + len(result.residual))  # fmt: skip
        return pg_hash, residual_hash

    def commit_msg(
        self, view: GlobalView, round_: int, result: RoundResult, hashes: tuple[bytes, bytes]
    ) -> MsgCommitRound:
        """The commit of a published round built on ``view`` (its pseudo-gradient's and
        residual's ``hashes``)."""
        pg_hash, residual_hash = hashes
        return MsgCommitRound(
            host=self.address, run_id=self.cfg.run_id, round=round_,
            ckpt_root=result.ckpt_root, pseudo_grad_hash=pg_hash, data_seed=result.data_seed,
            tokens=result.tokens, loss=result.loss, base_hash=view.hash,
            eval_loss=self.evaluate(view), final_hash=result.checkpoint_hashes[-1],
            final_proof=merkle_proof(result.checkpoint_hashes, len(result.checkpoint_hashes) - 1),
            residual_hash=residual_hash,
        )  # fmt: skip

    def commit(self, msg: MsgCommitRound, window_end: int) -> bool:
        """Send a round's commit; False if the chain refused it or the commit window (ending
        at ``window_end``) closed before it was included."""
        try:
            with metrics.COMMIT_LATENCY.time():
                self._send(*self._top_up(), msg, until_height=window_end)
        except TxRefused as err:
            log.warning("round %d commit refused: %s", msg.round, err)
            return False
        metrics.ROUNDS_COMMITTED.inc()
        log.info("round %d committed: loss %.4f, pseudo-gradient %s", msg.round, msg.loss,
                 msg.pseudo_grad_hash.hex()[:12])  # fmt: skip
        failpoint("node.committed", msg.round)
        return True

    def _top_up(self) -> list:
        """The deposit a commit goes with when a slash (a validator's downtime, another run's)
        left this address less bonded than its runs and registrations reserve, which the
        chain refuses commits for; none when the balance cannot pay it (the refusal says so)
        or the chain does not answer the query (the commit's own send rides an outage out,
        and a refusal says why)."""
        try:
            return ensure_bonded(self.client, self.poc, self.wallet, 0)
        except InsufficientFunds:
            return []
        except grpc.RpcError as err:
            log.warning("collateral not checked before the commit: chain error %s",
                        err.code().name)  # fmt: skip
            return []

    def _wait_for_height(
        self, height: int, stop: threading.Event, prefetch: range = range(0)
    ) -> None:
        """Wait until ``height`` is committed, meanwhile fetching the ``prefetch`` rounds' new
        pseudo-gradients (while their hosts are surely up) so aggregation does not depend on
        them later."""
        for _ in self._blocks(stop):
            if self._round_info().height >= height:
                return
            if prefetch and (self._prefetching is None or not self._prefetching.is_alive()):
                self._prefetching = threading.Thread(target=self._prefetch, args=(prefetch,),
                                                     name="prefetch", daemon=True)  # fmt: skip
                self._prefetching.start()

    def _prefetch(self, rounds: range) -> None:
        """Fetch ``rounds``' new pseudo-gradients, best effort (the next block asks again;
        aggregation reports what stays missing), on a thread of its own: a host that serves
        its pseudo-gradient at a drip holds this fetch for minutes, never the node's loop."""
        with contextlib.suppress(grpc.RpcError, ArtifactError, OSError):
            self.aggregator.prefetch(rounds)

    def _blocks(self, stop: threading.Event) -> Iterator[None]:
        """A loop's passes until ``stop``: one per block the chain pushes (one per
        ``poll_seconds`` while it cannot push)."""
        return self.poc.blocks.passes(stop, self.cfg.poll_seconds)

    def _upload_loop(self, done: threading.Event) -> None:
        """With an object store: upload the checkpoints of each challenged segment of this
        host's recent rounds as soon as the challenge is drawn, and what it revealed once
        revealed (a reveal window of a few blocks leaves no time to upload first; verifiers
        wait for the owner's store a while). Worked out from the chain on every pass, so what
        a restart interrupted is uploaded after it; on a thread of its own, so an upload of
        minutes never holds a reveal."""
        finished: set[int] = set()  # rounds whose revealed checkpoints are all up
        for _ in self._blocks(done):
            try:
                height = self._round_info().height
                for round_, leaves in list(self.checkpoint_hashes.items()):
                    window = self.revealer.window(round_)
                    if round_ in finished or height + 1 < window.start:
                        continue
                    if height > self._decided(round_):  # verifiers are done with it
                        finished.add(round_)
                        continue
                    mine = [c for c in self.poc.challenges(self.cfg.run_id, round_)
                            if c.host == self.address]  # fmt: skip
                    wanted = self._challenged_objects(round_, leaves, mine)
                    if self._publish(wanted, f"round {round_}'s challenged checkpoints") and (
                        height > window[-1]  # every reveal it made is known
                    ):
                        finished.add(round_)
            except grpc.RpcError as err:
                log.warning("uploads: chain error %s; retrying", err.code())
            except Exception:  # logged; the next pass tries again
                log.exception("uploads: unexpected error; retrying")

    def _challenged_objects(
        self, round_: int, leaves: list[bytes], mine: list[Challenge]
    ) -> list[bytes]:
        """Every object a replay of this host's challenged segments ``mine`` of round
        ``round_`` reads: each segment's start and end checkpoints (those revealed, once they
        are) and, for segment 0, the final checkpoint of the host's last round it is checked
        against (a leaf this host does not have: itself, and :meth:`_publish` says so)."""
        wanted = [h for c in mine for h in ((c.start_hash, c.end_hash) if c.revealed
                  else (leaves[c.segment], leaves[c.segment + 1]))]  # fmt: skip
        if any(c.segment == 0 for c in mine):
            wanted += [c.inner_in_hash for c in self.poc.commits(self.cfg.run_id, round_)
                       if c.host == self.address and c.inner_in_hash]  # fmt: skip
        objects = []
        for leaf in wanted:
            try:
                objects += checkpoint_objects(self.local.get, leaf)
            except (ArtifactError, CodecError):
                objects.append(leaf)
        return objects

    def _peer_pseudo_grad(self, round_: int) -> bytes | None:
        """Another host's pseudo-gradient of this round once one is committed in the window."""
        window_end = round_window(self.run_, self.chain_params, round_).end
        for _ in self._blocks(self._stopping):
            if self._round_info().height + 2 >= window_end:
                return None
            others = [c for c in self.poc.commits(self.cfg.run_id, round_)
                      if c.host != self.address]  # fmt: skip
            if others:
                return self.store.get(others[0].pseudo_grad_hash, limit=self.limits.pseudo_grad)
        return None

    def _roster(self, round_: int) -> list[str] | None:
        """Round ``round_``'s roster if this host is in it; else None, with one log line (it
        registered after the roster was drawn: it joins from a later round)."""
        roster = self.poc.roster(self.cfg.run_id, round_)
        if roster is None or self.address not in roster:
            log.info("round %d: not in its roster (registered after it was drawn); training "
                     "from a later round", round_)  # fmt: skip
            return None
        return roster

    def _train(
        self, view: GlobalView, round_: int, roster: list[str],
        previous: Chained | None, progress,
    ) -> RoundResult | None:  # fmt: skip
        """Train round ``round_``, built on ``view``, on the shards its ``roster`` gives this
        host, from what its ``previous`` commit left (:meth:`_start`; None if any of it is
        lost)."""
        shards = self.data.shards_of(self.rc.seed, self.address, roster)
        self.data.prefetch(shards)
        log.info("round %d: training on shards %s of %d (%d hosts in the round) from block %d; "
                 "its window opens at block %d", round_, list(shards), self.data.num_shards,
                 len(roster), self._round_info().height,
                 round_window(self.run_, self.chain_params, round_).start)  # fmt: skip
        try:
            start, residual, carried = self._start(view, previous)
        except ArtifactError as err:
            log.warning("round %d: sitting it out, what this host's round %d left is lost (%s)",
                        round_, round_ - 1, err)  # fmt: skip
            return None
        halfway = self.rc.inner_steps // 2

        def stepped(step: int, loss: float, rate: float) -> None:
            if step == halfway:
                failpoint("node.mid_training", round_)
            if progress is not None:
                progress(step, loss, rate, round_)

        job = RoundJob(
            self.model, self.rc, self.data, self.address, round_, start, residual, carried,
            stepped, lambda: self._peer_pseudo_grad(round_),
            functools.partial(self._sink, round_),
            self.ranks.parallel if self.ranks else None, roster,
        )  # fmt: skip
        return self.behavior.train(job)

    def _play(
        self, view: GlobalView, round_: int, roster: list[str], sent: Sent | None,
        stop: threading.Event, meter,
    ) -> Sent | None:  # fmt: skip
        """Train and publish round ``round_`` built on ``view``, then hand its commit to the
        committer thread, which sends it once the round's window opens; the round handed
        over (None if none). The round starts from what this host's round r-1 left: its commit
        on chain or, while that commit is still in flight (``sent``), from what it committed
        to; if that commit then fails, this round started from a state the chain does not
        know, and is dropped. The resume record is saved before the commit is sent (a host
        killed after it still reveals)."""
        if sent is not None and self._round_info().height > sent.window_end:
            sent.outcome.result()  # its window closed: the outcome is a moment away
        previous, pending = self._built_on(round_, sent)
        started = time.monotonic()
        result = self._train(view, round_, roster, previous, meter)
        if stop.is_set():
            return None
        if result is not None and not result.finite:  # every verifier would fail it: no commit
            log.warning("round %d: sat out: training diverged (a NaN or an infinity in the "
                        "parameters; last loss %s)", round_, result.loss)  # fmt: skip
            return None
        if pending and not sent.outcome.result():
            log.warning("round %d: dropped: it started from round %d's pseudo-gradient, whose "
                        "commit failed", round_, round_ - 1)  # fmt: skip
            return None
        hashes = None
        if result is not None:
            hashes = self.publish(round_, result)
            self.checkpoint_hashes[round_] = result.checkpoint_hashes
        self._save(view, round_)
        if hashes is None:
            return None
        self.pace.round_seconds = time.monotonic() - started
        window = round_window(self.run_, self.chain_params, round_)
        outcome = self._committer.submit(self._commit_when_open, view, round_, result, hashes,
                                         meter.round_seconds, window, stop, previous)  # fmt: skip
        return Sent(round_, window.end, outcome, Chained(*hashes, result.checkpoint_hashes[-1]))

    def _built_on(self, round_: int, sent: Sent | None) -> tuple[Chained | None, bool]:
        """What round ``round_`` starts from of this host's round before it, and whether that
        commit is still in flight. A commit the committer saw included hands what it committed
        to, whatever a chain node behind the one that included it says (the host's queries and
        its txs may go to different nodes); one in flight, the same (the round is dropped if it
        fails); else the chain says (a commit that seemed to fail may have landed)."""
        if sent is not None and sent.round == round_ - 1:
            if not sent.outcome.done():
                return sent.chained, True
            if sent.outcome.result():
                return sent.chained, False
        return self._previous_commit(round_), False

    def _commit_when_open(
        self, view: GlobalView, round_: int, result: RoundResult, hashes: tuple[bytes, bytes],
        trained: float, window: Window, stop: threading.Event, previous: Chained | None,
    ) -> bool:  # fmt: skip
        """The committer thread's work for one round (``trained``: its seconds in inner steps,
        ``previous``: what it started from of the host's round before): its commit, kept on
        disk until decided (a host restarted before sending it sends it then), then sent as
        :meth:`_send_pending` says; whether it committed. It never raises: a commit it could
        not make is a round that did not count."""
        try:
            # what the commit names and its screening reads: the final checkpoint's weights
            # (its moments and the other checkpoints when a replay needs them)
            named = [*result.checkpoints[-1].hashes(moments=False), *hashes]
            before = list(astuple(previous)) if previous else []
            msg = self.commit_msg(view, round_, result, hashes)
            pending = PendingCommit(msg, named, _stored(result), before)
            # durable before anything can send the commit (a restart sends the pending file)
            self.local.sync([*pending.stored, *pending.named])
        except Exception:
            log.exception("round %d: not committed", round_)
            return False
        try:
            pending.save(self._pending_file())
        except OSError as err:  # only a restart needs it
            log.warning("round %d: its commit is not kept for a restart: %s", round_, err)
        return self._send_pending(pending, window, stop, trained)

    def _pending_file(self) -> Path:
        return self.cfg.state_dir / "pending_commit.json"

    def _send_pending(
        self, pending: PendingCommit, window: Window, stop: threading.Event, trained: float = 0.0
    ) -> bool:
        """Publish what a commit names (again and again while its window is open: an object
        store's outage is no reason to lose the round), wait for its window to open and send
        it (the round's artifacts are durable by then); whether it committed.
        Once the window before has closed, a round whose start the chain chains otherwise (a
        commit of the round before that landed after a restart, or that a lagging node did
        not show) is dropped: its commit would fail every replay of its segment 0."""
        round_ = pending.msg.round
        try:
            while not self._publish(pending.named, f"round {round_}'s artifacts"):
                if stop.wait(5.0) or self._round_info().height >= window.end:
                    return False
            self._wait_for_height(window.start - 1, stop)
            if stop.is_set():
                return False
            previous = Chained(*pending.previous) if pending.previous else None
            if round_ > 0 and self._previous_commit(round_) != previous:
                log.warning("round %d: dropped: it did not start from what the chain holds of "
                            "round %d", round_, round_ - 1)  # fmt: skip
                self._pending_file().unlink(missing_ok=True)
                return False
            if armed("node.commit_lost", round_):  # a test's commit that is never included,
                # known only once round r+1's window has closed: round r+1 surely started from it
                end = round_window(self.run_, self.chain_params, round_ + 1).end
                self._wait_for_height(end, stop)
                log.warning("round %d commit lost (failpoint node.commit_lost)", round_)
                return False
            # refused as a second commit: the first (sent before a restart) is this one
            done = self.commit(pending.msg, window.end) or self._on_chain(pending.msg, stop)
            self._pending_file().unlink(missing_ok=True)  # decided, either way
            if done:
                metrics.COMMITTED_TRAINING_SECONDS.inc(trained)
            return done
        except grpc.RpcError as err:
            log.warning("round %d: not committed, the chain did not answer (%s)", round_,
                        err.code().name)  # fmt: skip
        except Exception:
            log.exception("round %d: not committed", round_)
        return False

    def _on_chain(self, msg: MsgCommitRound, stop: threading.Event, blocks: int = 3) -> bool:
        """Whether the chain holds this host's commit ``msg`` (by what it names), asked again
        for ``blocks`` blocks (the node answering may be behind the one the tx went to)."""
        until = self._round_info().height + blocks
        for _ in self._blocks(stop):
            if any(c.host == self.address and c.pseudo_grad_hash == msg.pseudo_grad_hash
                   for c in self.poc.commits(self.cfg.run_id, msg.round)):  # fmt: skip
                return True
            if self._round_info().height >= until:
                return False
        return False

    def _resume_commit(self, attempted: int, stop: threading.Event) -> Sent | None:
        """The commit of round ``attempted`` that a restart interrupted before it was decided,
        handed to the committer again while its window is open and the chain has no commit of
        this host for it; what the loop chains its next round on (None if nothing is sent)."""
        pending = PendingCommit.load(self._pending_file())
        if pending is None or pending.msg.round != attempted:
            self._pending_file().unlink(missing_ok=True)
            return None
        round_, window = attempted, round_window(self.run_, self.chain_params, attempted)
        try:  # (a chain that does not answer yet: sent anyway, a second commit is refused)
            mine = any(c.host == self.address for c in self.poc.commits(self.cfg.run_id, round_))
        except grpc.RpcError:
            mine = False
        lost = [d for d in [*pending.stored, *pending.named] if not self.local.has(d)]
        if mine or lost or self._round_info().height >= window.end:
            if lost and not mine:  # another --artifacts folder: what it names is not here
                log.warning("round %d: its commit made before the restart is not sent: %d of "
                            "the objects it names are not in %s", round_, len(lost),
                            self.local.root)  # fmt: skip
            self._pending_file().unlink(missing_ok=True)
            return None
        log.info("round %d: sending the commit made before the restart", round_)
        outcome = self._committer.submit(self._send_pending, pending, window, stop)
        msg = pending.msg
        chained = Chained(msg.pseudo_grad_hash, msg.residual_hash, msg.final_hash)
        return Sent(round_, window.end, outcome, chained)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, stop: threading.Event, progress=None) -> int:
        """Train until the run's last round or ``stop``; returns rounds committed. Reveals
        run in a thread beside it. Unless stopped, the node ends once the last round it trained
        is decided: until then verifiers fetch that round's checkpoints from its blob service
        (in an overlapped run that is well after the run's last commit window), and meanwhile
        it fetches the pseudo-gradients of the rounds it has not aggregated; once the run's last
        round is decided it aggregates it too, so every host ends holding the final state."""
        self._stopping = stop
        view, attempted = self._load()
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commits")
        self.revealer.take_over(lambda: self.checkpoint_hashes, self.behavior.reveal,
                                self._round_info)  # fmt: skip
        self.revealer.start()
        revealing = threading.Event()
        uploader = None
        if self.objects is not None:
            uploader = threading.Thread(target=self._upload_loop, args=(revealing,),
                                        name="uploads", daemon=True)  # fmt: skip
            uploader.start()
        try:
            try:
                resumed = self._resume_commit(attempted, stop)
                committed, view = self._rounds(view, attempted, stop, progress, resumed)
            except Exception as err:  # a bug, or a global state it must not train on: what
                # it committed is still revealed before it exits
                run = self.cfg.run_id
                if isinstance(err, NodeError):
                    log.error("run %s: training stopped: %s; serving this host's reveals until "
                              "its last round is decided", run, err)  # fmt: skip
                else:
                    log.exception("run %s: training stopped on an error; serving this host's "
                                  "reveals until its last round is decided", run)  # fmt: skip
                if self.checkpoint_hashes:
                    self._wait_for_height(self._decided(max(self.checkpoint_hashes)), stop)
                raise
            if self.checkpoint_hashes:  # its last reveals and replays, unless it is told to stop
                last = max(self.checkpoint_hashes)
                self._wait_for_height(self._decided(last), stop, range(view.round, last + 1))
                if not stop.is_set() and last == self.rc.total_rounds - 1:
                    self._final_state(view)
            return committed
        finally:
            self._committer.shutdown(wait=True)
            revealing.set()
            self.revealer.close()
            if uploader is not None:
                uploader.join()

    def _final_state(self, view: GlobalView) -> None:
        """Aggregate the rounds after ``view`` up to the run's end: θ_R, which no round
        records, lands in this host's store (what ``dilochain export`` reads)."""
        try:
            while view.round < self.rc.total_rounds:
                view = self.aggregator.advance(view)
        except (ArtifactError, grpc.RpcError) as err:
            log.warning("the run's final state is not computed here: %s", err)
            return
        log.info("run %s final state %s (after round %d)", self.cfg.run_id,
                 view.hash.hex()[:12], view.round - 1)  # fmt: skip

    def _rounds(
        self, view: GlobalView, attempted: int, stop: threading.Event, progress,
        resumed: Sent | None = None,
    ) -> tuple[int, GlobalView]:  # fmt: skip
        """Round after round, from the first whose commit window is still ahead or open: wait
        for its roster (drawn once the state it builds on is decided), bring the view up to
        that state, then train, publish and commit it. So in an overlapped run a host that
        finished round r-1 early starts round r at once, not when round r's window opens."""
        meter = metrics.StepMeter(self.rc.batch_size * self.rc.seq_len, progress)
        done = attempted  # the last round trained, skipped or sat out
        sent = resumed  # the last round handed to the committer (a restart's, at first)
        outcomes: list[Future[bool]] = [resumed.outcome] if resumed is not None else []
        while not stop.is_set():
            before = done
            try:
                info = self._round_info()
                # Past its last round the chain's round counter runs on: the run has its own.
                metrics.ROUND.set(min(info.round, self.rc.total_rounds))
                if info.finished:
                    log.info("run %s finished: its %d rounds are over", self.cfg.run_id,
                             self.rc.total_rounds)  # fmt: skip
                    break
                if not self._registered():
                    why = last_slash(self.poc, self.address, self.cfg.run_id) or "it left"
                    log.warning("no longer a host of run %s (%s): stopping at round %d",
                                self.cfg.run_id, why, info.round)  # fmt: skip
                    break
                round_ = self._next_round(info.height, done)
                if round_ >= self.rc.total_rounds:
                    break
                drawn = roster_height(self.run_, self.chain_params, round_)
                if info.height < drawn:
                    self._wait_for_height(drawn, stop, range(view.round, round_))
                    continue
                done = round_
                self._account_metrics()
                mine = any(c.host == self.address
                           for c in self.poc.commits(self.cfg.run_id, round_))  # fmt: skip
                roster = None if mine else self._roster(round_)
                if roster is None:
                    continue
                based_on = base_round(self.rc, round_)
                view = self._sync(view, based_on, attempted)
                if view.round < based_on:  # an artifact it needs is on no peer: sit this out
                    continue
                if self._too_late(round_):
                    continue
                sent = self._play(view, round_, roster, sent, stop, meter) or sent
                if sent is not None and sent.round == round_:
                    outcomes.append(sent.outcome)
                attempted = round_
            except grpc.RpcError as err:  # an outage: the round is tried again if still open
                if not transient(err):
                    raise
                if sent is None or sent.round != done:
                    done = before
                log.warning("chain unreachable (%s); retrying", err.code().name)
                stop.wait(2.0)
            except (DataError, ArtifactError, OSError) as err:  # data no peer serves, a full
                # disk: this round is sat out, not the node's end (its reveals go on)
                log.warning("round %d: sat out: %s", done, err)
                stop.wait(2.0)
        return sum(outcome.result() for outcome in outcomes), view

    def _account_metrics(self) -> None:
        """This host's collateral and what was slashed from it, once a round."""
        set_standing(self.poc, self.address, metrics.COLLATERAL, metrics.SLASHED)

    def _too_late(self, round_: int) -> bool:
        """Whether this host is too late for round ``round_`` at its pace (``Pace.skip``): then
        the round is skipped (one log line), and the next started as early as its roster
        allows."""
        height = self._round_info().height
        end = round_window(self.run_, self.chain_params, round_).end
        earliest = roster_height(self.run_, self.chain_params, round_)
        if not self.pace.skip(height, earliest, end):
            return False
        log.warning("round %d: skipped: its window closes at block %d (now %d), and a round "
                    "takes this host %.1f s (%.2f s a block)", round_, end, height,
                    self.pace.round_seconds, self.pace.block_seconds())  # fmt: skip
        return True

    def _next_round(self, height: int, done: int) -> int:
        """The first round after ``done`` whose commit window is open or ahead at the block
        after ``height``."""
        newest = window_at(self.run_, self.chain_params, height)
        round_ = max(done + 1, newest.round if newest is not None else 0)
        while round_window(self.run_, self.chain_params, round_).end < height + 1:
            round_ += 1
        return round_

    def _decided(self, round_: int) -> int:
        """The block at which round ``round_`` is decided (its resolution; 0 for none)."""
        return round_window(self.run_, self.chain_params, round_).resolution if round_ >= 0 else 0

    def _sync(self, view: GlobalView, based_on: int, attempted: int) -> GlobalView:
        """``view`` brought up to round ``based_on`` (:meth:`catch_up`), pruning what the
        rounds it aggregated leave behind. It runs between two rounds (the one thing there
        besides the rounds' setup: commits, evaluations and reveals run in threads beside)."""
        before = view.round
        view = self.catch_up(view, based_on, attempted)
        if view.round > before:  # (short of based_on: nothing a later step needs goes)
            self.prune(range(before, view.round), view.round - 1)
        return view

    def _serve(self) -> tuple[grpc.Server | None, str]:
        """Start serving this host's artifacts: its blob service, or, with an object store,
        the dataset files published there; (the blob server if any, the location to
        register)."""
        if self.objects is not None:
            data = list(self.data.files())
            published = [self.objects.publish(path, bytes.fromhex(d)) for path, d in data]
            self._publish(self._named_lately(), "what recent commits named")
            log.info("artifacts published to %s (%d of %d data files uploaded now)",
                     self.objects.location, sum(published), len(data))  # fmt: skip
            return None, self.objects.location
        if self._served is not None:
            return self._served.server, self._served.endpoint
        server, endpoint = serve_blobs(self.local, self.cfg.blob_address)
        return server, self.cfg.advertise_address or endpoint

    def _named_lately(self) -> list[bytes]:
        """What this host's recent commits named and the global states it keeps (a host that
        restarts, or moves to an object store, with rounds in flight: verifiers may ask for
        them yet); its checkpoints go up when challenged (:meth:`_upload_loop`)."""
        entries = self.ledger.entries()
        named = [bytes.fromhex(e.hash) for e in entries if e.kind in ("final", "residual",
                                                                      "global")]  # fmt: skip
        try:
            for round_ in sorted({e.round for e in entries if e.kind == "final"}):
                named += [c.pseudo_grad_hash for c in self.poc.commits(self.cfg.run_id, round_)
                          if c.host == self.address]  # fmt: skip
        except grpc.RpcError as err:  # the uploads of later rounds go on
            log.warning("this host's recent commits: chain error %s", err.code().name)
        return [d for d in dict.fromkeys(named) if self.local.has(d)]  # some pruned already

    def _register_or_serve(self, endpoint: str) -> None:
        """Register (or move this host's endpoint); a node that may owe reveals from before a
        restart goes on without it when that fails (a chain halted through the wait, no funds
        to bond again): it serves and reveals what it owes, and trains only if still a host."""
        try:
            self.ensure_registered(endpoint)
        except NodeError as err:
            if not (self._state_file().exists() or self._pending_file().exists()):
                raise
            log.error("%s; serving and revealing what this host committed before", err)

    def serve_and_run(self, stop: threading.Event, progress=None) -> int:
        """Serve this host's artifacts (:meth:`_serve`), register, run (claiming rewards
        beside it with ``auto_claim``); stop the server and the claimer on the way out."""
        try:
            server, endpoint = self._serve()
        except ArtifactError as err:
            raise NodeError(str(err)) from None
        done = threading.Event()
        try:
            if self._round_info().finished:  # serve and reveal what it owes, lock nothing new
                log.info("run %s has finished: not registering", self.cfg.run_id)
            else:
                self._register_or_serve(endpoint)
            if self.cfg.auto_claim:
                AutoClaimer(self.poc, self.address, self._send).start(done)
            return self.run(stop, progress)
        except grpc.RpcError as err:
            nodes = shown(self.cfg.chain)
            raise NodeError(f"chain at {nodes}: {err.details() or err.code()}") from None
        finally:
            done.set()
            if server is not None:
                server.stop(grace=1)
            if self.ranks is not None:
                self.ranks.close()
