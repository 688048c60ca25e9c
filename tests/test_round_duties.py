"""A verifier's round duties against the real chain: it commits to its beacon secret in the
commit window and opens it in the beacon window every round, from its key alone (restart-safe),
never slashed. (Screening against real hosts: the devnet and adversarial network tests.)"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from dilochain.client import submit
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as encoding
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgDepositCollateral,
    MsgRegisterVerifier,
    ScreenVote,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Beacon, BeaconEntry, RoundCommit, Run, Verifier
from dilochain.protocol.schedule import Window
from dilochain.testutil import FAKE_DATA, wallet
from dilochain.training.run_config import make_run_config
from dilochain.verifier.ballots import BallotBox
from dilochain.verifier.round_duties import RoundDuties, beacon_secret


def test_votes_on_the_run_s_hosts_go_out_before_a_departed_host_is_screened(tmp_path):
    """A host slashed (or gone) since it committed serves nothing, and its fetches retry: the
    votes on the others are sent first, so they land in a short window whatever it costs."""
    me = wallet(73)
    member, gone = str(wallet(74).address()), str(wallet(75).address())
    poc = SimpleNamespace(
        params=lambda: PocParams(screeners_per_commit=0),
        screens=lambda run_id, round_: [],
        verifiers=lambda: [Verifier(address=str(me.address()), registered_height=1)],
        commits=lambda run_id, round_: [RoundCommit(host=h, round=0) for h in (gone, member)],
        hosts=lambda run_id: [SimpleNamespace(address=member)],
        round_info=lambda run_id: SimpleNamespace(height=14),
    )
    events = []

    def screener(run, round_, anchor, todo, patient):
        events.append(("screen", [c.host for c in todo]))
        return [ScreenVote(host=c.host, passed=c.host == member) for c in todo]

    def send(*msgs, until_height):
        events.append(("send", [v.host for m in msgs for v in m.votes]))

    duties = RoundDuties(poc, me, send, screener,
                         BallotBox(tmp_path / "ballots.sqlite", str(me.address())))  # fmt: skip
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    duties._screen(Run(run_id="r"), window, Beacon(anchor=b"\x01" * 32), 15)
    assert events == [("screen", [member]), ("send", [member]), ("screen", [gone]),
                      ("send", [gone])]  # fmt: skip
    assert ("r", 0, "screen") in duties._done


def test_a_run_whose_screens_take_long_delays_no_beacon_opening(tmp_path):
    """Screens run on a thread of their own: while one run's screen has not come back (a
    hostile run's model can make it take an hour), every run's beacon secret is still opened
    in its window (an unopened one is slashed)."""
    me = wallet(76)
    address = str(me.address())
    cfg = make_run_config(FAKE_DATA, "tiny", round_blocks=4, total_rounds=2)
    runs = [Run(run_id=r, config=cfg, start_height=10) for r in ("huge", "small")]
    committed = Beacon(
        anchor=b"\x01" * 32, entries=[BeaconEntry(verifier=address, commitment=b"\x02" * 32)]
    )
    poc = SimpleNamespace(
        params=lambda: PocParams(screeners_per_commit=0),
        runs=lambda active: runs,
        round_info=lambda run_id: SimpleNamespace(height=14),  # round 0's beacon window
        beacon=lambda run_id, round_: committed,
        screens=lambda run_id, round_: [],
        verifiers=lambda: [Verifier(address=address, registered_height=1)],
        commits=lambda run_id, round_: [RoundCommit(host="h", round=0)],
        hosts=lambda run_id: [SimpleNamespace(address="h")],
    )
    screening, finish = threading.Event(), threading.Event()

    def screener(run, round_, anchor, todo, patient):
        screening.set()
        finish.wait(30)
        return []

    sent = []
    duties = RoundDuties(poc, me, lambda *msgs, until_height: sent.extend(msgs), screener,
                         BallotBox(tmp_path / "ballots.sqlite", address))  # fmt: skip
    screens = threading.Thread(target=duties.screen_step, args=(runs[0],))
    screens.start()
    try:
        assert screening.wait(30)  # the first run's screen is under way, and stays so
        duties.step()
        assert [(m.run_id, type(m).__name__) for m in sent] == [
            ("huge", "MsgRevealBeacon"),
            ("small", "MsgRevealBeacon"),
        ]
    finally:
        finish.set()
        screens.join(30)


def test_a_verifier_that_left_commits_to_no_beacon_of_a_round_begun_after(tmp_path):
    """The chain takes no beacon commitment from a verifier for a round begun after it left
    (it sits on none of that round's committees), but holds it to those begun before."""
    me = wallet(77)
    address = str(me.address())
    cfg = make_run_config(FAKE_DATA, "tiny", round_blocks=4, total_rounds=2)
    runs = [Run(run_id="old", config=cfg, start_height=10),
            Run(run_id="new", config=cfg, start_height=12)]  # fmt: skip
    poc = SimpleNamespace(
        params=lambda: PocParams(),
        runs=lambda active: runs,
        round_info=lambda run_id: SimpleNamespace(height=11),  # next: block 12, both open
        beacon=lambda run_id, round_: Beacon(),
        verifiers=lambda: [Verifier(address=address, registered_height=1, left_height=11)],
    )
    sent = []
    duties = RoundDuties(poc, me, lambda *msgs, until_height: sent.extend(msgs), None,
                         BallotBox(tmp_path / "ballots.sqlite", address))  # fmt: skip
    duties.step()
    assert [(m.run_id, type(m).__name__) for m in sent] == [("old", "MsgCommitBeacon")]
    assert ("new", 0, "commit") in duties._done  # not asked again each block


def test_a_run_whose_screens_take_long_holds_no_other_run_s_screens():
    """Each active run is screened (and replayed) on a thread of its own, started when the run
    is seen and stopped when it is no longer active: while one run's screen has not come back,
    another run's are screened and sent. A run seen again before its ended thread has exited
    gets a new one only once it has (two would seal the same vote twice)."""
    from dilochain.verifier.service import VerifierService

    runs, listed = [Run(run_id="huge"), Run(run_id="small")], [0]

    def active_runs(active):
        listed[0] += 1  # once a supervisor pass
        return list(runs)

    def threads_named(name: str) -> int:
        return sum(t.name == name for t in threading.enumerate())

    def two_passes() -> None:
        seen, deadline = listed[0], time.monotonic() + 30
        while listed[0] < seen + 2:
            assert time.monotonic() < deadline, "the supervisor stopped passing"
            time.sleep(0.005)

    def passes(stop, poll):
        while not stop.is_set():
            yield
            stop.wait(0.01)

    poc = SimpleNamespace(runs=active_runs, blocks=SimpleNamespace(passes=passes))
    stuck, finish, screened = threading.Event(), threading.Event(), threading.Event()

    def screen_step(run):
        if run.run_id == "huge":
            stuck.set()
            finish.wait(30)
        else:
            screened.set()

    service = VerifierService.__new__(VerifierService)  # only what the screens loop uses
    service.poc, service.cfg = poc, SimpleNamespace(duties_poll_seconds=0.01)
    service.duties = SimpleNamespace(screen_step=screen_step)
    stop = threading.Event()
    loop = threading.Thread(target=service._per_run, args=(stop, "screens", service._screens_of))
    loop.start()
    try:
        assert stuck.wait(30) and screened.wait(30)  # the small run's, while the huge is stuck
        names = {t.name for t in threading.enumerate()}
        assert {"screens-huge", "screens-small"} <= names
        runs.pop()  # the small run ends: its thread with it
        deadline = time.monotonic() + 30
        while "screens-small" in {t.name for t in threading.enumerate()}:
            assert time.monotonic() < deadline, "the ended run's screens thread is still there"
            time.sleep(0.01)
        huge = runs.pop()  # the huge run ends while its screen is stuck...
        two_passes()
        runs.append(huge)  # ... and is seen again: its old thread is still screening
        two_passes()
        assert threads_named("screens-huge") == 1
        stuck.clear()
        finish.set()  # the old thread ends; then the run gets a new one, which screens again
        assert stuck.wait(30)
        assert threads_named("screens-huge") == 1
    finally:
        stop.set()
        finish.set()
        loop.join(30)
    assert not loop.is_alive()
    assert not {"screens-huge", "screens-small"} & {t.name for t in threading.enumerate()}


def _screening_chain(me, hosts: list[str], round_info) -> SimpleNamespace:
    """A chain as a verifier's screens ask it: ``me`` its one verifier (every commit is its to
    screen), ``hosts`` each with a commit of round 0 nobody screened yet."""
    return SimpleNamespace(
        params=lambda: PocParams(screeners_per_commit=0),
        screens=lambda run_id, round_: [],
        verifiers=lambda: [Verifier(address=str(me.address()), registered_height=1)],
        commits=lambda run_id, round_: [RoundCommit(host=h, round=0) for h in hosts],
        hosts=lambda run_id: [SimpleNamespace(address=h) for h in hosts],
        round_info=round_info,
    )


def test_screens_too_slow_for_the_window_send_what_they_finished(tmp_path):
    """Screened a message's worth at a time: once the next block is the last that a vote can
    land in, the votes screened so far go out and the rest of the round is left unscreened
    (replayed in full), instead of every vote arriving after the window."""
    me = wallet(77)
    hosts = [str(wallet(100 + i).address()) for i in range(40)]
    height = [18]
    poc = _screening_chain(me, hosts, lambda run_id: SimpleNamespace(height=height[0]))
    batches = []

    def screener(run, round_, anchor, todo, patient):
        batches.append(len(todo))
        height[0] += 2  # each batch takes two blocks
        return [ScreenVote(host=c.host, passed=True) for c in todo]

    sent = []
    duties = RoundDuties(poc, me, lambda *msgs, until_height: sent.extend(msgs), screener,
                         BallotBox(tmp_path / "ballots.sqlite", str(me.address())))  # fmt: skip
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    duties._screen(Run(run_id="r"), window, Beacon(anchor=b"\x01" * 32), 19)
    # heights 18, 20, 22: the third batch would start when block 23, the last, is next
    assert batches == [16, 16]
    assert [len(m.votes) for m in sent] == [16, 16]
    assert ("r", 0, "screen") in duties._done  # past its patience: the window is over for it


def test_screens_cut_short_by_a_chain_outage_send_what_they_finished(tmp_path):
    """The chain stops answering between two batches: the votes already screened still go out
    (the send fails over or retries), the rest is screened again while the window is patient."""
    me = wallet(78)
    hosts = [str(wallet(140 + i).address()) for i in range(40)]
    answers = iter([SimpleNamespace(height=14)])

    def round_info(run_id):
        found = next(answers, None)
        if found is None:
            raise OutageError()
        return found

    poc = _screening_chain(me, hosts, round_info)
    sent = []
    duties = RoundDuties(poc, me, lambda *msgs, until_height: sent.extend(msgs),
                         lambda run, round_, anchor, todo, patient: [
                             ScreenVote(host=c.host, passed=True) for c in todo],
                         BallotBox(tmp_path / "ballots.sqlite", str(me.address())))  # fmt: skip
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    duties._screen(Run(run_id="r"), window, Beacon(anchor=b"\x01" * 32), 15)
    assert [[v.host for v in m.votes] for m in sent] == [hosts[:16]]
    assert ("r", 0, "screen") not in duties._done  # patient: the 24 left are screened again


class OutageError(grpc.RpcError):
    """What a gRPC query raises when no chain node answers."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


@pytest.mark.integration
@pytest.mark.wall_clock  # it must act within 4-block windows of 200 ms blocks: never starved
def test_duties_commit_and_open_the_beacon_every_round(running_chain, caplog, tmp_path):
    client, (creator, verifier, *_) = running_chain.client, running_chain.wallets
    address = str(verifier.address())
    cfg = make_run_config(
        FAKE_DATA,
        "tiny",
        round_blocks=4,
        total_rounds=2,
        start_delay_blocks=3,
    )
    submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id="b", config=cfg))
    submit(client, verifier, MsgDepositCollateral(depositor=address, amount="10000000"),
           MsgRegisterVerifier(verifier=address))  # fmt: skip
    poc = PocClient(running_chain.address)

    def send(*msgs, until_height=None):
        return submit(client, verifier, *msgs, until_height=until_height)

    screened = []  # no host commits in this run: nothing to screen
    screener = lambda *args: screened.append(args) or []  # noqa: E731
    ballots = BallotBox(tmp_path / "ballots.sqlite", address)  # no hosts: nothing to vote on
    participant = RoundDuties(poc, verifier, send, screener, ballots)
    caplog.set_level(logging.WARNING)
    deadline = time.monotonic() + 120
    while not poc.round_info("b").finished:
        assert time.monotonic() < deadline, "the run did not finish"
        participant.step()
        if poc.round_info("b").round == 1:  # a restarted verifier: fresh duties
            participant = RoundDuties(poc, verifier, send, screener, ballots)
        time.sleep(0.1)
    for round_ in (0, 1):
        found = poc.beacon("b", round_)
        (entry,) = found.entries
        secret = beacon_secret(verifier, "b", round_)
        assert entry.verifier == address and entry.secret == secret
        assert entry.commitment == encoding.commitment(secret, address)
        assert found.seed == encoding.mix(found.anchor, [(address, secret)])
    assert beacon_secret(verifier, "b", 0) != beacon_secret(verifier, "b", 1)
    assert not poc.slashes(address)
    assert "refused" not in caplog.text and not screened
    poc.close()


def test_a_screen_waits_for_an_unreachable_host_until_the_window_s_middle(tmp_path):
    """A host restarting serves nothing for a while: its committee's screeners ask again
    until the middle of the screening window instead of failing it at once; then its
    unavailability is the verdict."""
    me, host = wallet(71), str(wallet(72).address())
    poc = SimpleNamespace(
        params=lambda: PocParams(screeners_per_commit=0),  # every verifier screens
        screens=lambda run_id, round_: [],
        verifiers=lambda: [Verifier(address=str(me.address()), registered_height=1)],
        commits=lambda run_id, round_: [RoundCommit(host=host, round=0)],
        hosts=lambda run_id: [SimpleNamespace(address=host)],
        round_info=lambda run_id: SimpleNamespace(height=14),
    )
    asked = []

    def screener(run, round_, anchor, todo, patient):
        asked.append(patient)
        vote = ScreenVote(host=host, passed=False)
        return [] if patient else [vote]

    sent = []
    duties = RoundDuties(poc, me, lambda *msgs, until_height: sent.extend(msgs), screener,
                         BallotBox(tmp_path / "ballots.sqlite", str(me.address())))  # fmt: skip
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    assert window.screen_patience == 19
    run, beacon = Run(run_id="r"), Beacon(anchor=b"\x01" * 32)
    for next_block in (15, 18):
        duties._screen(run, window, beacon, next_block)
        assert ("r", 0, "screen") not in duties._done and not sent  # asked again next poll
    duties._screen(run, window, beacon, 19)
    assert asked == [True, True, False] and [len(m.votes) for m in sent] == [1]
    assert ("r", 0, "screen") in duties._done


def _no_chain_views(monkeypatch) -> None:
    """A replay pass's views of its rounds without asking the chain (run "r" is no run)."""
    from dilochain.verifier.service import RoundView

    views = staticmethod(lambda poc, run_id, rounds: {r: RoundView([], {}, ()) for r in rounds})
    monkeypatch.setattr(RoundView, "of_rounds", views)


@pytest.mark.integration
def test_a_replay_waits_for_an_unreachable_host_until_the_handover(
    running_chain, tmp_path, monkeypatch
):
    """A challenged host restarting serves nothing for a while: its verifiers ask again each
    pass until a few blocks before the verdict window's handover (their votes land before it,
    so no backups are called); from then on, unavailability is the verdict."""
    from concurrent.futures import ThreadPoolExecutor

    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
    from dilochain.verifier import service as service_module
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import VerifierService
    from dilochain.verifier.verdicts import Verdict

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    challenge = Challenge(run_id="r", round=0, host="h", segment=2)
    height = {"now": 20}
    sealed = []
    monkeypatch.setattr(service_module.schedule, "in_flight", lambda run, params, h: [window])
    monkeypatch.setattr(service.poc, "round_info",
                        lambda run_id: SimpleNamespace(height=height["now"]))  # fmt: skip
    monkeypatch.setattr(service, "_dataset", lambda run: object())
    monkeypatch.setattr(service, "prune", lambda run, resolved: None)
    _no_chain_views(monkeypatch)
    monkeypatch.setattr(service, "pending", lambda run, round_: [challenge])
    monkeypatch.setattr(service, "_timed_check", lambda run, data, c, deadline, view: Verdict(
        False, "artifact unavailable or malformed: on no peer", unavailable=True))  # fmt: skip
    monkeypatch.setattr(service, "_send", lambda *msgs, until_height: sealed.extend(msgs))
    with ThreadPoolExecutor(1) as pool:
        for now in (20, 28):  # next blocks 21 and 29: early enough to land before handover
            height["now"] = now
            assert service._work_on(Run(run_id="r"), pool) == 0 and not sealed
        assert window.replay_patience == 30
        height["now"] = 29
        assert service._work_on(Run(run_id="r"), pool) == 1
    assert [(m.host, m.segment) for m in sealed] == [("h", 2)]


@pytest.mark.integration
def test_a_host_serving_slowly_holds_back_no_other_host_s_screen(
    running_chain, tmp_path, monkeypatch
):
    """A round's screens fetch several commits at once: a host whose artifacts stall delays no
    other host's vote, and once the window is about to close the votes finished go out
    without waiting for it (its commit is replayed in full, as one nobody screened)."""
    from dilochain.verifier import service as service_module
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import VerifierService
    from dilochain.verifier.verdicts import Verdict

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    service.poc._blocks = blocks = SimpleNamespace(height=20)
    stalled, released, slow_done = threading.Event(), threading.Event(), threading.Event()
    screened = []

    def screen_commit(cfg, data, commit, anchor, store, *args):
        try:
            if commit.host == "slow":
                stalled.set()
                assert released.wait(30)  # its artifacts arrive after the screens gave up
            else:
                assert stalled.wait(30)  # fetched while the slow host stalls
            with args[-1]:  # the shared compute slot
                screened.append(commit.host)
            return Verdict(True, "consistent")
        finally:
            if commit.host == "slow":
                slow_done.set()

    def wait(futures, **kwargs):
        done, pending = real_wait(futures, **kwargs)
        if len(pending) == 1:  # only the slow host's screen is left
            blocks.height = 22  # the next block is the last a vote can land in
        return done, pending

    real_wait = service_module.wait
    monkeypatch.setattr(service_module, "wait", wait)
    monkeypatch.setattr(service_module, "screen_commit", screen_commit)
    monkeypatch.setattr(service_module.schedule, "round_window",
                        lambda run, params, round_: SimpleNamespace(selection=23))  # fmt: skip
    monkeypatch.setattr(service, "_dataset", lambda run: object())
    monkeypatch.setattr(service, "_store", lambda run, host, hosts: SimpleNamespace(touched=set()))
    monkeypatch.setattr(service.poc, "hosts", lambda run_id: [])
    commits = [RoundCommit(host=h, round=0) for h in ("slow", "a", "b")]
    try:
        votes = service.screen(Run(run_id="r"), 0, b"\x01" * 32, commits)
    finally:
        released.set()
    assert [(v.host, v.passed) for v in votes] == [("a", True), ("b", True)]
    assert slow_done.wait(30) and screened == ["a", "b"]  # nothing screened once given up


@pytest.mark.integration
def test_a_slow_replay_holds_back_no_finished_vote_as_the_window_closes(
    running_chain, tmp_path, monkeypatch
):
    """Votes of a pass go out as its replays finish once the window is about to close, not
    after its slowest replay (one hung job would have made every vote of the pass late)."""
    from concurrent.futures import ThreadPoolExecutor

    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
    from dilochain.verifier import service as service_module
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import VerifierService
    from dilochain.verifier.verdicts import Verdict

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    fast, slow = (Challenge(run_id="r", round=0, host=h, segment=1) for h in ("fast", "slow"))
    service.poc._blocks = SimpleNamespace(height=36)  # the next block is 2 before the last
    sent_fast = threading.Event()
    sealed = []

    def check(run, data, c, deadline, view):
        if c.host == "slow":
            assert sent_fast.wait(30), "the fast job's vote waited for the slow one"
        return Verdict(True, "replayed")

    def send(*msgs, until_height):
        sealed.extend(m.host for m in msgs)
        sent_fast.set()

    monkeypatch.setattr(service_module.schedule, "in_flight", lambda run, params, h: [window])
    monkeypatch.setattr(service.poc, "round_info", lambda run_id: SimpleNamespace(height=35))
    monkeypatch.setattr(service, "_dataset", lambda run: object())
    monkeypatch.setattr(service, "prune", lambda run, resolved: None)
    _no_chain_views(monkeypatch)
    monkeypatch.setattr(service, "pending", lambda run, round_: [slow, fast])
    monkeypatch.setattr(service, "_timed_check", check)
    monkeypatch.setattr(service, "_send", send)
    with ThreadPoolExecutor(2) as pool:
        assert service._work_on(Run(run_id="r"), pool) == 2
    assert sealed == ["fast", "slow"]


@pytest.mark.integration
def test_a_stopping_verifier_begins_no_more_replays_of_its_pass(
    running_chain, tmp_path, monkeypatch
):
    """A verifier asked to stop waited for every replay of its pass (and the fetches of each).
    The pass now ends once it is stopping: replays not begun are not begun, the votes finished
    go out, and those under way finish (a restarted verifier replays what it did not vote on
    while the window is open)."""
    from concurrent.futures import ThreadPoolExecutor

    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
    from dilochain.verifier import service as service_module
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import VerifierService
    from dilochain.verifier.verdicts import Verdict

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    window = Window(0, start=10, end=13, selection=23, opening=40, resolution=42, handover=33)
    jobs = [Challenge(run_id="r", round=0, host=f"h{i}", segment=1) for i in range(4)]
    service.poc._blocks = SimpleNamespace(height=20)
    started, release, ran, sent = threading.Event(), threading.Event(), [], []

    def check(run, data, c, deadline, view):
        if c.host == "h2":  # h0 holds one thread, h1 is done at once, then h2 takes it
            started.set()
        if c.host != "h1":
            release.wait(30)
        ran.append(c.host)
        return Verdict(True, "replayed")

    monkeypatch.setattr(service_module.schedule, "in_flight", lambda run, params, h: [window])
    monkeypatch.setattr(service.poc, "round_info", lambda run_id: SimpleNamespace(height=19))
    monkeypatch.setattr(service, "_dataset", lambda run: object())
    monkeypatch.setattr(service, "prune", lambda run, resolved: None)
    _no_chain_views(monkeypatch)
    monkeypatch.setattr(service, "pending", lambda run, round_: jobs)
    monkeypatch.setattr(service, "_timed_check", check)
    monkeypatch.setattr(service, "_send", lambda *msgs, until_height: sent.extend(msgs))
    stopper = threading.Thread(target=lambda: started.wait(30) and service.stopping.set())
    stopper.start()
    with ThreadPoolExecutor(2) as pool:
        assert service._work_on(Run(run_id="r"), pool) == 1  # with h0 and h2 under way
        assert ran == ["h1"] and [m.host for m in sent] == ["h1"]
        release.set()
    stopper.join(30)
    assert sorted(ran) == ["h0", "h1", "h2"]  # h3 never began


@pytest.mark.integration
def test_a_host_serving_its_checkpoints_slowly_holds_no_replay_slot(
    running_chain, tmp_path, monkeypatch
):
    """A replay fetched its checkpoints inside its slot of the verifier's cores: a challenged
    host that served them at a drip held that slot, and every other replay waited. They are
    fetched first (``replay.warm_challenge``), and the slot is taken once they are on disk."""
    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
    from dilochain.verifier import service as service_module
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import RoundView, VerifierService
    from dilochain.verifier.verdicts import Verdict

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,), jobs=1)
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    fast, slow = (Challenge(run_id="r", round=0, host=h, segment=1) for h in ("fast", "slow"))
    fetching, released, replayed = threading.Event(), threading.Event(), []

    def warm(cfg, store, commit, challenge, policy):
        if challenge.host == "slow":
            fetching.set()
            assert released.wait(30)

    def check(run, data, challenge, view):
        replayed.append(challenge.host)
        return Verdict(True, "replayed")

    monkeypatch.setattr(service_module, "warm_challenge", warm)
    monkeypatch.setattr(service, "_check", check)
    monkeypatch.setattr(service, "_store", lambda run, host, hosts: SimpleNamespace(touched=set()))
    view = RoundView([], {h: RoundCommit(host=h) for h in ("slow", "fast")}, ())
    run = Run(run_id="r", config=make_run_config(FAKE_DATA, preset="tiny"))
    slow_job = threading.Thread(target=service._timed_check, args=(run, None, slow, 10**6, view))
    slow_job.start()
    try:
        assert fetching.wait(30)
        assert service._timed_check(run, None, fast, 10**6, view).passed  # one slot: not held
        assert replayed == ["fast"]
    finally:
        released.set()
        slow_job.join(30)
    assert replayed == ["fast", "slow"]


