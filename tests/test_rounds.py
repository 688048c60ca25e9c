"""The rounds module in process: commit windows, commit checks and global checkpoints."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.chain.errors import codes
from dilochain.chain.modules import beacon, collateral, registry, rounds
from dilochain.protocol import schedule
from dilochain.protocol.merkle import merkle_proof, merkle_root
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitRound,
    MsgCreateRun,
    MsgDepositCollateral,
    MsgLeaveRun,
    MsgRegisterHost,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Run, RunConfig
from dilochain.testutil import FAKE_DATA, local_chain, signed_tx, wallet
from dilochain.training.run_config import make_run_config

CREATOR, H1, H2, H3, OUTSIDER = (wallet(i) for i in (20, 21, 22, 23, 24))
HOSTS = [H1, H2, H3]
CONFIG = make_run_config(FAKE_DATA, "tiny", min_collateral="100", round_blocks=3, total_rounds=2)
RESET = make_run_config(FAKE_DATA, "tiny", min_collateral="100", round_blocks=3,
                        total_rounds=2, carry_inner_state=False)  # fmt: skip
TOKENS = CONFIG.inner_steps * CONFIG.batch_size * CONFIG.seq_len


class Accounts:
    def __init__(self):
        self.seq = {}

    def tx(self, who, msgs, number):
        seq = self.seq.get(number, 0)
        self.seq[number] = seq + 1
        return signed_tx(who, msgs, sequence=seq, account_number=number)


def _create_and_join(chain, acct, run_id, config):
    """Create a run and register every host in it (bonding its collateral)."""
    create = MsgCreateRun(creator=str(CREATOR.address()), run_id=run_id, config=config)
    assert chain.broadcast(acct.tx(CREATOR, [create], 0)).code == 0
    for n, host in enumerate(HOSTS, start=1):
        addr = str(host.address())
        msgs = [MsgDepositCollateral(depositor=addr, amount="100"),
                MsgRegisterHost(host=addr, run_id=run_id, endpoint="x:1")]  # fmt: skip
        assert chain.broadcast(acct.tx(host, msgs, n)).code == 0


@pytest.fixture
def setup(tmp_path, request):
    """A chain with run "r" (``CONFIG``, or the config a test parametrizes it with)."""
    funded = {str(w.address()): 10**9 for w in [CREATOR, *HOSTS, OUTSIDER]}
    # Rounds alone: no verifier screens these commits, so a fail-closed chain would challenge
    # (and, unrevealed, slash) every one of them.
    chain = local_chain(tmp_path, funded, poc={"fail_closed": False})
    acct = Accounts()
    _create_and_join(chain, acct, "r", getattr(request, "param", CONFIG))
    chain.block()  # height 1: run created, start_height 2
    yield chain, acct
    chain.app.store.close()


LEAVES = [hashlib.sha256(bytes([i])).digest()
          for i in range(CONFIG.inner_steps // CONFIG.checkpoint_interval + 1)]  # fmt: skip


def commit(host, round_, base=b"\x01" * 32, **kw):
    addr = str(host.address())
    fields = {
        "host": addr, "run_id": "r", "round": round_, "ckpt_root": merkle_root(LEAVES),
        "final_hash": LEAVES[-1], "final_proof": merkle_proof(LEAVES, len(LEAVES) - 1),
        "pseudo_grad_hash": b"\x03" * 32, "base_hash": base, "residual_hash": b"\x04" * 32,
        "tokens": TOKENS, "loss": 2.5,
        "data_seed": schedule.derive_data_seed(CONFIG.seed, addr, round_), **kw,
    }  # fmt: skip
    return MsgCommitRound(**fields)


def test_window_schedule(setup):
    chain, _ = setup
    run = registry.get_run(chain.app.committed_view(), "r")
    assert run.start_height == 2
    # commit 3 + beacon 4 + reveal 5 + verdict 10 + opening 5: a period of 27 blocks
    params = chain.app.params.poc
    assert schedule.window_at(run, params, 1) is None
    assert schedule.window_at(run, params, 2) == schedule.Window(0, 2, 4, 8, 24, 28, 18)
    assert schedule.window_at(run, params, 28) == schedule.Window(0, 2, 4, 8, 24, 28, 18)
    assert schedule.window_at(run, params, 29) == schedule.Window(1, 29, 31, 35, 51, 55, 45)


def test_commits_and_majority_global_checkpoint(setup):
    chain, acct = setup
    odd = b"\x09" * 32
    for n, (host, base) in enumerate(
        zip(HOSTS, [b"\x01" * 32, b"\x01" * 32, odd], strict=True), start=1
    ):
        assert chain.broadcast(acct.tx(host, [commit(host, 0, base)], n)).code == 0
    chain.block()  # height 2
    view = chain.app.committed_view()
    assert [c.host for c in rounds.commits(view, "r", 0)] == sorted(str(h.address()) for h in HOSTS)
    assert rounds.global_checkpoints(view, "r") == []  # window still open
    chain.block()
    chain.block()  # height 4 ends round 0's window
    (record,) = rounds.global_checkpoints(chain.app.committed_view(), "r")
    assert (record.round, record.hash, record.commits, record.agreeing) == (0, b"\x01" * 32, 3, 2)


@pytest.mark.parametrize(
    ("change", "code", "needle"),
    [
        ({"round": 1}, codes.INVALID_REQUEST, "not open"),
        ({"data_seed": 5}, codes.INVALID_REQUEST, "data_seed must be"),
        ({"tokens": 1}, codes.INVALID_REQUEST, "tokens must be"),
        ({"ckpt_root": b"short"}, codes.INVALID_REQUEST, "32-byte"),
        ({"residual_hash": b""}, codes.INVALID_REQUEST, "residual_hash must be a 32-byte"),
        ({"final_hash": LEAVES[0]}, codes.INVALID_REQUEST, "do not open ckpt_root's last leaf"),
        ({"run_id": "nope"}, codes.NOT_FOUND, "not found"),
        ({"eval_loss": float("nan")}, codes.INVALID_REQUEST, "must be finite and not negative"),
        ({"loss": float("inf")}, codes.INVALID_REQUEST, "must be finite and not negative"),
        ({"eval_loss": -1.0}, codes.INVALID_REQUEST, "must be finite and not negative"),
    ],
)
def test_bad_commits(setup, change, code, needle):
    chain, acct = setup
    result = chain.broadcast(acct.tx(H1, [commit(H1, 0, **change)], 1))
    assert result.code == code and needle in result.raw_log, result.raw_log


def test_second_commit_and_outsider_are_refused(setup):
    chain, acct = setup
    assert chain.broadcast(acct.tx(H1, [commit(H1, 0)], 1)).code == 0
    chain.block()
    again = chain.broadcast(acct.tx(H1, [commit(H1, 0, ckpt_root=b"\x07" * 32)], 1))
    assert again.code == codes.INVALID_REQUEST and "already committed" in again.raw_log
    result = chain.broadcast(acct.tx(OUTSIDER, [commit(OUTSIDER, 0)], 4))
    assert result.code == codes.UNAUTHORIZED and "is not a host" in result.raw_log


@pytest.mark.parametrize("setup", [CONFIG, RESET], indirect=True, ids=["carried", "reset"])
def test_a_round_starts_from_what_the_hosts_last_round_left(setup):
    """Its residual and, in a run with carry_inner_state (the default), its final checkpoint
    (the AdamW moments); nothing for a host that committed no round before."""
    chain, acct = setup
    carried = registry.get_run(chain.app.committed_view(), "r").config.carry_inner_state
    for n, host in ((1, H1), (2, H2)):
        res = bytes([n]) * 32
        assert chain.broadcast(acct.tx(host, [commit(host, 0, residual_hash=res)], n)).code == 0
    while chain.app.height < 28:
        chain.block()  # round 1's window opens at 29
    for n, host in ((1, H1), (3, H3)):
        assert chain.broadcast(acct.tx(host, [commit(host, 1)], n)).code == 0
    chain.block()
    view = chain.app.committed_view()
    zero = {c.host: c.residual_in_hash for c in rounds.commits(view, "r", 0)}
    one = {c.host: (c.residual_in_hash, c.residual_hash) for c in rounds.commits(view, "r", 1)}
    assert zero == {str(H1.address()): b"", str(H2.address()): b""}
    assert one == {str(H1.address()): (b"\x01" * 32, b"\x04" * 32),
                   str(H3.address()): (b"", b"\x04" * 32)}  # fmt: skip
    inner = {c.host: c.inner_in_hash for c in rounds.commits(view, "r", 1)}
    assert inner == {str(H1.address()): LEAVES[-1] if carried else b"", str(H3.address()): b""}


def test_commit_after_the_window_closes_is_refused(setup):
    chain, acct = setup
    for _ in range(3):
        chain.block()  # heights 2-4: round 0's window passes
    result = chain.broadcast(acct.tx(H1, [commit(H1, 0)], 1))
    assert result.code == codes.INVALID_REQUEST and "open round: none" in result.raw_log


def test_a_finished_run_leaves_the_blocks_work_but_stays_queryable(setup):
    chain, _ = setup
    view = chain.app.committed_view
    assert [r.run_id for r in registry.active_runs(view())] == ["r"]
    last = schedule.round_window(registry.get_run(view(), "r"), chain.app.params.poc, 1)
    while chain.app.height < last.resolution - 1:
        chain.block()
    assert [r.run_id for r in registry.active_runs(view())] == ["r"]
    chain.block()  # the last round resolves: the run is retired
    assert registry.active_runs(view()) == []
    assert [r.run_id for r in registry.runs(view())] == ["r"]


def test_each_round_s_roster_is_drawn_as_its_window_opens(setup):
    """Hosts registered by the block before a commit window opens are the round's roster; a
    later joiner is refused for that round and commits from the next one."""
    chain, acct = setup
    view = chain.app.committed_view
    assert registry.roster(view(), "r", 0).hosts == sorted(str(h.address()) for h in HOSTS)
    assert registry.roster(view(), "r", 1) is None  # not drawn yet
    late = str(OUTSIDER.address())
    msgs = [MsgDepositCollateral(depositor=late, amount="100"),
            MsgRegisterHost(host=late, run_id="r", endpoint="x:1")]  # fmt: skip
    assert chain.broadcast(acct.tx(OUTSIDER, msgs, 4)).code == 0
    chain.block()  # height 2: round 0's window is open, the outsider just registered
    refused = chain.broadcast(acct.tx(OUTSIDER, [commit(OUTSIDER, 0)], 4))
    assert refused.code == codes.INVALID_REQUEST and "not in round 0's roster" in refused.raw_log
    acct.seq[4] -= 1  # a refused tx uses no sequence
    second = schedule.round_window(registry.get_run(view(), "r"), chain.app.params.poc, 1)
    while chain.app.height < second.start - 2:
        chain.block()
    assert registry.roster(view(), "r", 1) is None
    chain.block()  # the block before round 1's window: its roster is drawn
    assert late in registry.roster(view(), "r", 1).hosts
    assert len(registry.roster(view(), "r", 1).hosts) == 4
    chain.block()
    assert chain.broadcast(acct.tx(OUTSIDER, [commit(OUTSIDER, 1)], 4)).code == 0


def test_a_run_keeps_only_its_newest_rosters(setup, monkeypatch):
    """Rosters are written every round for as long as a run lasts, ~45 bytes a member, with no
    gas paid after registration: drawing round r's deletes round r - KEPT_ROSTERS's."""
    chain, _ = setup
    monkeypatch.setattr(registry, "KEPT_ROSTERS", 1)
    view = chain.app.committed_view
    drawn = registry.roster(view(), "r", 0)
    assert drawn is not None
    while registry.roster(view(), "r", 1) is None:
        assert registry.roster(view(), "r", 0) == drawn
        chain.block()
    assert registry.roster(view(), "r", 0) is None
    assert registry.roster(view(), "r", 1).hosts == drawn.hosts


OVERLAPPED = make_run_config(FAKE_DATA, "tiny", min_collateral="100", round_blocks=25,
                             total_rounds=3, overlap=True)  # fmt: skip


def _overlapped_run(chain, acct):
    _create_and_join(chain, acct, "o", OVERLAPPED)
    chain.block()  # height 2: run "o" starts at 3
    return registry.get_run(chain.app.committed_view(), "o")


def test_overlapped_rounds_follow_each_other_while_earlier_ones_are_verified(setup):
    chain, acct = setup
    run = _overlapped_run(chain, acct)
    params = chain.app.params.poc
    assert run.start_height == 3
    # a commit window of 25 blocks; 24 of verification (beacon 4, reveal 5, verdict 10, open 5)
    first, second = (schedule.round_window(run, params, r) for r in (0, 1))
    assert first == schedule.Window(0, 3, 27, 31, 47, 51, 41)
    assert second == schedule.Window(1, 28, 52, 56, 72, 76, 66)
    assert schedule.window_at(run, params, 28) == second
    assert schedule.in_flight(run, params, 27) == [first]
    assert schedule.in_flight(run, params, 51) == [first, second]
    assert schedule.in_flight(run, params, 52) == [second]
    assert schedule.base_round(run.config, 0) == schedule.base_round(run.config, 1) == 0
    assert schedule.base_round(run.config, 2) == 1


def test_an_overlapped_round_s_roster_is_drawn_once_the_state_it_builds_on_is_decided(setup):
    """Rounds 0 and 1 are drawn before the run starts, round 2 at round 0's resolution (θ_1 is
    decided there): a host that finished round 1 early trains round 2 before its window opens.
    One that registers after the draw is refused for that round."""
    chain, acct = setup
    run = _overlapped_run(chain, acct)
    params, view = chain.app.params.poc, chain.app.committed_view
    members = sorted(str(h.address()) for h in HOSTS)
    assert registry.roster(view(), "o", 0).hosts == registry.roster(view(), "o", 1).hosts == members
    decided = schedule.round_window(run, params, 0).resolution
    third = schedule.round_window(run, params, 2)
    assert schedule.roster_height(run, params, 2) == decided == 51 < third.start - 1 == 52
    while chain.app.height < decided - 1:
        chain.block()
    assert registry.roster(view(), "o", 2) is None
    chain.block()
    assert registry.roster(view(), "o", 2).hosts == members
    late = str(OUTSIDER.address())
    msgs = [MsgDepositCollateral(depositor=late, amount="100"),
            MsgRegisterHost(host=late, run_id="o", endpoint="x:1")]  # fmt: skip
    assert chain.broadcast(acct.tx(OUTSIDER, msgs, 4)).code == 0
    while chain.app.height < third.start:
        chain.block()
    refused = chain.broadcast(acct.tx(OUTSIDER, [commit(OUTSIDER, 2, run_id="o")], 4))
    assert refused.code == codes.INVALID_REQUEST and "not in round 2's roster" in refused.raw_log


@settings(max_examples=80, deadline=None)
@given(overlap=st.booleans(), blocks=st.integers(1, 60), start=st.integers(1, 40),
       total=st.integers(1, 8))  # fmt: skip
def test_every_roster_is_drawn_once_after_its_base_is_decided(overlap, blocks, start, total):
    """Each round's roster is drawn at exactly one block, no later than the block before its
    window opens and no earlier than the resolution that decides the state it builds on."""
    params = PocParams()
    if overlap and schedule.overlap_problem(blocks, params) is not None:
        blocks += schedule.round_period(blocks, params)
    cfg = RunConfig(round_blocks=blocks, total_rounds=total, overlap=overlap)
    run = Run(config=cfg, start_height=start)
    last = schedule.round_window(run, params, total - 1).resolution
    drawn = {h: schedule.rosters_drawn_at(run, params, h) for h in range(last + 1)}
    for r in range(total):
        height = schedule.roster_height(run, params, r)
        assert [h for h, rounds in drawn.items() if r in rounds] == [height]
        assert height <= schedule.round_window(run, params, r).start - 1
        base = schedule.base_round(cfg, r)
        if base > 0:
            assert height >= schedule.round_window(run, params, base - 1).resolution
    assert sorted(r for rounds in drawn.values() for r in rounds) == list(range(total))


def test_an_overlapped_run_needs_windows_longer_than_verification(setup):
    chain, acct = setup
    cfg = make_run_config(FAKE_DATA, "tiny", round_blocks=24, total_rounds=3, overlap=True)
    create = MsgCreateRun(creator=str(CREATOR.address()), run_id="short", config=cfg)
    result = chain.broadcast(acct.tx(CREATOR, [create], 0))
    assert result.code == codes.INVALID_REQUEST
    assert "needs round_blocks above the 24 blocks" in result.raw_log


def test_overlapped_commits_start_from_the_hosts_last_pseudo_gradient(setup):
    """Round 1's commits carry the pseudo-gradient of their host's round 0 commit (their start
    is the base stepped by it); the global checkpoint of θ_0 is recorded from round 0's bases
    and kept, θ_1 from round 2's; both rounds are verified (beacon anchors, seeds) while the
    next trains; the run retires when its last round resolves."""
    chain, acct = setup
    run = _overlapped_run(chain, acct)
    params, view = chain.app.params.poc, chain.app.committed_view
    theta0, theta1, other = b"\x01" * 32, b"\x05" * 32, b"\x06" * 32

    def play(round_, hosts, base, **kw):
        window = schedule.round_window(run, params, round_)
        while chain.app.height < window.start - 1:
            chain.block()
        for n, host in hosts:
            msg = commit(host, round_, base, run_id="o", **kw)
            assert chain.broadcast(acct.tx(host, [msg], n)).code == 0, round_
        chain.block()

    play(0, [(1, H1), (2, H2)], theta0, pseudo_grad_hash=b"\x0a" * 32)
    play(1, [(1, H1), (3, H3)], theta0, pseudo_grad_hash=b"\x0b" * 32)
    one = {c.host: c.start_delta_hash for c in rounds.commits(view(), "o", 1)}
    assert one == {str(H1.address()): b"\x0a" * 32, str(H3.address()): b""}
    zero = rounds.commits(view(), "o", 0)
    assert all(c.start_delta_hash == b"" for c in zero)
    play(2, [(1, H1), (2, H2)], theta1)
    play(2, [(3, H3)], other)
    records = {g.round: g.hash for g in rounds.global_checkpoints(view(), "o")}
    assert records == {0: theta0}  # θ_1 is recorded when round 2's window closes
    last = schedule.round_window(run, params, 2)
    while chain.app.height < last.end:
        chain.block()
    records = {g.round: g.hash for g in rounds.global_checkpoints(view(), "o")}
    assert records == {0: theta0, 1: theta1}
    while chain.app.height < last.resolution - 1:
        chain.block()
    for r in range(3):
        assert beacon.get(view(), "o", r).anchor and beacon.get(view(), "o", r).seed, r
    assert "o" in [r.run_id for r in registry.active_runs(view())]
    chain.block()
    assert "o" not in [r.run_id for r in registry.active_runs(view())]


def test_leaving_an_overlapped_run_holds_until_the_newest_round_begun_resolves(setup):
    """A host that leaves in round 1's window, while round 0 is still being verified, is held
    until round 1 (the newest round begun, decided last) resolves, not round 0."""
    chain, acct = setup
    run = _overlapped_run(chain, acct)
    params, view, who = chain.app.params.poc, chain.app.committed_view, str(H2.address())
    second = schedule.round_window(run, params, 1)
    while chain.app.height < second.start:
        chain.block()
    assert chain.broadcast(acct.tx(H2, [MsgLeaveRun(host=who, run_id="o")], 2)).code == 0
    first = schedule.round_window(run, params, 0)
    while chain.app.height < second.resolution - 1:
        chain.block()
    assert chain.app.height > first.resolution
    assert collateral.locked(view(), who) == 200  # runs "r" and "o" hold 100 each
    chain.block()
    assert collateral.locked(view(), who) == 100  # only run "r" holds it now
