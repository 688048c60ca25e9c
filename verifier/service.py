"""The verifier daemon: watches the chain and, on a thread for each run, re-executes its assigned
challenges in parallel jobs and seals one vote per challenge (it checks the chain first, so a
restart never votes twice), and on another thread for each run screens its commits, whose
windows are a few blocks long and must not wait for a replay; a thread of its own does the
round's time-critical duties (the challenge beacon, the opening of its sealed votes). No run's
screens or replays, however long its model makes them, hold another run's or a beacon opening."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager

import grpc
import torch
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.tx_helpers import TxResponse
from cosmpy.aerial.wallet import Wallet

from dilochain.artifacts.blob_service import PeerFetchingStore, fetch_from_peers, serve_blobs
from dilochain.artifacts.pruning import Ledger, Retention
from dilochain.artifacts.store import ArtifactError, LocalArtifactStore
from dilochain.auto_claim import AutoClaimer
from dilochain.client import Sender, TxRefused
from dilochain.endpoints import shown, transient
from dilochain.metrics_http import set_standing
from dilochain.poc_client import InsufficientFunds, PocClient, ensure_bonded, last_slash
from dilochain.protocol import schedule
from dilochain.protocol.model_config import ModelConfigError
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgRegisterVerifier, MsgSubmitVerdict, ScreenVote
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    Challenge,
    ChallengeStatus,
    Host,
    RoundCommit,
    Run,
)
from dilochain.training.dataset import DataError, Dataset, DataUnavailable, find_dataset
from dilochain.training.model import build_checked_model, max_artifact_bytes
from dilochain.training.prepare import default_dataset
from dilochain.training.tensor_codec import CodecError
from dilochain.training.train_step import set_deterministic
from dilochain.verifier import metrics
from dilochain.verifier.ballots import BallotBox
from dilochain.verifier.config import VerifierConfig
from dilochain.verifier.errors import VerifierError
from dilochain.verifier.lazy import CopyingBallots, lazy_verdict
from dilochain.verifier.replay import (
    Policy,
    artifact_failure,
    verify_challenge,
    warm_challenge,
)
from dilochain.verifier.round_duties import (
    EarlyDuties,
    RoundDuties,
    ballots_file,
    own_record,
    run_duties,
    send_batched,
)
from dilochain.verifier.screening import screen_commit
from dilochain.verifier.verdicts import Verdict
from dilochain.verifier.work_gate import WindowClosed, WorkGate

log = logging.getLogger(__name__)
# Every so many passes (a pass a block) a verifier checks whether it left and was released, and
# brings its collateral metrics up to date; whether it is still listed (a slash below the minimum
# removes it) it checks every pass.
REGISTRATION_CHECK_PASSES = 50
SEND_MARGIN_BLOCKS = 2  # a round's finished votes go out this close to its window's end
SCREEN_FETCHES = 4  # commits of a round whose artifacts are fetched at once for its screens
# Challenges of a run whose checkpoints are fetched at once, each replayed in a slot of the
# verifier's --jobs once on disk: a host serving slowly holds a fetch, never a replay's slot.
REPLAY_FETCHES = 4
# What a verifier fetched goes a round after its round is decided; the pseudo-gradients it
# screened, which hosts that their own host does not serve fetch here, two rounds later still.
RETENTION = Retention(pseudo_grad_rounds=2)
# Its blob service streams this many artifacts at once (a host's 32): serving is a backup
# duty that must not take the cores and the interpreter from screens and replays with windows.
SERVED_STREAMS = 8


@dataclasses.dataclass(frozen=True)
class RoundView:
    """What a pass's replays of one round read of the chain, asked once for all of them (each
    replay asked for the run's hosts twice, its round's commits twice and its roster: at 1,000
    hosts ~0.6 MB of answers a challenge): the run's hosts (their endpoints, read when the pass
    began), the round's commits by host and its roster (fixed once its commit window closed)."""

    hosts: list[Host]
    commits: dict[str, RoundCommit]
    roster: tuple[str, ...]

    @classmethod
    def of_rounds(cls, poc: PocClient, run_id: str, rounds: set[int]) -> dict[int, RoundView]:
        """A view of each of ``rounds`` (the hosts asked once, if any round is)."""
        hosts = poc.hosts(run_id=run_id) if rounds else []
        return {r: cls(hosts, {c.host: c for c in poc.commits(run_id, r)},
                       tuple(poc.roster(run_id, r) or ())) for r in rounds}  # fmt: skip


