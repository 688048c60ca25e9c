"""Aggregation leaves out every pseudo-gradient that cannot be one, the same way for every party,
and never crashes on a hostile commit."""

from __future__ import annotations

import errno
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from dilochain.artifacts import blob_service
from dilochain.artifacts.blob_service import PeerFetchingStore
from dilochain.artifacts.store import ArtifactError, ArtifactTooLarge, LocalArtifactStore
from dilochain.node.aggregation import (
    Aggregator,
    ForeignGlobalState,
    GlobalView,
    UncheckedGlobalState,
    aggregated,
)
from dilochain.node.host import HostNode
from dilochain.protocol.pb.poc.v1.types_pb2 import CommitOutcome, GlobalCheckpoint, RoundCommit
from dilochain.testutil import shipped_data
from dilochain.training.artifact_limits import ArtifactLimits
from dilochain.training.compress import compress, decompress
from dilochain.training.diloco import initial_global, outer_step, params_of
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import encode_state

CFG = make_run_config(shipped_data()[1], "tiny")
ACCEPTED = CommitOutcome.COMMIT_OUTCOME_ACCEPTED


def accepted(**fields) -> RoundCommit:
    """A commit its round's resolution accepted into the global state."""
    return RoundCommit(outcome=ACCEPTED, **fields)


class FakePoc:
    """The chain's answers Aggregator asks for: one round's commits, no recorded globals."""

    def __init__(self, commits: list[RoundCommit]):
        self._commits = commits

    def commits(self, run_id: str, round: int) -> list[RoundCommit]:
        return self._commits

    def global_checkpoints(self, run_id: str) -> list:
        return []

    def hosts(self, run_id: str) -> list:
        return [SimpleNamespace(address=c.host, endpoint=f"{c.host}.example:7000")
                for c in self._commits]  # fmt: skip


def test_invalid_pseudo_gradients_are_left_out_not_fatal(tmp_path):
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    good = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    first = sorted(good)[0]
    hostile = {
        "garbage": b"\x00not a pseudo-gradient",
        "missing-tensor": compress({k: v for k, v in good.items() if k != first}, "int8"),
        "wrong-shape": compress({**good, first: torch.zeros(3)}, "int8"),
        "not-finite": compress({**good, first: torch.full_like(good[first], float("nan"))}, "int8"),
    }
    commits = [accepted(host="honest", base_hash=view.hash,
                           pseudo_grad_hash=local.put(compress(good, "int8")))]  # fmt: skip
    commits += [
        accepted(host=name, base_hash=view.hash, pseudo_grad_hash=local.put(data))
        for name, data in hostile.items()
    ]
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    aggregator = Aggregator(FakePoc(commits), "r", CFG, store, patience=0)
    nxt = aggregator.advance(view)
    expected = outer_step(view.state, [decompress(local.get(commits[0].pseudo_grad_hash))],
                          CFG.outer_lr, CFG.outer_momentum)  # fmt: skip
    assert nxt.round == 1
    assert all(torch.equal(nxt.state[k], expected[k]) for k in expected)


def test_a_round_below_min_hosts_carries_the_global_state_over(tmp_path):
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    digest = local.put(compress(step, "int8"))
    commits = [accepted(host=h, base_hash=view.hash, pseudo_grad_hash=digest) for h in "ab"]
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    thin = Aggregator(FakePoc(commits), "r", CFG, store, patience=0, min_hosts=3)
    carried = thin.advance(view)
    assert carried.round == 1 and carried.hash == view.hash  # θ and the momentum, unchanged
    enough = Aggregator(FakePoc(commits), "r", CFG, store, patience=0, min_hosts=2)
    assert enough.advance(view).hash != view.hash