@pytest.mark.integration
def test_a_verifier_that_left_stops_once_released_and_one_slashed_out_registers_again(
    running_chain, tmp_path, monkeypatch
):
    """Released (seen leaving or not: a leave with nothing in flight is released in its own
    block, between two checks), the daemon stops, never bonding again; slashed below the
    minimum, it registers again; slashed out while leaving, it does what it owes until its
    release."""
    from dilochain.protocol.pb.poc.v1.types_pb2 import CollateralInfo
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.service import VerifierService

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    me, registered = service.address, []
    monkeypatch.setattr(service, "ensure_registered", lambda: registered.append(me))
    chain = {"listed": [Verifier(address=me, registered_height=1)], "height": 10,
             "held": CollateralInfo(bonded="700", locked="0")}  # fmt: skip
    service.poc = SimpleNamespace(
        verifiers=lambda: chain["listed"], collateral=lambda address: chain["held"],
        slashes=lambda address: [], blocks=SimpleNamespace(height=0),
    )  # fmt: skip
    assert service._stay_registered() and not service.left_height
    chain["listed"] = []  # a slash removed it, 700 of its bond left: it registers again
    assert service._stay_registered() and registered == [me]
    chain["held"] = CollateralInfo(bonded="0", locked="0", unbonding=[{"amount": "1000"}])
    assert not service._stay_registered() and registered == [me]  # released unseen: it stops
    chain["listed"] = [Verifier(address=me, registered_height=1, left_height=7, release_height=20)]
    assert service._stay_registered() and service.left_height == 7  # its duties go on
    chain["listed"], chain["held"] = [], CollateralInfo(bonded="700", locked="0")
    service.poc.blocks.height = 15  # slashed out before its release: still doing its duties
    assert service._stay_registered() and registered == [me]
    service.poc.blocks.height = 21  # released
    assert not service._stay_registered() and registered == [me]