@contextmanager
def _unless(given_up: threading.Event, slot: AbstractContextManager) -> Iterator[None]:
    """``slot``, unless the screens it is for were given up (their window closing) before it
    was this one's turn: an artifact fetched late is not screened for a vote nobody sends."""
    if given_up.is_set():
        raise WindowClosed("the round's screens were given up")
    with slot:
        if given_up.is_set():
            raise WindowClosed("the round's screens were given up")
        yield


class VerifierService:
    """One verifier's watch-replay-vote loop."""

    def __init__(
        self, cfg: VerifierConfig, client: LedgerClient, wallet: Wallet,
        sender: Sender | None = None, early: EarlyDuties | None = None,
    ):  # fmt: skip
        """``sender`` and ``early``: those ``verifier run`` began the round duties with
        before torch loaded (:class:`~dilochain.verifier.round_duties.EarlyDuties`)."""
        self.cfg = cfg
        self.client = client
        self.wallet = wallet
        self.address = str(wallet.address())
        metrics.INFO.labels(self.address).set(1)
        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise VerifierError("--device cuda: no CUDA device is available")
        self.poc = early.duties.poc if early is not None else PocClient(cfg.chain)
        params = self.poc.params()
        self.params = params
        self.datasets: dict[str, Dataset | None] = {}  # None: a run it cannot verify
        self.waiting: set[str] = set()  # runs whose dataset no host served yet (logged once)
        self.skipped: set[tuple] = set()  # jobs not voted on, and why (each logged once)
        self.fetch_limits: dict[str, int] = {}  # per run: its largest possible artifact
        self.local = LocalArtifactStore(cfg.home / "verifier-artifacts")
        self.endpoint = ""  # its blob service, once serving (:meth:`_serve`)
        self.pruned: dict[str, int] = {}  # per run: the last decided round pruned for
        self.verdicts = 0
        self.left_height = self.release_height = 0  # once it is seen leaving the set
        self._slashes_seen: int | None = None  # its slashes at the last pass (None: unknown)
        self.sender = sender or Sender(self.client, wallet)  # every run's duties: one key
        self._count_lock = threading.Lock()  # verdicts are counted by every run's thread
        self._dataset_locks: dict[str, threading.Lock] = {}  # a run's screens and replays ask
        self._locks_lock = threading.Lock()
        # Every run's replays together, --jobs at once, and their screens one at a time (as
        # before runs had threads of their own): the earliest deadline first.
        height = lambda: self.poc.blocks.height  # noqa: E731
        self.replays_gate, self.screens_gate = WorkGate(cfg.jobs, height), WorkGate(1, height)
        self.stopping = threading.Event()  # set when run() is asked to stop: work under way ends
        self._early = early
        if early is not None:
            self.duties = early.duties
            self.duties.screener, self.ballots = self.screen, self.duties.ballots
        else:
            box = CopyingBallots if cfg.behavior == "copy" else BallotBox
            self.ballots = box(ballots_file(cfg.home), self.address)
            self.duties = RoundDuties(self.poc, wallet, self._send, self.screen, self.ballots)
        set_deterministic(1)

    def _send(self, *msgs, until_height: int | None = None) -> TxResponse:
        """Send one tx and wait for its block; with ``until_height``, only until the chain is
        past that block (the last of the window it is for). Other duties' txs are sent while
        it waits (:class:`~dilochain.client.Sender`)."""
        return self.sender.submit(*msgs, until_height=until_height)

    def _duties_loop(
        self, stop: threading.Event, step: Callable[[], object], poll: float | None = None
    ) -> None:
        """:func:`~dilochain.verifier.round_duties.run_duties` at this verifier's pace."""
        run_duties(self.poc, stop, step, poll or self.cfg.duties_poll_seconds)

    def _per_run(
        self, stop: threading.Event, kind: str, work: Callable[[Run, threading.Event], None]
    ) -> None:
        """A thread ``KIND-RUN`` for each active run doing ``work(run, ended)``, started once
        the run is seen active and ended (``ended`` set) once it is not, until ``stop``: one
        run's screens or replays, however long its model makes them, hold no other run's past
        its window. A run seen again before its ended thread has exited gets a new thread only
        after (two would seal the same vote twice)."""
        threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        try:
            for _ in self.poc.blocks.passes(stop, self.cfg.duties_poll_seconds):
                try:
                    runs = {run.run_id: run for run in self.poc.runs(active=True)}
                except grpc.RpcError as err:
                    log.warning("%s: chain error %s; retrying", kind, err.code().name)
                    stop.wait(1.0)
                    continue
                for run_id, (thread, ended) in list(threads.items()):
                    if run_id not in runs:
                        ended.set()  # its thread ends after the work under way
                    if ended.is_set() and not thread.is_alive():
                        del threads[run_id]
                for run_id in runs.keys() - threads.keys():
                    ended = threading.Event()
                    thread = threading.Thread(target=work, args=(runs[run_id], ended),
                                              name=f"{kind}-{run_id}")  # fmt: skip
                    threads[run_id] = thread, ended
                    thread.start()
        finally:
            for _, ended in threads.values():
                ended.set()
            for thread, _ in threads.values():
                thread.join()

    def _screens_of(self, run: Run, ended: threading.Event) -> None:
        """Screen ``run``'s commits of this verifier's committees until ``ended``."""
        self._duties_loop(ended, functools.partial(self.duties.screen_step, run))

    def _replays_of(self, run: Run, ended: threading.Event) -> None:
        """Replay ``run``'s challenges assigned to this verifier until ``ended``: up to
        :data:`REPLAY_FETCHES` (at least ``--jobs``) fetched at once on a pool of the run's own,
        each replayed once fetched, ``--jobs`` at a time (the replays' gate, shared by the
        runs)."""
        threads = max(self.cfg.jobs, REPLAY_FETCHES)
        with ThreadPoolExecutor(threads, thread_name_prefix=f"replay-{run.run_id}") as pool:
            step = functools.partial(self.replay_step, run, pool)
            self._duties_loop(ended, step, self.cfg.poll_seconds)

    def _serve(self) -> grpc.Server | None:
        """Start this verifier's blob service, which serves hosts what it fetched, and note
        the endpoint to register; none where hosts could not reach it (said once) or where
        the operator set no ``blob_address``."""
        if not self.cfg.blob_address:
            log.info("not serving hosts what this verifier fetches (no blob_address)")
            return None
        if (problem := self.cfg.unreachable_blob_service()) is not None:
            log.warning("not serving hosts what this verifier fetches: %s", problem)
            return None
        try:
            server, bound = serve_blobs(self.local, self.cfg.blob_address, SERVED_STREAMS)
        except ArtifactError as err:
            raise VerifierError(str(err)) from None
        self.endpoint = self.cfg.advertise_address or bound
        log.info("serving hosts what this verifier fetches at %s", self.endpoint)
        return server

    def ensure_registered(self) -> None:
        """Bond the minimum verifier collateral and register, once; a registered verifier
        whose blob service moved (or stopped) registers its endpoint again."""
        if (me := own_record(self.poc, self.address)) is not None:
            if me.endpoint != self.endpoint:  # a leaving verifier serves until released
                self._register([], "blob service moved to " + (self.endpoint or "nowhere"))
            return
        try:
            msgs = ensure_bonded(
                self.client, self.poc, self.wallet, int(self.params.min_verifier_collateral)
            )
        except InsufficientFunds as err:
            raise VerifierError(f"cannot register as a verifier: {err}") from None
        self._register(msgs, "registered as a verifier")

    def _register(self, msgs: list, done: str) -> None:
        msgs.append(MsgRegisterVerifier(verifier=self.address, endpoint=self.endpoint))
        try:
            self._send(*msgs)
        except TxRefused as err:
            raise VerifierError(f"verifier registration refused: {err}") from None
        log.info("%s", done)

    def _stay_registered(self) -> bool:
        """Register again after a slash left this verifier below the minimum and the chain
        removed it (topping its bond up from its balance); if it cannot, say so and go on.
        False once it left the set and was released (its duties done): time to stop. Its
        collateral metrics are brought up to date on the way."""
        set_standing(self.poc, self.address, metrics.COLLATERAL, metrics.SLASHED)
        me = own_record(self.poc, self.address)
        if me is not None:
            if me.left_height and not self.left_height:
                log.info("leaving the verifier set (left at block %d): doing what rounds begun "
                         "before then ask; released after block %d", me.left_height,
                         me.release_height)  # fmt: skip
            self.left_height, self.release_height = me.left_height, me.release_height
            return True
        if self.left_height and self.poc.blocks.height <= self.release_height:
            return True  # a slash removed it while leaving: what it owes is still owed
        # Released (maybe between two checks: it can be in the leave's own block) leaves no
        # collateral free, all of it unbonding; a slash below the minimum leaves the rest.
        held = self.poc.collateral(self.address)
        if self.left_height or int(held.bonded) <= int(held.locked):
            log.info("no longer in the verifier set: it left and was released (its free "
                     "collateral unbonds); stopping")  # fmt: skip
            return False
        log.warning("no longer a registered verifier (%s, which left less than the minimum "
                    "bonded); bonding the minimum again and registering",
                    last_slash(self.poc, self.address) or "a slash")  # fmt: skip
        try:
            self.ensure_registered()
        except VerifierError as err:
            log.error("%s; checking again later", err)
        return True

    def _registration_due(self, passes: int) -> bool:
        """Whether this pass checks the registration (:meth:`_stay_registered`): every
        ``REGISTRATION_CHECK_PASSES``, and at once when the chain has slashed this verifier
        since the last pass (a slash below the minimum removes it: every block out of the set
        is a block of screens and votes it may not cast), unless it is leaving. One query of
        its own slashes a block, not the whole verifier set's."""
        if passes % REGISTRATION_CHECK_PASSES == 0:
            return True
        if self.left_height:
            return False
        slashed = len(self.poc.slashes(self.address))
        seen, self._slashes_seen = self._slashes_seen, slashed
        return seen is not None and slashed != seen

    def _dataset(self, run: Run) -> Dataset | None:
        """The run's dataset, if this verifier can work for the run (it has or can fetch the
        run's data and can build its model; decided once a run, but a fetch that found no
        peer is tried again on the next pass). The run's screens and replays threads both ask:
        the first to ask fetches it while the other waits."""
        with self._locks_lock:
            lock = self._dataset_locks.setdefault(run.run_id, threading.Lock())
        with lock:
            return self._dataset_locked(run)

    def _dataset_locked(self, run: Run) -> Dataset | None:
        if run.run_id not in self.datasets:
            try:
                self.datasets[run.run_id] = self._workable(run)
            except DataUnavailable as err:  # no host serves the dataset yet
                if run.run_id not in self.waiting:
                    log.warning("run %s: %s; will retry", run.run_id, err)
                    self.waiting.add(run.run_id)
                return None
        return self.datasets[run.run_id]

    def _workable(self, run: Run) -> Dataset | None:
        pins = (run.config.data_manifest_hash, run.config.tokenizer_hash)
        try:
            model = build_checked_model(run.config.model_config, run.config.seed,
                                        self.params.max_model_parameters)  # fmt: skip
            data = self._local_dataset(run) or Dataset(
                self.cfg.home / "datasets" / pins[0][:16], *pins,
                fetch=lambda digest, limit, out: self._fetch_data(run, digest, limit, out),
            )  # fmt: skip
            data.check_vocab(model.config.vocab_size)
        except DataUnavailable:
            raise
        except (DataError, ModelConfigError) as err:
            log.warning("run %s: %s; not verifying it", run.run_id, err)
            return None
        self.fetch_limits[run.run_id] = max_artifact_bytes(model)
        return data

    def _local_dataset(self, run: Run) -> Dataset | None:
        """The run's dataset among ``--data`` folders and the shipped one, if there."""
        folders = [*self.cfg.data, default_dataset(self.cfg.home)]
        try:
            return find_dataset(folders, run.config.data_manifest_hash, run.config.tokenizer_hash)
        except DataError:
            return None

    def _fetch_data(self, run: Run, digest: str, limit: int, out) -> None:
        endpoints = [h.endpoint for h in self.poc.hosts(run_id=run.run_id) if h.endpoint]
        try:
            fetch_from_peers(endpoints, bytes.fromhex(digest), limit, out=out)
        except ArtifactError as err:
            raise DataUnavailable(f"the run's dataset: {err}") from None

    def pending(self, run: Run, round_: int) -> list[Challenge]:
        """Revealed, undecided challenges of round ``round_`` assigned to me and not voted."""
        return [
            c for c in self.poc.challenges(run.run_id, round_)
            if self.address in c.verifiers and c.revealed
            and c.status == ChallengeStatus.CHALLENGE_STATUS_PENDING
            and all(v.verifier != self.address for v in c.votes)
        ]  # fmt: skip

    def _store(self, run: Run, host: str, hosts: list[Host]) -> PeerFetchingStore:
        """Artifacts of ``host``'s round: from its blob service first, then its peers' (the
        run's ``hosts``)."""
        owner = [h.endpoint for h in hosts if h.address == host]
        limit = self.fetch_limits[run.run_id]  # set by _dataset, which every caller passed
        return PeerFetchingStore(self.local, lambda: owner + [h.endpoint for h in hosts], limit,
                                 owner[0] if owner else None)  # fmt: skip

    def _check(self, run: Run, data: Dataset, challenge: Challenge, view: RoundView) -> Verdict:
        store = self._store(run, challenge.host, view.hosts)
        policy = Policy.for_run(self.params, run.config.precision)
        try:
            if self.cfg.behavior != "honest":
                return lazy_verdict(self.cfg.behavior, challenge, store, policy)
            commit = view.commits.get(challenge.host)
            if commit is None:
                raise LookupError(f"no commit of {challenge.host} in round {challenge.round}")
            return verify_challenge(run.config, data, commit, challenge, store, policy,
                                    self.cfg.device, view.roster)  # fmt: skip
        finally:
            self._ledger(run).record(challenge.round, "checkpoint", sorted(store.touched))

    def _ledger(self, run: Run) -> Ledger:
        """What this verifier fetched for which round of ``run`` (for pruning)."""
        folder = self.cfg.home / "ledgers" / run.run_id
        folder.mkdir(parents=True, exist_ok=True)
        return Ledger(folder)

    def prune(self, run: Run, resolved: int) -> None:
        """Delete what this verifier fetched for ``run``'s rounds that were decided more than
        a round before round ``resolved`` (nothing it can still vote on)."""
        if self.pruned.get(run.run_id, -1) >= resolved:
            return
        self.pruned[run.run_id] = resolved
        gone = self._ledger(run).prune(self.local, resolved, RETENTION)
        if gone:
            log.info("pruned %d artifacts (%.1f MB) of %s's rounds up to %d", len(gone),
                     sum(size for _, size in gone) / 1e6, run.run_id, resolved)  # fmt: skip

    def _waiting(self, job: str, reason: str) -> None:
        """Log once that ``job`` waits for artifacts no peer serves (asked again each pass
        until the first half of its window has passed; then unavailability is the verdict)."""
        if (job, "waiting") not in self.skipped:
            self.skipped.add((job, "waiting"))
            log.info("%s: %s; asking again (a host may be restarting)", job, reason)

    def _timed_check(
        self, run: Run, data: Dataset, challenge: Challenge, deadline: int, view: RoundView
    ) -> Verdict:
        """:meth:`_check` in a slot of the replays' gate, what it reads fetched before it."""
        if (unavailable := self._warmed(run, challenge, view)) is not None:
            return unavailable
        with self.replays_gate.slot(deadline):
            started = time.perf_counter()
            try:
                return self._check(run, data, challenge, view)
            finally:
                metrics.REPLAY_SECONDS.observe(time.perf_counter() - started)

    def _warmed(self, run: Run, challenge: Challenge, view: RoundView) -> Verdict | None:
        """Fetch what an honest replay of ``challenge`` reads (``replay.warm_challenge``);
        the verdict when it cannot be (as the replay would give it), else None."""
        if self.cfg.behavior != "honest":
            return None
        store = self._store(run, challenge.host, view.hosts)
        try:
            commit = view.commits.get(challenge.host)
            if commit is not None:
                policy = Policy.for_run(self.params, run.config.precision)
                warm_challenge(run.config, store, commit, challenge, policy)
        except (ArtifactError, CodecError) as err:
            return artifact_failure(err)
        except Exception as err:  # the replay itself judges the rest (a host's odd bytes)
            log.warning("%s round %d: fetching before the replay: %s: %s; the replay fetches "
                        "again", challenge.host, challenge.round, type(err).__name__,
                        err)  # fmt: skip
        finally:
            self._ledger(run).record(challenge.round, "checkpoint", sorted(store.touched))
        return None

    def screen(
        self, run: Run, round_: int, anchor: bytes, commits: list[RoundCommit],
        patient: bool = False,
    ) -> list[ScreenVote]:  # fmt: skip
        """Screen a round's commits (one vote each; none for a run whose data it lacks, and
        with ``patient`` none yet for a commit whose artifacts no peer serves). Up to
        ``SCREEN_FETCHES`` commits' artifacts are fetched at once, each screened in the shared
        slot as soon as it is on disk, so a host serving slowly delays no other's screen; the
        votes finished when the window is about to close are what goes out."""
        data = self._dataset(run)
        if data is None:
            return []
        if self.cfg.behavior != "honest":  # lazy: votes without looking
            verdict = Verdict(self.cfg.behavior != "always-fail", "not screened")
            return [self._vote(run, round_, c, verdict) for c in commits]
        hosts = self.poc.hosts(run_id=run.run_id)
        policy = Policy.for_run(self.params, run.config.precision)
        deadline = schedule.round_window(run, self.params, round_).selection
        votes: dict[str, ScreenVote] = {}
        closing, given_up = False, threading.Event()
        pool = ThreadPoolExecutor(SCREEN_FETCHES, thread_name_prefix=f"screen-{run.run_id}")
        try:
            screens = {pool.submit(self._screen_one, run, round_, data, anchor, c, hosts,
                                   policy, _unless(given_up, self.screens_gate.slot(deadline))): c
                       for c in commits}  # fmt: skip
            pending = set(screens)
            while pending and not self.stopping.is_set():
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    commit = screens[future]
                    try:
                        verdict = future.result()
                    except WindowClosed:  # the rest of the round is replayed in full
                        closing, pending = True, set()
                        break
                    except DataError as err:  # my data, not the host's fault: no vote
                        log.warning("screen %s round %d: %s; not voting", run.run_id, round_,
                                    err)  # fmt: skip
                        return []
                    if verdict is None:
                        continue
                    if verdict.unavailable and patient:
                        self._waiting(f"screen {run.run_id} round {round_} {commit.host[:14]}…",
                                      verdict.reason)  # fmt: skip
                        continue
                    votes[commit.host] = self._vote(run, round_, commit, verdict)
                if pending and self.poc.blocks.height + 1 >= deadline:
                    closing = True
                    break
        finally:  # fetches still going end on their own (a stalled peer within IDLE_SECONDS),
            given_up.set()  # and screen nothing once fetched
            pool.shutdown(wait=False, cancel_futures=True)
        if closing:
            log.warning("screens of %s round %d: the window closes with %d of %d commits "
                        "screened", run.run_id, round_, len(votes), len(commits))  # fmt: skip
        return [votes[c.host] for c in commits if c.host in votes]

    def _screen_one(
        self, run: Run, round_: int, data: Dataset, anchor: bytes, commit: RoundCommit,
        hosts: list[Host], policy: Policy, slot: AbstractContextManager,
    ) -> Verdict | None:  # fmt: skip
        """One commit's screen, computed in ``slot``: its verdict, None for a bug or artifacts
        no check foresaw (no vote); raises WindowClosed, DataError (mine, not the host's) or a
        chain error."""
        store = self._store(run, commit.host, hosts)
        try:
            return screen_commit(run.config, data, commit, anchor, store, policy,
                                 float(self.params.screen_loss_margin), self.cfg.device,
                                 slot)  # fmt: skip
        except (WindowClosed, DataError, grpc.RpcError):
            raise
        except Exception as err:
            log.warning("screen %s round %d %s…: %s: %s; not voting", run.run_id, round_,
                        commit.host[:14], type(err).__name__, err)  # fmt: skip
            return None
        finally:
            ledger = self._ledger(run)
            ledger.record(round_, "checkpoint", sorted(store.touched))
            if commit.pseudo_grad_hash in store.touched:  # served to hosts a while longer
                ledger.record(round_, "pseudo_grad", [commit.pseudo_grad_hash])

    def _vote(self, run: Run, round_: int, commit: RoundCommit, verdict: Verdict) -> ScreenVote:
        outcome = "PASS" if verdict.passed else "FAIL"
        metrics.SCREENS.labels(outcome.lower()).inc()
        log.info("screen %s round %d %s…: %s (%s, %.2e)", run.run_id, round_, commit.host[:14],
                 outcome, verdict.reason, verdict.distance)  # fmt: skip
        return ScreenVote(host=commit.host, passed=verdict.passed,
                          evidence_hash=verdict.evidence_hash,
                          inconsistent=verdict.inconsistent)  # fmt: skip

    def replay_step(self, run: Run, pool: ThreadPoolExecutor) -> int:
        """One pass over ``run``: replay its pending challenges on ``pool``, then seal the
        votes (the round-duties thread opens them); how many were sealed. Work that fails in a
        way no other run's does (hostile artifacts, a bug) is logged once and passed over."""
        try:
            voted = self._work_on(run, pool)
        except grpc.RpcError:
            raise
        except Exception as err:
            if (run.run_id, type(err).__name__) not in self.skipped:
                self.skipped.add((run.run_id, type(err).__name__))
                log.exception("run %s: its work failed (%s); passing over it", run.run_id,
                              type(err).__name__)  # fmt: skip
            return 0
        with self._count_lock:
            self.verdicts += voted
        return voted

    def _work_on(self, run: Run, pool: ThreadPoolExecutor) -> int:
        """Replay a run's pending challenges and seal their votes; how many were sealed."""
        data = self._dataset(run)
        if data is None:
            return 0
        next_block = self.poc.round_info(run.run_id).height + 1
        windows = {w.round: w for w in schedule.in_flight(run, self.params, next_block)}
        if not windows:
            return 0
        voted = 0
        # a sealed vote lands by the block before the opening window, or not at all
        jobs = [
            c for r, w in windows.items() if next_block < w.opening for c in self.pending(run, r)
        ]
        self.prune(run, min(windows) - 1)
        views = RoundView.of_rounds(self.poc, run.run_id, {c.round for c in jobs})
        futures = {pool.submit(self._timed_check, run, data, c, windows[c.round].opening - 1,
                               views[c.round]): c for c in jobs}  # fmt: skip
        left = Counter(c.round for c in jobs)  # per round: jobs not finished
        sealed: dict[int, list] = {r: [] for r in windows}  # per round: votes not yet sent

        def send(r: int) -> int:
            msgs, sealed[r] = sealed[r], []
            return len(msgs) - send_batched(self._send, msgs, "sealed verdict",
                                            windows[r].opening - 1)  # fmt: skip

        pending = set(futures)
        while pending:
            if self.stopping.is_set():  # replays not begun are not begun; those finished vote
                done = {f for f in pending if not f.cancel() and f.done()}
                pending = set()
            else:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                c = futures[future]
                left[c.round] -= 1
                if msg := self._sealed_vote(run, c, future, windows[c.round], next_block):
                    sealed[c.round].append(msg)
            now = self.poc.blocks.height + 1
            for r, msgs in sealed.items():  # a round's votes go once its jobs are done, or
                last = windows[r].opening - 1  # once its window is about to close
                if msgs and (not left[r] or now + SEND_MARGIN_BLOCKS >= last):
                    voted += send(r)
        return voted + sum(send(r) for r, msgs in sealed.items() if msgs)  # a stop's last votes

    def _sealed_vote(
        self, run: Run, c: Challenge, future: Future, window: schedule.Window, next_block: int
    ) -> MsgSubmitVerdict | None:
        """The sealed vote on a finished job (None: no vote now: its window closed, my own
        failure, or a host not serving yet that is asked again next pass)."""
        try:
            verdict = future.result()
        except grpc.RpcError:
            raise
        except WindowClosed:  # its turn came too late for a vote to land
            log.info("job %s round %d segment %d: its verdict window closed before it ran",
                     run.run_id, c.round, c.segment)  # fmt: skip
            return None
        except Exception as err:  # my data (DataError), memory, disk, or a bug: logged once
            metrics.JOBS_FAILED.inc()
            if (key := (run.run_id, c.round, c.host, c.segment)) not in self.skipped:
                self.skipped.add(key)
                log.warning("job %s round %d segment %d: %s: %s; not voting", run.run_id,
                            c.round, c.segment, type(err).__name__, err)  # fmt: skip
            return None
        if verdict.unavailable and next_block < window.replay_patience:
            self._waiting(f"job {run.run_id} round {c.round} {c.host[:14]}… segment "
                          f"{c.segment}", verdict.reason)  # fmt: skip
            return None
        outcome = "PASS" if verdict.passed else "FAIL"
        metrics.JOBS_RUN.inc()
        metrics.VERDICTS.labels(outcome.lower()).inc()
        log.info("job %s round %d %s… segment %d: %s (%s, distance %.2e)",
                 run.run_id, c.round, c.host[:14], c.segment, outcome, verdict.reason,
                 verdict.distance)  # fmt: skip
        return self.ballots.seal(c, verdict)

    def run(self, stop: threading.Event) -> int:
        """Watch and vote until ``stop``; returns verdicts submitted."""
        done = self.stopping
        duties = [
            threading.Thread(target=self._duties_loop, args=(done, self.duties.step),
                             name="round-duties"),
            threading.Thread(target=self._per_run, args=(done, "screens", self._screens_of),
                             name="screens"),
            threading.Thread(target=self._per_run, args=(done, "replays", self._replays_of),
                             name="replays"),
        ]  # fmt: skip
        server = self._serve()
        try:
            self.ensure_registered()
            self._stay_registered()  # a verifier that left goes on until released
            for thread in duties[1:]:  # screens and replays at once; the round duties once
                thread.start()  # the early thread's pass (maybe waiting on a tx) has ended
            if self._early is not None:
                self._early.hand_over()
            duties[0].start()
            if self.cfg.auto_claim:
                AutoClaimer(self.poc, self.address, self._send).start(done)
            blocks = self.poc.blocks.passes(stop, self.cfg.poll_seconds)
            for passes, _ in enumerate(blocks, 1):
                if stopped := [t.name for t in duties if not t.is_alive()]:
                    raise VerifierError(f"the {stopped[0]} thread stopped; see the log above")
                try:
                    if self._registration_due(passes) and not self._stay_registered():
                        break
                except grpc.RpcError as err:  # an outage: try again, never exit on it
                    if not transient(err):
                        raise
                    log.warning("chain unreachable (%s); retrying", err.code().name)
                    stop.wait(2.0)
        except grpc.RpcError as err:
            raise VerifierError(
                f"chain at {shown(self.cfg.chain)}: {err.details() or err.code()}"
            ) from None
        finally:
            if self._early is not None:
                self._early.hand_over()  # (a start that failed before it was handed over)
            done.set()  # and no heavy work starts: what waits for a slot gives up
            self.replays_gate.close()
            self.screens_gate.close()
            for thread in duties:
                if thread.is_alive():
                    thread.join()
            if server is not None:
                server.stop(grace=1)
        return self.verdicts