def test_accepted_pseudo_gradients_come_also_from_the_sources_of_accepted_artifacts(
    tmp_path, monkeypatch
):
    """Aggregation fetches what the chain accepted from the sources of accepted artifacts
    (the run's hosts, then the verifiers that screened it; the host that committed it last);
    the prefetch of commits nobody decided yet asks the hosts alone."""
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    screened = LocalArtifactStore(tmp_path / "verifier")
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    commits = [accepted(host="a", base_hash=view.hash,
                        pseudo_grad_hash=screened.put(compress(step, "int8")))]  # fmt: skip
    hosts = PeerFetchingStore(LocalArtifactStore(tmp_path / "host"), lambda: [], limit=1 << 30)
    wide = PeerFetchingStore(screened, lambda: [], limit=1 << 30)
    aggregator = Aggregator(FakePoc(commits), "r", CFG, hosts, wide, patience=0)
    aggregator.prefetch(range(1))
    assert not hosts.has(commits[0].pseudo_grad_hash)
    asked = []

    def nobody_has_it(peers, *args, last=None, **kwargs):
        asked.append((peers, last))
        raise ArtifactError("on no peer")

    wide.peers = lambda: ["a.example:7000", "v.example:7001"]  # its own host, a verifier
    wide.local = LocalArtifactStore(tmp_path / "empty")
    with monkeypatch.context() as m:  # its own host is asked after every other source (the
        # fetch asks `last` after every other peer: test_node_training.py's
        # test_the_peer_asked_last_stays_last_behind_peers_that_sent_bad_bytes)
        m.setattr(blob_service, "fetch_from_peers", nobody_has_it)
        with pytest.raises(ArtifactError):
            aggregator.advance(view)
    assert asked[0] == (["a.example:7000", "v.example:7001"], "a.example:7000")
    wide.local = screened
    assert aggregator.advance(view).hash != view.hash
    with pytest.raises(ArtifactError, match="on no peer"):
        Aggregator(FakePoc(commits), "r", CFG, hosts, patience=0).advance(view)


class _Host:
    """What HostNode.catch_up uses: an aggregator that fails for some rounds (the artifact on
    no peer, or the disk full), and saves."""

    def __init__(self, unreachable: set[int], latest: GlobalView | None, full: set[int] = ()):
        self.unreachable, self.recorded, self.saved = unreachable, latest, []
        self.full, self.aggregator = full, self

    def advance(self, view: GlobalView) -> GlobalView:
        if view.round in self.unreachable:
            raise ArtifactError(f"artifact of round {view.round} is on no peer after 3 tries")
        if view.round in self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return GlobalView(view.round + 1, view.state)

    def latest(self, vouched: bool = False) -> GlobalView | None:
        return self.recorded

    def _save(self, view: GlobalView, attempted: int) -> None:
        self.saved.append(view.round)


def test_a_host_that_cannot_aggregate_resyncs_from_the_chain_or_sits_out(caplog):
    state = {"w": torch.zeros(2)}
    host = _Host(unreachable={1}, latest=GlobalView(2, state))
    view = HostNode.catch_up(host, GlobalView(0, state), 3, attempted=0)
    assert view.round == 3 and host.saved == [1, 2, 3]  # 0 → 1, resync to 2, 2 → 3
    assert "cannot aggregate round 1 (artifact of round 1 is on no peer" in caplog.text
    # No newer recorded state: it stops short, and the node sits the round out.
    host = _Host(unreachable={1}, latest=GlobalView(1, state))
    assert HostNode.catch_up(host, GlobalView(0, state), 3, attempted=0).round == 1
    assert "sitting it out: no newer global state recorded" in caplog.text


