"""The chain view the dashboard and ``dilochain status`` show (from a fake chain), the dashboard
server's answers while the chain is down, slow or back, and the page itself in headless
Chromium (over a fake view)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import grpc
import pytest
from cosmpy.aerial.types import Block

from dilochain.chain_view import chain_view, last_seen, progress, rewards_of
from dilochain.dashboard import server
from dilochain.dashboard.server import Dashboard
from dilochain.protocol.pb.poc.v1.query_pb2 import QueryRoundInfoResponse
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    Beacon,
    BeaconEntry,
    Challenge,
    ChallengeStatus,
    Claimable,
    CollateralInfo,
    EpochInfo,
    Host,
    RoundCommit,
    Run,
    RunConfig,
    Screen,
    SealedVote,
    Slash,
    Verifier,
    Vote,
)

pytestmark = pytest.mark.wall_clock  # asserts how long things take: see conftest

HOST_A, HOST_B, CHEATER = (f"dilo1{c * 38}" for c in "abc")
V1, V2, V3 = (f"dilo1v{c * 37}" for c in "xyz")
TOKENS = 4 * 8 * 128  # inner_steps x batch_size x seq_len
DLC = 10**6


class NotFound(grpc.RpcError):
    """What a node answers for a block it does not have."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.NOT_FOUND


class Unavailable(grpc.RpcError):
    """What the failover channel raises once no node has answered for its patience."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


class FakeLedger:
    """cosmpy's ``LedgerClient``, as far as the view uses it: block ``h`` is at 1000 + 2h s."""

    def __init__(self, height: int, missing: frozenset[int] = frozenset()):
        self.height = height
        self.missing = missing

    def query_block(self, height: int) -> Block:
        if height in self.missing:
            raise NotFound()
        when = datetime.fromtimestamp(1000 + 2 * height, tz=UTC)
        return Block(height=height, time=when, chain_id="fake-chain", tx_hashes=[])

    def query_latest_block(self) -> Block:
        return self.query_block(self.height)


# Run "r1": no overlap, 10-block commit windows, a 25-block period from block 25 (round 0:
# commits 25-34, resolved at 49; round 1: commits 50-59, selection 62, opening 70, resolved 74).
RUN = Run(run_id="r1", created_height=5, start_height=25,
          config=RunConfig(total_rounds=4, round_blocks=10, inner_steps=4, batch_size=8,
                           seq_len=128))  # fmt: skip
ROUND_1 = QueryRoundInfoResponse(round=1, window_start=50, window_end=59, selection_height=62,
                                 verdict_open_height=70, resolution_height=74)  # fmt: skip


def commit(host: str, round_: int, height: int, loss: float, excluded: bool = False):
    return RoundCommit(run_id="r1", round=round_, host=host, height=height, tokens=TOKENS,
                       eval_loss=loss, excluded=excluded)  # fmt: skip