def test_a_verifier_slashed_out_of_the_set_registers_again_at_the_next_block():
    """Its own slashes are asked for every pass (a slash below the minimum removes it, and a
    block out of the set is a block of screens and votes it may not cast), the rest every
    REGISTRATION_CHECK_PASSES; not while leaving (its release comes at the slow pace)."""
    from dilochain.verifier.service import REGISTRATION_CHECK_PASSES, VerifierService

    service = VerifierService.__new__(VerifierService)
    service.address, service.left_height, service._slashes_seen = "me", 0, None
    slashes = []
    service.poc = SimpleNamespace(slashes=lambda address: list(slashes))
    assert not service._registration_due(1)  # the first pass learns the count
    assert not service._registration_due(2)
    assert service._registration_due(REGISTRATION_CHECK_PASSES)
    slashes.append("withheld its beacon secret")  # the next pass checks, once
    assert service._registration_due(REGISTRATION_CHECK_PASSES + 1)
    assert not service._registration_due(REGISTRATION_CHECK_PASSES + 2)
    slashes.append("a vote left sealed")
    service.left_height = 7  # leaving: its release is checked at the slow pace
    assert not service._registration_due(REGISTRATION_CHECK_PASSES + 3)


@pytest.mark.integration
def test_hosts_fetch_from_a_verifier_what_its_host_withholds_from_them(
    running_chain, tmp_path, monkeypatch
):
    """A verifier serves what it fetched and registers its blob service (again when it moves);
    a host that cannot get an accepted pseudo-gradient from the host that committed it, which
    served it to its screeners and to no host, fetches it from a screener."""
    from dilochain.artifacts.blob_service import PeerFetchingStore, serve_blobs
    from dilochain.artifacts.store import ArtifactError, LocalArtifactStore
    from dilochain.node.host import HostNode
    from dilochain.protocol.pb.poc.v1.types_pb2 import Host
    from dilochain.verifier.config import VerifierConfig
    from dilochain.verifier.round_duties import own_record
    from dilochain.verifier.service import VerifierService

    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,))
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[3])
    from dilochain.artifacts import blob_service
    from dilochain.verifier.service import SERVED_STREAMS

    withholding, cheat = serve_blobs(LocalArtifactStore(tmp_path / "cheat"), "127.0.0.1:0")
    made, real = [], blob_service._Streams
    monkeypatch.setattr(blob_service, "_Streams", lambda *a: made.append(real(*a)) or made[-1])
    servers = [withholding, service._serve()]
    assert [m.streams for m in made] == [SERVED_STREAMS]  # a backup duty: fewer than a host's
    try:
        service.ensure_registered()
        first = service.endpoint
        assert own_record(service.poc, service.address).endpoint == first != ""
        pseudo_grad = service.local.put(b"an accepted pseudo-gradient, fetched to screen it")
        host = SimpleNamespace(
            poc=SimpleNamespace(hosts=lambda run_id: [Host(address="cheat", endpoint=cheat)],
                                verifier_endpoints=service.poc.verifier_endpoints),
            cfg=SimpleNamespace(run_id="r"), address="me",
        )  # fmt: skip
        host._peer_endpoints = lambda: HostNode._peer_endpoints(host)  # type: ignore[arg-type]
        assert host._peer_endpoints() == [cheat]  # what nobody accepted: from hosts alone
        peers = HostNode._accepted_sources(host)  # type: ignore[arg-type]
        assert peers == [cheat, first]  # the run's hosts first
        store = PeerFetchingStore(LocalArtifactStore(tmp_path / "host"), lambda: peers, 1 << 20)
        assert store.get(pseudo_grad) == b"an accepted pseudo-gradient, fetched to screen it"
        alone = PeerFetchingStore(LocalArtifactStore(tmp_path / "h2"), lambda: [cheat], 1 << 20)
        with pytest.raises(ArtifactError, match="on no peer"):
            alone.get(pseudo_grad, attempts=1)
        servers.append(service._serve())  # on another port (a restart): the record follows
        service.ensure_registered()
        assert own_record(service.poc, service.address).endpoint == service.endpoint != first
        quiet = VerifierService(cfg.model_copy(update={"blob_address": ""}), running_chain.client,
                                running_chain.wallets[3])  # fmt: skip
        assert quiet._serve() is None  # an operator's choice: it serves nothing, and says so
        quiet.ensure_registered()
        assert own_record(service.poc, service.address).endpoint == ""
        quiet.poc.close()
    finally:
        for server in servers:
            server.stop(grace=None)
        service.poc.close()