def test_a_full_disk_part_of_the_way_keeps_the_rounds_aggregated(caplog):
    """A host whose disk filled up while it aggregated lost every round it had aggregated
    (the error unwound the whole catch-up), never pruned (that comes after it), and so filled
    the disk again aggregating the same rounds: ~3 minutes to commit again after a full disk.
    It now keeps the view it reached and sits the round out, so the node prunes first."""
    state = {"w": torch.zeros(2)}
    host = _Host(unreachable=set(), latest=None, full={2})
    view = HostNode.catch_up(host, GlobalView(0, state), 4, attempted=0)
    assert view.round == 2 and host.saved == [1, 2]
    assert "round 4: sitting it out at round 2: [Errno 28] No space left" in caplog.text
    with pytest.raises(OSError):  # no step made: the round loop's handler sits it out
        HostNode.catch_up(host, view, 4, attempted=0)


def test_overlapped_rounds_aggregate_the_commits_built_on_the_state_before(tmp_path):
    """In an overlapped run round 1's commits build on θ_0, so θ_2 is the outer step of θ_1 over
    the round 1 pseudo-gradients whose base is θ_0; one claiming θ_1 as its base is left out."""
    cfg = make_run_config(shipped_data()[1], "tiny", overlap=True)
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    first = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(first.state).items()}
    digest = local.put(compress(step, "int8"))
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    round0 = [accepted(host="a", base_hash=first.hash, pseudo_grad_hash=digest)]
    second = Aggregator(FakePoc(round0), "r", cfg, store, patience=0).advance(first)
    assert second.parent == first.hash
    wrong = {k: torch.full_like(v, 0.5) for k, v in step.items()}
    round1 = [accepted(host="a", base_hash=first.hash, pseudo_grad_hash=digest),
              accepted(host="b", base_hash=second.hash,
                          pseudo_grad_hash=local.put(compress(wrong, "int8")))]  # fmt: skip
    third = Aggregator(FakePoc(round1), "r", cfg, store, patience=0).advance(second)
    expected = outer_step(second.state, [decompress(local.get(digest))], cfg.outer_lr,
                          cfg.outer_momentum)  # fmt: skip
    assert third.round == 2 and all(torch.equal(third.state[k], expected[k]) for k in expected)


def test_a_fail_closed_chain_aggregates_only_accepted_commits():
    outcomes = {name: CommitOutcome.Value(f"COMMIT_OUTCOME_{name}")
                for name in ("PENDING", "ACCEPTED", "PAID", "UNDECIDED", "FAILED")}  # fmt: skip
    commits = {name: RoundCommit(outcome=value, excluded=name == "FAILED")
               for name, value in outcomes.items()}  # fmt: skip
    assert [n for n, c in commits.items() if aggregated(c)] == ["ACCEPTED"]
    # A chain of trusted hosts without verifiers (fail_closed off): everything not failed.
    open_ = [n for n, c in commits.items() if aggregated(c, fail_closed=False)]
    assert open_ == ["PENDING", "ACCEPTED", "PAID", "UNDECIDED"]


class _History(FakePoc):
    """A chain that recorded a global state for each of several rounds (``agreeing`` of each
    round's three rostered hosts named each)."""

    def __init__(self, commits, recorded: dict[int, bytes], agreeing: int = 3):
        super().__init__(commits)
        self._recorded, self._agreeing = recorded, agreeing

    def global_checkpoints(self, run_id: str) -> list:
        return [GlobalCheckpoint(round=r, hash=h, agreeing=self._agreeing)
                for r, h in sorted(self._recorded.items())]  # fmt: skip

    def roster(self, run_id: str, round: int) -> list[str]:
        return ["a", "b", "c"]


def test_a_global_state_that_is_not_one_of_the_run_is_an_artifact_error(tmp_path):
    """If most of a round's commits name bytes that are not a state of the run, a host resyncs
    or sits the round out (an ArtifactError), never exits on a decoding error."""
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    first = sorted(params)[0]
    wrong = {**initial_global(params), "param/" + first: torch.zeros(3)}
    extra = {**initial_global(params), "extra": torch.ones(1)}
    hostile = [local.put(b"\x00not a state"), local.put(encode_state(wrong)),
               local.put(encode_state(extra))]  # fmt: skip
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    for digest in hostile:
        aggregator = Aggregator(_History([], {0: digest}), "r", CFG, store, patience=0,
                                reference=params)  # fmt: skip
        with pytest.raises(ArtifactError, match="global state"):
            aggregator.advance(view)
        with pytest.raises(ArtifactError, match="global state"):
            aggregator.latest()