class FakePoc:
    """``PocClient``'s queries over a fixed chain: run r1 in round 1's commit window, hosts A
    and B (B left at block 51), a cheater slashed out of round 0, verifiers V1 and V2 active
    and V3 silent (slashed in round 0), epoch 0 closed and paid."""

    COMMITS = {0: [commit(HOST_A, 0, 30, 3.0), commit(HOST_B, 0, 33, 3.4),
                   commit(CHEATER, 0, 31, 9.0, excluded=True)],
               1: [commit(HOST_A, 1, 52, 2.5)]}  # fmt: skip
    SLASHES = [Slash(address=CHEATER, run_id="r1", round=0, amount=str(3 * DLC), height=49,
                     reason="failed a challenge"),
               Slash(address=V3, run_id="r1", round=0, amount=str(DLC // 2), height=49,
                     reason="withheld its beacon secret")]  # fmt: skip
    EARNED = {(HOST_A, 0): (600 * DLC, True), (HOST_B, 0): (300 * DLC, False),
              (V1, 0): (100 * DLC, True)}  # fmt: skip

    def __init__(self, info: QueryRoundInfoResponse = ROUND_1, run: Run = RUN):
        self.info = info
        self.run = run

    def runs(self) -> list[Run]:
        return [self.run]

    def round_info(self, run_id: str) -> QueryRoundInfoResponse:
        return self.info

    def commits(self, run_id: str, round: int) -> list[RoundCommit]:
        return self.COMMITS.get(round, [])

    def hosts(self, run_id: str) -> list[Host]:
        return [Host(address=HOST_A, endpoint="10.0.0.1:7000", registered_height=10),
                Host(address=HOST_B, endpoint="10.0.0.2:7000", registered_height=12,
                     left_height=51)]  # fmt: skip

    def collateral(self, address: str) -> CollateralInfo:
        return CollateralInfo(address=address, bonded=str(10 * DLC))

    def challenges(self, run_id: str, round: int) -> list[Challenge]:
        if round != 0:
            return []
        votes = [SealedVote(verifier=V1), SealedVote(verifier=V2)]
        return [Challenge(run_id="r1", round=0, host=CHEATER, segment=s, verifiers=[V1, V2],
                          votes=votes, status=ChallengeStatus.CHALLENGE_STATUS_FAILED)
                for s in range(2)]  # fmt: skip

    def screens(self, run_id: str, round: int) -> list[Screen]:
        if round != 0:
            return []
        return [Screen(host=HOST_A, votes=[Vote(verifier=V1), Vote(verifier=V2)])]

    def beacon(self, run_id: str, round: int) -> Beacon:
        found = {0: [V1, V2], 1: [V1]}.get(round, [])
        return Beacon(entries=[BeaconEntry(verifier=v) for v in found])

    def slashes(self) -> list[Slash]:
        return self.SLASHES

    def verifiers(self) -> list[Verifier]:
        leaving = {V3: {"left_height": 60, "release_height": 80}, V1: {"endpoint": "10.0.0.9:7001"}}
        return [
            Verifier(address=v, registered_height=3, **leaving.get(v, {})) for v in (V1, V2, V3)
        ]

    def epoch(self, epoch: int | None = None) -> EpochInfo:
        if epoch == 0:
            return EpochInfo(epoch=0, start_height=0, end_height=49, closed=True,
                             reward_pool=str(1000 * DLC))  # fmt: skip
        return EpochInfo(epoch=1, start_height=50, end_height=99, reward_pool="0")

    def claimable(self, address: str, epoch: int) -> Claimable:
        amount, claimed = self.EARNED.get((address, epoch), (0, False))
        return Claimable(address=address, epoch=epoch, amount=str(amount), claimed=claimed)


def test_the_view_shows_progress_hosts_verifiers_and_rewards():
    view = chain_view(FakeLedger(53), FakePoc())
    assert (view["chain_id"], view["height"]) == ("fake-chain", 53)
    assert view["time"] == "1970-01-01T00:18:26+00:00"  # block 53: 1000 + 106 s
    (run,) = view["runs"]
    assert run["phase"] == "commit" and run["in_progress"]
    assert run["progress"] == {"stage": "commit window", "block": 5, "blocks": 10,
                               "resolves_at": 74}  # fmt: skip
    assert run["loss_curve"] == [[0, 3.4], [1, 2.5]]  # medians of each round's eval losses
    # Round 0 is the newest with its commit window closed: it took one 25-block period,
    # blocks 9 to 34, 50 s. The cheater's excluded commit counts for nothing.
    assert (run["shown_round"], run["rate_round"]) == (1, 0)
    assert run["tokens_per_second"] == pytest.approx(2 * TOKENS / 50)
    hosts = {h["address"]: h for h in run["hosts"]}
    assert list(hosts) == [HOST_A, HOST_B, CHEATER]  # V3, slashed in the run, is no host
    assert hosts[HOST_A] == {
        "address": HOST_A, "endpoint": "10.0.0.1:7000", "registered": True, "committed": True,
        "last_seen": {"height": 52, "what": "commit of round 1"},
        "tokens_per_second": pytest.approx(TOKENS / 50),
        "collateral": 10 * DLC, "slashed": 0, "earned": 600 * DLC, "claimed": 600 * DLC,
    }  # fmt: skip
    assert hosts[HOST_B]["last_seen"] == {"height": 51, "what": "left the run"}
    assert not hosts[HOST_B]["registered"] and not hosts[HOST_B]["committed"]
    assert (hosts[HOST_B]["earned"], hosts[HOST_B]["claimed"]) == (300 * DLC, 0)
    cheater = hosts[CHEATER]
    assert cheater["slashed"] == 3 * DLC and cheater["tokens_per_second"] is None
    assert cheater["last_seen"] == {"height": 31, "what": "commit of round 0"}
    assert (run["challenges_round"], run["challenges"]) == (1, [])  # none yet this round
    verifiers = {v["address"]: v for v in view["verifiers"]}
    assert verifiers[V1] == {
        "address": V1, "registered_height": 3, "left_height": 0, "release_height": 0,
        "endpoint": "10.0.0.9:7001", "collateral": 10 * DLC, "slashed": 0,
        "last_seen": {"run_id": "r1", "round": 1, "what": "beacon"}, "up": True,
        "earned": 100 * DLC, "claimed": 100 * DLC,
    }  # fmt: skip
    assert verifiers[V2]["last_seen"] == {"run_id": "r1", "round": 0, "what": "verdict"}
    assert verifiers[V2]["up"] is True  # seen in the round before: it is up
    assert verifiers[V3]["slashed"] == DLC // 2
    assert verifiers[V3]["up"] is False and verifiers[V3]["last_seen"] is None
    assert (verifiers[V3]["left_height"], verifiers[V3]["release_height"]) == (60, 80)
    # `dilochain status` says the same of them.
    from dilochain.cli.status_cmd import render

    (table,) = [t for t in render(view) if t.title == "verifiers"]
    assert list(table.columns[1].cells) == [
        "up", "up", "leaving (left at block 60, released after block 80)"]  # fmt: skip
    assert list(table.columns[0].cells) == [V1, V2, V3]


def test_a_log_file_gets_a_line_of_progress_a_few_times_a_round():
    """``devnet up`` printed nothing for its minutes of training when its output was not a
    terminal (rich's live tables are drawn on terminals only): it prints a run's round, last
    held-out loss and pending challenges each time they change."""
    from dilochain.cli.status_cmd import progress_lines

    view = chain_view(FakeLedger(65), FakePoc())
    (run,) = view["runs"]
    assert progress_lines(view) == [
        "run r1: round 1/4, held-out loss 2.5000 (round 1), 0 challenges pending"]  # fmt: skip
    challenges = [{"status": "pending"}, {"status": "passed"}, {"status": "pending"}]
    view["runs"] = [{**run, "phase": "finished", "loss_curve": [], "challenges": challenges}]
    assert progress_lines(view) == ["run r1: round 1/4 (finished), 2 challenges pending"]


def test_verification_shows_the_rounds_challenges_and_its_own_throughput():
    view = chain_view(FakeLedger(65), FakePoc())  # block 66: reveals and verdicts of round 1
    (run,) = view["runs"]
    assert run["progress"] == {"stage": "verification (reveals and verdicts)", "block": 7,
                               "blocks": 15, "resolves_at": 74}  # fmt: skip
    assert run["rate_round"] == 1  # round 1's commit window closed: blocks 34-59, 50 s
    assert run["tokens_per_second"] == pytest.approx(TOKENS / 50)


def test_without_the_blocks_of_a_round_there_is_no_rate():
    view = chain_view(FakeLedger(53, missing=frozenset({9})), FakePoc())
    (run,) = view["runs"]
    assert run["tokens_per_second"] is None
    assert all(h["tokens_per_second"] is None for h in run["hosts"])


def test_a_finished_run_has_no_one_up():
    done = QueryRoundInfoResponse(round=4, window_start=125, window_end=134, finished=True,
                                  selection_height=137, verdict_open_height=145,
                                  resolution_height=149)  # fmt: skip
    view = chain_view(FakeLedger(130), FakePoc(done))
    (run,) = view["runs"]
    assert (run["phase"], run["in_progress"], run["round"]) == ("finished", False, 4)
    assert run["progress"] == {"stage": "finished", "block": 0, "blocks": 0,
                               "resolves_at": None}  # fmt: skip
    assert (run["shown_round"], run["rate_round"], run["challenges_round"]) == (3, 3, 3)
    assert {v["up"] for v in view["verifiers"]} == {None}


@pytest.mark.parametrize(
    ("height", "stage", "block", "blocks"),
    [(5, "round 1 starts at block 50", 1, 45),
     (49, "commit window", 1, 10), (58, "commit window", 10, 10),
     (59, "verification (beacon)", 1, 15), (61, "verification (beacon)", 3, 15),
     (62, "verification (reveals and verdicts)", 4, 15),
     (69, "verification (verdicts opened)", 11, 15),
     (73, "verification (verdicts opened)", 15, 15)],
)  # fmt: skip
def test_progress_through_a_round(height, stage, block, blocks):
    assert progress(ROUND_1, RUN, height) == {"stage": stage, "block": block, "blocks": blocks,
                                              "resolves_at": 74}  # fmt: skip


def test_an_overlapped_run_resolves_the_round_before():
    overlapped = Run(run_id="o", created_height=5, start_height=25,
                     config=RunConfig(total_rounds=4, round_blocks=20, overlap=True))  # fmt: skip
    # Round 2 commits in blocks 65-84 while round 1 (commits 45-64) is verified.
    info = QueryRoundInfoResponse(round=2, window_start=65, window_end=84, selection_height=87,
                                  verdict_open_height=95, resolution_height=99)  # fmt: skip
    assert progress(info, overlapped, 70) == {"stage": "commit window", "block": 7,
                                              "blocks": 20, "resolves_at": 79}  # fmt: skip


def test_last_seen_is_the_latest_thing_recorded():
    host = Host(address=HOST_A, registered_height=40)
    assert last_seen(host, []) == {"height": 40, "what": "registered"}
    assert last_seen(host, [commit(HOST_A, 0, 30, 1.0), commit(HOST_A, 1, 55, 1.0)]) == {
        "height": 55, "what": "commit of round 1"}  # fmt: skip
    assert last_seen(None, []) is None


def test_rewards_add_up_over_epochs():
    epochs = [{"claims": [{"address": "a", "amount": 5, "claimed": True},
                          {"address": "b", "amount": 7, "claimed": False}]},
              {"claims": [{"address": "a", "amount": 3, "claimed": False}]}]  # fmt: skip
    assert rewards_of(epochs) == {"a": {"earned": 8, "claimed": 5},
                                  "b": {"earned": 7, "claimed": 0}}  # fmt: skip


class FakeReader:
    """A view reader that raises ``failure`` while it is set, else answers ``view``; it
    counts its reads and, while ``gate`` is clear, blocks in them."""

    addresses = ("127.0.0.1:1",)

    def __init__(self, view: dict):
        self.view = view
        self.failure: BaseException | None = None
        self.reads = 0
        self.gate = threading.Event()
        self.gate.set()

    def read(self) -> dict:
        self.reads += 1
        self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return self.view

    def close(self) -> None:
        pass


def get(url: str) -> tuple[int, dict]:
    """Status and JSON body of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def fake_dashboard():
    reader = FakeReader(chain_view(FakeLedger(53), FakePoc()))
    dashboard = Dashboard("unused:1", "127.0.0.1:0", refresh_seconds=0, reader=reader)
    address = dashboard.start()
    yield reader, f"http://{address}"
    dashboard.stop()


FAILURES = [Unavailable(), ConnectionError("connection refused"), RuntimeError("closed channel"),
            ValueError("Cannot invoke RPC on closed channel!")]  # fmt: skip


def test_any_chain_failure_is_a_503_logged_once_per_outage(fake_dashboard, caplog):
    reader, url = fake_dashboard
    caplog.set_level(logging.WARNING, logger="dilochain.dashboard.server")
    assert get(f"{url}/api/view")[0] == 200
    for failure in FAILURES:  # one outage, whatever each read raises
        reader.failure = failure
        for _ in range(3):
            status, body = get(f"{url}/api/view")
            assert status == 503 and body["error"].startswith("chain unreachable at 127.0.0.1:1")
            assert body["error"].endswith("; retrying")
    assert get(f"{url}/api/view")[1]["error"] == (
        "chain unreachable at 127.0.0.1:1 (ValueError: Cannot invoke RPC on closed channel!); "
        "retrying")  # fmt: skip
    logged = [r for r in caplog.records if r.name == "dilochain.dashboard.server"]
    assert [r.getMessage() for r in logged] == [
        "dashboard: chain unreachable at 127.0.0.1:1 (UNAVAILABLE); retrying"
    ]
    assert logged[0].exc_info is None  # one line, no traceback
    reader.failure = None
    status, body = get(f"{url}/api/view")
    assert status == 200 and body["height"] == 53
    reader.failure = ConnectionError("refused")  # a second outage: a second line
    assert get(f"{url}/api/view")[0] == 503
    assert len([r for r in caplog.records if r.name == "dilochain.dashboard.server"]) == 2


def test_a_chain_that_does_not_answer_is_unreachable_after_a_wait(fake_dashboard, monkeypatch):
    reader, url = fake_dashboard
    monkeypatch.setattr(server, "WAIT_SECONDS", 0.3)
    reader.gate.clear()
    answers = [get(f"{url}/api/view") for _ in range(3)]
    assert answers == [(503, {"error": "chain unreachable at 127.0.0.1:1 (no answer in 0.3 s); "
                                       "retrying"})] * 3  # fmt: skip
    assert reader.reads == 1  # one read at a time, whatever the number of requests
    reader.gate.set()
    deadline = time.monotonic() + 10
    while (status := get(f"{url}/api/view")[0]) != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_the_dashboard_starts_while_the_chain_is_down_and_recovers(tmp_path):
    from dilochain.localnet import ChainProcess, init_localnet
    from dilochain.testutil import CHAIN_ID

    init_localnet(tmp_path, CHAIN_ID, {})
    chain = ChainProcess(tmp_path, block_time="200ms")
    chain.address = f"127.0.0.1:{free_port()}"  # nothing listens there yet
    dashboard = Dashboard(chain.address, "127.0.0.1:0")
    url = f"http://{dashboard.start()}/api/view"
    try:
        status, body = get(url)
        assert status == 503 and body["error"].startswith(f"chain unreachable at {chain.address} (")
        chain.start()
        deadline = time.monotonic() + 60
        while (answer := get(url))[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert answer[0] == 200, answer
        assert answer[1]["chain_id"] == CHAIN_ID and answer[1]["height"] >= 1
    finally:
        dashboard.stop()
        if chain.proc is not None:
            chain.stop()


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip("chromium and chromium-driver: run ./scripts/bootstrap.sh")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-sync",
                 "--disable-component-update", "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(flag)
    page = webdriver.Chrome(service=Service(driver), options=options)
    yield page
    page.quit()


def _settled(check) -> None:
    """``check`` the page again while an element it read went stale under it: the page
    renders anew on every refresh, which a slow machine can fall between two reads."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(10):
        try:
            return check()
        except StaleElementReferenceException:
            continue
    check()


def test_the_page_formats_names_amounts_and_empty_tables(fake_dashboard, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    reader, url = fake_dashboard
    browser.get(url)
    wait = WebDriverWait(browser, 20)
    wait.until(lambda p: p.find_element("id", "height").text == "53")
    assert browser.execute_script(
        "return [dlc(10000000), dlc(1234567890), dlc(1000000000000), dlc(1), dlc(-2500000)]"
    ) == ["10 DLC", "1,234.56789 DLC", "1,000,000 DLC", "0.000001 DLC", "-2.5 DLC"]  # fmt: skip

    def shown() -> None:
        run = browser.find_element("css selector", 'section[data-run="r1"]')
        assert run.find_element("css selector", ".progress .stage").text == (
            "commit window: block 5 of 10"
        )
        assert run.find_element("css selector", ".progress progress").get_attribute("value") == "5"
        assert "round 1 resolves at block 74" in run.find_element("css selector", ".progress").text
        summary = run.find_element("css selector", ".summary").text
        assert summary == "1 of 1 hosts committed round 1 · 164 tokens/s in round 0"
        host = run.find_element("css selector", f'tr[data-address="{HOST_A}"]')
        name = host.find_element("css selector", "td.host .address")
        assert (name.text, name.get_attribute("title")) == ("dilo1aaaa…aaaa", HOST_A)
        assert host.find_element("css selector", "td.endpoint").text == "10.0.0.1:7000"
        assert host.find_element("css selector", "td.committed").text == "yes"
        assert host.find_element("css selector", "td.seen").text == (
            "block 52 (1 block ago): commit of round 1"
        )
        assert host.find_element("css selector", "td.rate").text == "82"  # 4096 tokens in 50 s
        claimed = host.find_element("css selector", "td.claimed .amount")
        assert (claimed.text, claimed.get_attribute("title")) == ("600 DLC", "600,000,000 udlc")
        empty = run.find_element("css selector", "table.challenges td.none")
        assert empty.text == "no challenges yet this round"
        verifiers = browser.find_elements("css selector", "#verifiers table.verifiers tbody tr")
        assert [v.get_attribute("data-address") for v in verifiers] == [V1, V2, V3]
        assert [v.find_element("css selector", "td.status").text for v in verifiers] == [
            "up", "up", "leaving (left at block 60, released after block 80)"]  # fmt: skip
        seen = verifiers[0].find_element("css selector", "td.seen").text
        assert seen == "run r1, round 1: beacon"
        assert verifiers[2].find_element("css selector", "td.slashed").text == "0.5 DLC"
        assert [v.find_element("css selector", "td.endpoint").text for v in verifiers] == [
            "10.0.0.9:7001", "-", "-"]  # fmt: skip
        slash = browser.find_element("css selector", "#slashes td.amount").text
        assert slash == "3 DLC"

    _settled(shown)

    # The chain goes away: the last view stays, marked stale, under a banner; then it is back.
    reader.failure = ConnectionError("refused")
    banner = browser.find_element("id", "error")
    wait.until(lambda p: banner.is_displayed())
    assert banner.text.startswith("chain unreachable at 127.0.0.1:1 (ConnectionError: refused)")
    assert "retrying" in banner.text and banner.text.endswith(", stale)")
    assert "stale" in browser.find_element("tag name", "body").get_attribute("class")
    assert browser.find_element("id", "height").text == "53"
    reader.failure = None
    wait.until(lambda p: not banner.is_displayed())
    assert "stale" not in browser.find_element("tag name", "body").get_attribute("class")


def test_the_page_says_none_for_an_empty_chain(fake_dashboard, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    reader, url = fake_dashboard
    reader.view = {**reader.view, "runs": [], "verifiers": [], "slashes": []}
    browser.get(url)
    WebDriverWait(browser, 20).until(lambda p: p.find_element("id", "height").text == "53")
    assert browser.find_element("id", "runs").text == "no runs yet"
    assert browser.find_element("css selector", "#verifiers td.none").text == (
        "no verifiers registered"
    )
    assert browser.find_element("css selector", "#slashes td.none").text == "none"