def test_a_restarted_verifier_opens_its_beacon_secret_before_the_service_exists(tmp_path):
    """``verifier run`` begins its round duties before torch loads (5 s here, against a beacon
    window of a few blocks whose miss is a slash): the early thread opens the secret it
    committed to, and the service it hands over to does not open it again."""
    import subprocess
    import sys

    from dilochain.verifier.round_duties import EarlyDuties

    code = "import sys, dilochain.cli.verifier_cmd; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
    me = wallet(77)
    address = str(me.address())
    cfg = make_run_config(FAKE_DATA, "tiny", round_blocks=4, total_rounds=2)
    run = Run(run_id="r", start_height=10, config=cfg)
    committed = Beacon(entries=[BeaconEntry(verifier=address, commitment=b"\x02" * 32)])
    sent, stop = [], threading.Event()

    def passes(done, poll):
        while not done.is_set():
            yield
            done.wait(0.01)

    poc = SimpleNamespace(
        params=lambda: PocParams(screeners_per_commit=0), runs=lambda active: [run],
        round_info=lambda run_id: SimpleNamespace(height=14),  # round 0's beacon window
        beacon=lambda run_id, round_: committed, blocks=SimpleNamespace(passes=passes),
    )  # fmt: skip
    early = EarlyDuties.start(poc, me, lambda *msgs, until_height: sent.extend(msgs), tmp_path,
                              0.01)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not sent and time.monotonic() < deadline:
            stop.wait(0.01)
    finally:
        duties = early.hand_over()
    assert [(m.run_id, m.round, type(m).__name__) for m in sent] == [("r", 0, "MsgRevealBeacon")]
    assert sent[0].secret == beacon_secret(me, "r", 0)
    assert ("r", 0, "reveal") in duties._done  # the service's thread finds it done
    assert duties.ballots.path == tmp_path / "ballots.sqlite" and duties.screener is None