def test_a_state_too_large_for_its_kind_is_refused_at_once_not_waited_for(tmp_path):
    """An artifact too large for its kind is as large on every disk and peer: the aggregator
    refuses it at once rather than asking again for its whole patience (a restarting peer is
    what patience waits for)."""
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    local = LocalArtifactStore(tmp_path)
    huge = local.put(b"\x00" * (ArtifactLimits.of(CFG).state + 1))
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    aggregator = Aggregator(_History([], {0: huge}), "r", CFG, store, patience=60,
                            reference=params)  # fmt: skip
    began = time.monotonic()
    with pytest.raises(ArtifactTooLarge, match="more than the"):
        aggregator.latest()
    assert time.monotonic() - began < 10 and local.has(huge)


def test_a_round_whose_commits_are_all_undecided_says_why_the_model_does_not_move(tmp_path, caplog):
    """A run with fewer live verifiers than the quorum leaves every commit undecided: the node
    aggregated nothing round after round and said only "aggregated 0 pseudo-gradients" (a
    newcomer's trial). It now says why."""
    _, view, _, commits, store = _one_step_round(tmp_path)
    commits[0].outcome = CommitOutcome.COMMIT_OUTCOME_UNDECIDED
    with caplog.at_level("WARNING"):
        Aggregator(FakePoc(commits), "r", CFG, store, patience=0).advance(view)
    assert "1 commits undecided (their challenges had no quorum of verifier votes)" in caplog.text


def _one_step_round(tmp_path):
    """(params, θ_0's view, the local store, round 0's one accepted commit of a small uniform
    step, a store fetching from it)."""
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    commits = [accepted(host="a", base_hash=view.hash,
                        pseudo_grad_hash=local.put(compress(step, "int8")))]  # fmt: skip
    return params, view, local, commits, PeerFetchingStore(local, lambda: [], limit=1 << 30)


def test_a_recorded_state_that_is_not_this_host_s_aggregate_is_never_trained_on(tmp_path):
    """The chain records what most of a round's commits built on. A state that differs from
    this host's own aggregate of the same round by machines' float differences is adopted; one
    that differs by more (hosts outnumbering the honest ones, or a lone commit in a round the
    honest hosts sat out, naming a state nobody aggregated: other weights, or the weights with
    a momentum that steers the next outer step) stops the host, never resyncs it."""
    params, view, local, commits, store = _one_step_round(tmp_path)
    first = sorted(view.state)[0]
    near = dict(view.state)
    near[first] = near[first].clone()
    near[first].view(-1)[0] = torch.nextafter(near[first].view(-1)[0], torch.tensor(1e9))
    digest = local.put(encode_state(near))
    for c in commits:
        c.base_hash = digest  # the round's commits built on the chain's state
    moved = Aggregator(_History(commits, {0: digest}), "r", CFG, store, patience=0,
                       reference=params).advance(view)  # fmt: skip
    expected = outer_step(near, [decompress(local.get(commits[0].pseudo_grad_hash))],
                          CFG.outer_lr, CFG.outer_momentum)  # fmt: skip
    assert moved.round == 1 and all(torch.equal(moved.state[k], expected[k]) for k in expected)
    other_weights = {k: v * 1.01 if k.startswith("param/") else v for k, v in view.state.items()}
    steering = {k: v if k.startswith("param/") else torch.full_like(v, 5.0)
                for k, v in view.state.items()}  # fmt: skip
    for foreign in (other_weights, steering):
        digest = local.put(encode_state(foreign))
        aggregator = Aggregator(_History(commits, {0: digest}), "r", CFG, store, patience=0,
                                reference=params)  # fmt: skip
        with pytest.raises(ForeignGlobalState, match="not the initial state that this"):
            aggregator.advance(view)


def test_a_foreign_state_withheld_for_a_round_is_never_skipped_for_the_next(tmp_path):
    """Hosts outnumbering the honest ones have round 1 recorded as a state they never serve:
    an honest host, which computed its own θ_1, cannot check it and sits out (asking again
    each round), rather than jumping to the chain's latest state, round 2's, which the same
    hosts recorded (built on theirs) and do serve: that one it never adopts unchecked."""
    params, view, local, commits, store = _one_step_round(tmp_path)
    hijacked = {k: v * 3 if k.startswith("param/") else v for k, v in view.state.items()}
    recorded = {0: view.hash, 1: b"\x07" * 32, 2: local.put(encode_state(hijacked))}
    aggregator = Aggregator(_History(commits, recorded), "r", CFG, store, patience=0,
                            reference=params)  # fmt: skip
    saved = []
    host = SimpleNamespace(aggregator=aggregator, _save=lambda v, attempted: saved.append(v))
    own = aggregator.advance(view)
    assert HostNode.catch_up(host, view, 3, attempted=2).hash == own.hash  # round 1, its own
    assert [v.round for v in saved] == [1]
    with pytest.raises(UncheckedGlobalState, match="cannot be checked"):
        aggregator.advance(own)


def test_a_host_that_cannot_aggregate_takes_only_a_state_most_of_its_round_named(tmp_path):
    """A host missing an accepted pseudo-gradient (served to its screeners, withheld from the
    hosts) cannot compute the next state and would take the chain's latest unchecked: it does
    so only when most of the roster of the round that recorded it named it, never when the
    withholder's own commits alone did, in a round the honest hosts sat out."""
    params, view, local, commits, store = _one_step_round(tmp_path)
    commits[0].pseudo_grad_hash = b"\x42" * 32  # accepted, on no peer
    theirs = {k: v * 3 if k.startswith("param/") else v for k, v in view.state.items()}
    recorded = {0: view.hash, 1: local.put(encode_state(theirs))}
    saved = []
    for agreeing, reached in ((1, 0), (2, 1)):
        aggregator = Aggregator(_History(commits, recorded, agreeing), "r", CFG, store,
                                patience=0, reference=params)  # fmt: skip
        host = SimpleNamespace(aggregator=aggregator, _save=lambda v, a: saved.append(v))
        assert HostNode.catch_up(host, view, 1, attempted=0).round == reached


def test_a_recorded_initial_state_is_checked_against_the_seed_s(tmp_path):
    """θ_0 is the seeded model's: a host starting from the chain takes a recorded θ_0 only if
    it is (within float differences) the one it builds itself."""
    params, view, local, commits, store = _one_step_round(tmp_path)
    model = build_model(CFG.model_config, 1)
    forged = {k: v * 2 for k, v in view.state.items()}
    for state, fine in ((view.state, True), (forged, False)):
        aggregator = Aggregator(_History(commits, {0: local.put(encode_state(state))}), "r",
                                CFG, store, patience=0, reference=params)  # fmt: skip
        host = SimpleNamespace(aggregator=aggregator, model=model, cfg=SimpleNamespace(run_id="r"))
        if fine:
            assert HostNode._latest(host).hash == view.hash
        else:
            with pytest.raises(ForeignGlobalState, match="not the initial state"):
                HostNode._latest(host)


class _Lagging(FakePoc):
    """A node a block behind: the round's outcomes are pending the first time it is asked."""

    def __init__(self, commits):
        super().__init__(commits)
        self.asked = 0

    def commits(self, run_id: str, round: int) -> list[RoundCommit]:
        self.asked += 1
        if self.asked > 1:
            return self._commits
        pending = [RoundCommit() for _ in self._commits]
        for mine, theirs in zip(pending, self._commits, strict=True):
            mine.CopyFrom(theirs)
            mine.outcome = CommitOutcome.COMMIT_OUTCOME_PENDING
        return pending


def test_outcomes_a_lagging_node_shows_pending_are_asked_for_again(tmp_path):
    _, view, _, commits, store = _one_step_round(tmp_path)
    for fail_closed in (True, False):  # a fail-open chain would aggregate what is pending
        poc = _Lagging(commits)
        moved = Aggregator(poc, "r", CFG, store, patience=5, fail_closed=fail_closed).advance(view)
        assert poc.asked == 2 and moved.hash != view.hash
    stuck = _Lagging(commits)
    stuck.asked = -(10**9)  # never catches up
    with pytest.raises(ArtifactError, match="still undecided"):
        Aggregator(stuck, "r", CFG, store, patience=1, fail_closed=False).advance(view)


def test_an_overlapped_round_whose_base_is_unknown_here_is_not_carried_over(tmp_path):
    """An overlapped round builds on θ_{r-1}; when the chain recorded none (a disputed tally)
    and this host's view forgot its parent (restarted, or joined from the chain's latest),
    every commit looked built on something else and θ_r carried over, while hosts that stayed
    up stepped it: a state the others did not compute. It resyncs or sits out instead."""
    cfg = make_run_config(shipped_data()[1], "tiny", overlap=True)
    params = {n: p.detach().clone() for n, p in build_model(cfg.model_config, 1).named_parameters()}
    local = LocalArtifactStore(tmp_path)
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    t0 = GlobalView(0, initial_global(params))
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(t0.state).items()}
    delta = local.put(compress(step, "int8"))
    r0 = [accepted(host="a", base_hash=t0.hash, pseudo_grad_hash=delta)]
    t1 = Aggregator(FakePoc(r0), "r", cfg, store, patience=0).advance(t0)
    r1 = [accepted(host="a", base_hash=t0.hash, pseudo_grad_hash=delta),
          accepted(host="x", base_hash=b"\x66" * 32, pseudo_grad_hash=delta)]  # fmt: skip
    poc = FakePoc(r1)  # round 0's state not recorded (a 1-1 tally), round 1's is
    poc.global_checkpoints = lambda run_id: [GlobalCheckpoint(round=1, hash=t1.hash)]
    aggregator = Aggregator(poc, "r", cfg, store, patience=0)
    stayed = aggregator.advance(t1)  # it knows θ_1's parent
    assert stayed.hash != t1.hash
    with pytest.raises(ArtifactError, match="neither recorded nor known"):
        aggregator.advance(GlobalView(1, t1.state))  # the same θ_1, its parent forgotten


def test_a_host_s_loop_never_waits_on_a_prefetch():
    """A host serving its pseudo-gradient at a drip holds a prefetch for minutes: the node's
    loop goes on to its height while the prefetch runs on a thread of its own, one at a time."""
    began, release, asked = threading.Event(), threading.Event(), []

    def prefetch(rounds):
        asked.append(rounds)
        began.set()
        release.wait(30)

    heights = iter([1, 2, 3])
    host = SimpleNamespace(_prefetching=None, aggregator=SimpleNamespace(prefetch=prefetch),
                           _blocks=lambda stop: iter([None] * 3),
                           _round_info=lambda: SimpleNamespace(height=next(heights)))  # fmt: skip
    host._prefetch = lambda rounds: HostNode._prefetch(host, rounds)  # type: ignore[arg-type]
    HostNode._wait_for_height(host, 3, threading.Event(), range(0, 2))  # type: ignore[arg-type]
    assert began.wait(5) and asked == [range(0, 2)]  # once: still fetching at the next block
    assert host._prefetching.is_alive()
    release.set()
    host._prefetching.join(5)
    assert not host._prefetching.is_alive()
