"""Challenges in process: selection, reveals, sealed verdicts and their openings, quorum,
slashing and exclusion."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from dilochain.chain.errors import codes
from dilochain.chain.modules import (
    bank,
    beacon,
    challenges,
    collateral,
    registry,
    rewards,
    rounds,
    screening,
    slashing,
    verifiers,
)
from dilochain.protocol import schedule
from dilochain.protocol import verdict as sealing
from dilochain.protocol.merkle import merkle_proof, merkle_root
from dilochain.protocol.model_config import token_cost
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgClaimReward,
    MsgCommitRound,
    MsgCreateRun,
    MsgDepositCollateral,
    MsgOpenVerdict,
    MsgRegisterHost,
    MsgRegisterVerifier,
    MsgRevealCheckpoints,
    MsgSubmitVerdict,
    MsgWithdrawCollateral,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, SealedVote
from dilochain.testutil import FAKE_DATA, local_chain, signed_tx, wallet
from dilochain.training.run_config import make_run_config

# Rewards vest once their epoch closes here; tests/test_vesting.py vests them over epochs.
REWARDS = {"epoch_blocks": 12, "reward_per_epoch": 1_000_000, "verifier_share": "0.1",
           "vesting_epochs": 1}  # fmt: skip
CREATOR, HONEST, CHEAT, LAZY = wallet(40), wallet(41), wallet(42), wallet(43)
VERIFIERS = [wallet(50), wallet(51), wallet(52)]
ACCOUNTS = [CREATOR, HONEST, CHEAT, LAZY, *VERIFIERS]
CFG = make_run_config(FAKE_DATA, "tiny", min_collateral="1000", round_blocks=2, total_rounds=2)
TOKENS = CFG.inner_steps * CFG.batch_size * CFG.seq_len
WORK = TOKENS * token_cost(CFG.model_config, CFG.seq_len)  # a verified round's host work
LEAVES = [hashlib.sha256(bytes([i])).digest() for i in range(3)]  # H/k = 2 segments
POC = {"sampling_rate": "1", "beacon_reveal_blocks": 2, "reveal_window_blocks": 2,
       "verdict_window_blocks": 2, "verdict_open_blocks": 2,
       "verifiers_per_challenge": 3, "quorum": 2, "min_verifier_collateral": 1000,
       "max_round_blocks": 4, "unbonding_blocks": 12}  # fmt: skip


class Chain:
    def __init__(self, tmp_path, rewards=None, **poc):
        funded = {str(w.address()): 10**9 for w in ACCOUNTS}
        self.c = local_chain(tmp_path, funded, poc={**POC, **poc},
                             rewards={**REWARDS, **(rewards or {})})  # fmt: skip
        self.seq = dict.fromkeys(range(len(ACCOUNTS)), 0)
        self.sealed: list[MsgOpenVerdict] = []  # openings of the votes sealed so far

    def send(self, who, *msgs):
        n = ACCOUNTS.index(who)
        result = self.c.broadcast(
            signed_tx(who, list(msgs), sequence=self.seq[n], account_number=n)
        )
        if result.code == 0:
            self.seq[n] += 1
        return result

    def blocks_until(self, height):
        while self.c.app.height < height:
            self.c.block()

    @property
    def view(self):
        return self.c.app.committed_view()


def addr(w) -> str:
    return str(w.address())


def commit_round(net, host, round_, run_id="r"):
    return net.send(host, MsgCommitRound(
        host=addr(host), run_id=run_id, round=round_, ckpt_root=merkle_root(LEAVES),
        final_hash=LEAVES[-1], final_proof=merkle_proof(LEAVES, 2),
        pseudo_grad_hash=b"\x01" * 32, base_hash=b"\x02" * 32, residual_hash=b"\x03" * 32,
        tokens=TOKENS, loss=1.0,
        data_seed=schedule.derive_data_seed(CFG.seed, addr(host), round_),
    ))  # fmt: skip


def start_round_0(chain: Chain) -> Chain:
    """A run "r" with three hosts and three verifiers, whose round-0 commits are in the mempool."""
    chain.send(CREATOR, MsgCreateRun(creator=addr(CREATOR), run_id="r", config=CFG))
    for host in (HONEST, CHEAT, LAZY):
        chain.send(host, MsgDepositCollateral(depositor=addr(host), amount="10000"),
                   MsgRegisterHost(host=addr(host), run_id="r", endpoint="e:1"))  # fmt: skip
    for v in VERIFIERS:
        chain.send(v, MsgDepositCollateral(depositor=addr(v), amount="2000"),
                   MsgRegisterVerifier(verifier=addr(v)))  # fmt: skip
    chain.c.block()  # height 1; round 0 starts at 2
    for host in (HONEST, CHEAT, LAZY):
        assert commit_round(chain, host, 0).code == 0
    return chain


@pytest.fixture
def net(tmp_path):
    chain = start_round_0(Chain(tmp_path))
    yield chain
    chain.c.app.store.close()


def reveal(host, segment, end=None, proof_index=None):
    i = segment + 1 if proof_index is None else proof_index
    return MsgRevealCheckpoints(
        host=addr(host), run_id="r", round=0, segment=segment, start_hash=LEAVES[segment],
        end_hash=end or LEAVES[segment + 1], final_hash=LEAVES[-1],
        start_proof=merkle_proof(LEAVES, segment), end_proof=merkle_proof(LEAVES, i),
        final_proof=merkle_proof(LEAVES, 2),
    )  # fmt: skip


FP = hashlib.sha256(b"the middle state every honest replay reaches").digest()
SALT = b"\x07" * 32


def opening(v, host, segment, passed, fingerprint=FP, round_=0):
    return MsgOpenVerdict(verifier=addr(v), run_id="r", round=round_, host=addr(host),
                          segment=segment, passed=passed, fingerprint=fingerprint, salt=SALT,
                          evidence_hash=b"\x00" * 32)  # fmt: skip


def seal(v, host, segment, passed, fingerprint=FP, round_=0):
    sealed = sealing.commitment(addr(v), "r", round_, addr(host), segment, passed, fingerprint,
                                SALT)  # fmt: skip
    return MsgSubmitVerdict(verifier=addr(v), run_id="r", round=round_, host=addr(host),
                            segment=segment, commitment=sealed)  # fmt: skip


def vote(net, v, host, segment, passed, fingerprint=FP, round_=0):
    """Seal a vote (remembering its opening); the tx's result."""
    result = net.send(v, seal(v, host, segment, passed, fingerprint, round_))
    if result.code == 0:
        net.sealed.append(opening(v, host, segment, passed, fingerprint, round_))
    return result


def open_votes(net, window):
    """Open every vote sealed so far in the round's opening window."""
    net.blocks_until(window.opening - 1)
    for msg in net.sealed:
        who = next(v for v in VERIFIERS if addr(v) == msg.verifier)
        assert net.send(who, msg).code == 0
    net.sealed.clear()


def test_full_challenge_cycle(net):
    run = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    assert (run.start, run.end, run.selection, run.opening, run.resolution) == (2, 3, 5, 10, 11)
    net.blocks_until(run.selection)
    found = challenges.challenges(net.view, "r", 0)
    assert len(found) == 6  # 3 hosts x 2 segments at sampling rate 1
    assert all(sorted(c.verifiers) == sorted(addr(v) for v in VERIFIERS) for c in found)

    # Reveals: a wrong end hash is refused (does not match the root); LAZY never reveals.
    bad = net.send(CHEAT, reveal(CHEAT, 0, end=b"\x09" * 32))
    assert bad.code == codes.UNAUTHORIZED and "does not match" in bad.raw_log
    huge = net.send(CHEAT, reveal(CHEAT, 0, end=b"\x09" * 4_000))  # every vote re-reads it
    assert huge.code == codes.INVALID_REQUEST and "32 bytes" in huge.raw_log
    for host in (HONEST, CHEAT):
        for segment in (0, 1):
            assert net.send(host, reveal(host, segment)).code == 0
    assert net.send(HONEST, reveal(HONEST, 0)).code == codes.INVALID_REQUEST  # twice

    # Verdicts: honest passes 2-1 (verifier 2 always fails, without replaying: its fingerprint
    # is not the replays'), the cheat fails 3-0 on segment 1.
    v0, v1, v2 = VERIFIERS
    for segment in (0, 1):
        assert vote(net, v0, HONEST, segment, True).code == 0
        assert vote(net, v1, HONEST, segment, True).code == 0
        assert vote(net, v2, HONEST, segment, False, fingerprint=b"").code == 0
    for v in VERIFIERS:
        assert vote(net, v, CHEAT, 1, False).code == 0
    again = net.send(v0, seal(v0, CHEAT, 1, True))
    assert again.code == codes.INVALID_REQUEST and "already voted" in again.raw_log
    outsider = net.send(HONEST, MsgSubmitVerdict(verifier=addr(HONEST), run_id="r", round=0,
                                                 host=addr(CHEAT), segment=1))  # fmt: skip
    assert outsider.code == codes.UNAUTHORIZED
    unrevealed = net.send(v0, seal(v0, LAZY, 0, True))
    assert unrevealed.code == codes.INVALID_REQUEST
    early = net.send(v0, opening(v0, HONEST, 0, True))
    assert early.code == codes.INVALID_REQUEST and "opened in blocks 10-11" in early.raw_log

    supply = bank.supply(net.view, DENOM)
    net.blocks_until(run.opening - 1)
    padded = opening(v0, CHEAT, 1, False)
    padded.evidence_hash = b"\x00" * 4_000  # every later opening would pay to rewrite it
    refused = net.send(v0, padded)
    assert refused.code == codes.INVALID_REQUEST and "32 bytes" in refused.raw_log
    open_votes(net, run)
    late = net.send(v0, seal(v0, CHEAT, 0, True))
    assert late.code == codes.INVALID_REQUEST and "closed" in late.raw_log
    net.blocks_until(run.resolution)
    view = net.view
    status = {(c.host, c.segment): c.status for c in challenges.challenges(view, "r", 0)}
    assert status[(addr(HONEST), 0)] == challenges.PASSED
    assert status[(addr(CHEAT), 1)] == challenges.FAILED
    assert status[(addr(CHEAT), 0)] == challenges.UNDECIDED
    assert status[(addr(LAZY), 0)] == challenges.NOT_REVEALED
    excluded = {c.host: c.excluded for c in rounds.commits(view, "r", 0)}
    assert excluded == {addr(HONEST): False, addr(CHEAT): True, addr(LAZY): True}
    assert collateral.bonded(view, addr(HONEST)) == 10_000
    assert collateral.bonded(view, addr(CHEAT)) == 7_000  # 30% slashed, once per round
    assert collateral.bonded(view, addr(LAZY)) == 7_000
    # The always-fail verifier's votes on HONEST's segments were not corroborated (twice).
    assert collateral.bonded(view, addr(v2)) == 2000 - 100 - 95
    reasons = {s.reason.split(" on ")[0] for s in slashing.slashes(view, addr(v2))}
    assert reasons == {"its fingerprint disagrees with the replays"}
    slashed = slashing.slashes(view)
    assert sum(int(s.amount) for s in slashed) == 3000 + 3000 + 100 + 95
    assert bank.supply(view, DENOM) == supply - 6195  # slashes are burned

    # Rewards for epoch 0 (blocks 1-12): claimable once it has closed, once per address.
    params = net.c.app.params
    early = net.send(HONEST, MsgClaimReward(claimer=addr(HONEST), epoch=0))
    assert early.code == codes.INVALID_REQUEST and "still open" in early.raw_log
    net.blocks_until(rewards.epoch_bounds(params, 0)[1])
    before = bank.supply(net.view, DENOM)
    expected = {HONEST: 900_000, v0: 100_000 * 3 // 7, v1: 100_000 * 3 // 7, v2: 100_000 // 7}
    for who, amount in expected.items():
        assert rewards.claimable(net.view, params, addr(who), 0).amount == str(amount)
        assert net.send(who, MsgClaimReward(claimer=addr(who), epoch=0)).code == 0
    net.c.block()
    assert bank.supply(net.view, DENOM) == before + sum(expected.values())
    twice = net.send(HONEST, MsgClaimReward(claimer=addr(HONEST), epoch=0))
    assert twice.code == codes.INVALID_REQUEST and "already claimed" in twice.raw_log
    for cheater in (CHEAT, LAZY):  # slashed in the epoch: nothing to claim
        refused = net.send(cheater, MsgClaimReward(claimer=addr(cheater), epoch=0))
        assert refused.code == codes.NOT_FOUND and "no paid work" in refused.raw_log


def test_lazy_verifiers_are_slashed_even_when_they_agree_on_the_outcome(net):
    """An always-pass vote (fingerprinting the revealed end state), a copied commitment and a
    vote left sealed are all slashed and unpaid, while two honest replays decide."""
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.selection)
    for segment in (0, 1):
        assert net.send(HONEST, reveal(HONEST, segment)).code == 0
    v0, v1, v2 = VERIFIERS
    # Segment 0: v0 and v1 replay; v2 passes it with the published end state as its guess.
    assert vote(net, v0, HONEST, 0, True).code == 0
    assert vote(net, v1, HONEST, 0, True).code == 0
    assert vote(net, v2, HONEST, 0, True, fingerprint=LEAVES[1]).code == 0
    # Segment 1: v0 replays, v1 copies v0's commitment, v2 seals a vote and never opens it.
    assert vote(net, v0, HONEST, 1, True).code == 0
    net.c.block()
    (c,) = [c for c in challenges.challenges(net.view, "r", 0)
            if c.host == addr(HONEST) and c.segment == 1]  # fmt: skip
    copied = MsgSubmitVerdict(verifier=addr(v1), run_id="r", round=0, host=addr(HONEST),
                              segment=1, commitment=c.votes[0].commitment)  # fmt: skip
    assert net.send(v1, copied).code == 0
    assert net.send(v2, seal(v2, HONEST, 1, True)).code == 0
    open_votes(net, window)
    # The copy opens to nothing: the commitment binds v0's address.
    refused = net.send(v1, opening(v1, HONEST, 1, True))
    assert refused.code == codes.UNAUTHORIZED and "does not match" in refused.raw_log
    wrong = net.send(v2, opening(v2, HONEST, 1, True, fingerprint=b"\x01" * 31))
    assert wrong.code == codes.INVALID_REQUEST and "size" in wrong.raw_log
    net.blocks_until(window.resolution)
    view = net.view
    decided = {c.segment: c for c in challenges.challenges(view, "r", 0) if c.host == addr(HONEST)}
    assert decided[0].status == challenges.PASSED
    assert [v.counted for v in decided[0].votes] == [True, True, False]
    assert decided[1].status == challenges.UNDECIDED  # one opened vote: no quorum
    reasons = {(s.address, s.reason.split(" on ")[0]) for s in slashing.slashes(view)
               if s.address in {addr(v) for v in VERIFIERS}}  # fmt: skip
    assert reasons == {
        (addr(v2), "its fingerprint disagrees with the replays"),
        (addr(v2), "did not open its vote"),
        (addr(v1), "did not open its vote"),
    }
    params = net.c.app.params
    net.blocks_until(rewards.epoch_bounds(params, 0)[1])
    work = {v: rewards.claimable(net.view, params, addr(v), 0).verifier_work for v in VERIFIERS}
    assert work == {v0: "1", v1: "1", v2: "0"}  # segment 0's two counted votes


def test_colluders_holding_a_challenge_s_majority_cannot_slash_an_honest_host(net):
    """Segment 0: two verifiers replay the honest host's segment (their fingerprints are the
    replay's) and vote it failed, the third passes it: the split decides nothing, so the host
    is neither slashed nor jailed (its round is left out and unpaid), and no verifier is slashed
    or paid for it. Segment 1: one fail beside two passes passes the host; the lone failer is
    unpaid, not slashed (the chain cannot tell which side of a split lied)."""
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.selection)
    for segment in (0, 1):
        assert net.send(HONEST, reveal(HONEST, segment)).code == 0
    v0, v1, v2 = VERIFIERS
    for v, segment, passed in ((v0, 0, False), (v1, 0, False), (v2, 0, True),
                               (v0, 1, False), (v1, 1, True), (v2, 1, True)):  # fmt: skip
        assert vote(net, v, HONEST, segment, passed).code == 0
    open_votes(net, window)
    net.blocks_until(window.resolution)
    view = net.view
    decided = {c.segment: c for c in challenges.challenges(view, "r", 0) if c.host == addr(HONEST)}
    assert all(v.counted for c in decided.values() for v in c.votes)
    assert decided[0].status == challenges.UNDECIDED and decided[1].status == challenges.PASSED
    assert not slashing.slashes(view, addr(HONEST)) and registry.is_host(view, "r", addr(HONEST))
    commit = next(c for c in rounds.commits(view, "r", 0) if c.host == addr(HONEST))
    assert commit.outcome == challenges.COMMIT_UNDECIDED
    assert not any(slashing.slashes(view, addr(v)) for v in VERIFIERS)
    params = net.c.app.params
    assert rewards.claimable(view, params, addr(HONEST), 0).host_work == "0"
    net.blocks_until(rewards.epoch_bounds(params, 0)[1])
    work = {v: rewards.claimable(net.view, params, addr(v), 0).verifier_work for v in VERIFIERS}
    assert work == {v0: "0", v1: "1", v2: "1"}  # segment 1's passes only


def test_a_cheat_a_quorum_failed_beside_a_colluding_pass_stays_out_of_a_fail_open_model(
    tmp_path,
):
    """On a chain without fail-closed aggregation (every commit not excluded enters the
    model), two honest replays fail the cheat and one colluder that replayed passes it: the
    split is undecided (unpaid, nobody slashed), and the commit is excluded all the same."""
    from dilochain.node.aggregation import aggregated

    net = start_round_0(Chain(tmp_path, fail_closed=False))
    try:
        window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
        net.blocks_until(window.selection)
        for segment in (0, 1):
            assert net.send(CHEAT, reveal(CHEAT, segment)).code == 0
            for v, passed in zip(VERIFIERS, (False, False, True), strict=True):
                assert vote(net, v, CHEAT, segment, passed).code == 0
        open_votes(net, window)
        net.blocks_until(window.resolution)
        view = net.view
        commit = next(c for c in rounds.commits(view, "r", 0) if c.host == addr(CHEAT))
        assert commit.outcome == challenges.COMMIT_UNDECIDED and commit.excluded
        assert not aggregated(commit, fail_closed=False)
        assert not slashing.slashes(view, addr(CHEAT))
    finally:
        net.c.app.store.close()


def test_a_lone_replay_is_not_slashed_for_want_of_a_peer(net):
    """With no two fingerprints agreeing, nobody is judged by them: the challenge is undecided
    and no verifier is slashed (or paid) for it."""
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.selection)
    assert net.send(HONEST, reveal(HONEST, 0)).code == 0
    v0, v1, _ = VERIFIERS
    assert vote(net, v0, HONEST, 0, True).code == 0
    assert vote(net, v1, HONEST, 0, True, fingerprint=b"\x05" * 32).code == 0
    open_votes(net, window)
    net.blocks_until(window.resolution)
    (c,) = [c for c in challenges.challenges(net.view, "r", 0)
            if c.host == addr(HONEST) and c.segment == 0]  # fmt: skip
    assert c.status == challenges.UNDECIDED and not any(v.counted for v in c.votes)
    assert not slashing.slashes(net.view, addr(v0)) and not slashing.slashes(net.view, addr(v1))


def test_selection_is_recomputable(net):
    seed = b"\x11" * 32
    picks = [challenges.is_challenged(seed, "h", s, 0.5) for s in range(200)]
    assert picks == [challenges.is_challenged(seed, "h", s, 0.5) for s in range(200)]
    assert 60 < sum(picks) < 140
    assert not any(challenges.is_challenged(seed, "h", s, 0) for s in range(50))
    assert all(challenges.is_challenged(seed, "h", s, 1) for s in range(50))


def test_verifier_needs_collateral(tmp_path):
    chain = Chain(tmp_path)
    result = chain.send(VERIFIERS[0], MsgRegisterVerifier(verifier=addr(VERIFIERS[0])))
    assert result.code == codes.INSUFFICIENT_FUNDS and "needs 1000" in result.raw_log


def test_a_verifier_names_its_blob_service_and_moves_it(tmp_path):
    """A verifier registers the blob service hosts fetch what it screened from and moves it by
    registering again; a malformed endpoint, or the same one again, is refused."""
    chain, v = Chain(tmp_path), VERIFIERS[0]
    bond = MsgDepositCollateral(depositor=addr(v), amount="2000")
    for bad_endpoint in ("127.0.0.1", "https://bucket.example/v0", "0.0.0.0:7001"):
        bad = chain.send(v, bond, MsgRegisterVerifier(verifier=addr(v), endpoint=bad_endpoint))
        assert bad.code == codes.INVALID_REQUEST and "endpoint: " in bad.raw_log, bad_endpoint
    assert chain.send(v, bond, MsgRegisterVerifier(verifier=addr(v), endpoint="v0.example:7001")
                      ).code == 0  # fmt: skip
    chain.c.block()
    assert [r.endpoint for r in verifiers.verifiers(chain.view)] == ["v0.example:7001"]
    again = chain.send(v, MsgRegisterVerifier(verifier=addr(v), endpoint="v0.example:7001"))
    assert again.code == codes.INVALID_REQUEST and "already a verifier" in again.raw_log
    moved = chain.send(v, MsgRegisterVerifier(verifier=addr(v), endpoint="203.0.113.9:7001"))
    assert moved.code == 0, moved.raw_log
    chain.c.block()
    (record,) = verifiers.verifiers(chain.view)
    assert (record.endpoint, record.registered_height) == ("203.0.113.9:7001", 1)
    assert collateral.info(chain.view, addr(v)).locked == "1000"  # bonded once, not twice
    chain.c.app.store.close()


def test_a_verifier_slashed_below_the_minimum_is_removed_until_it_registers_again(tmp_path):
    net = start_round_0(Chain(tmp_path, verifier_slash_fraction="0.9"))
    v0, v1, v2 = VERIFIERS
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.selection)
    for host in (HONEST, CHEAT, LAZY):
        for segment in (0, 1):
            assert net.send(host, reveal(host, segment)).code == 0
            for v in VERIFIERS:
                assert vote(net, v, host, segment, True).code == 0
    net.sealed = [m for m in net.sealed if m.verifier != addr(v2)]  # v2 opens none of its votes
    open_votes(net, window)
    net.blocks_until(window.resolution)
    view = net.view
    assert {s.reason.split(" on ")[0] for s in slashing.slashes(view, addr(v2))} == {
        "did not open its vote"}  # fmt: skip
    held = collateral.info(view, addr(v2))
    assert int(held.bonded) < 1000 and held.locked == "0"  # 90% a vote; its reservation released
    assert {v.address for v in verifiers.verifiers(view)} == {addr(v0), addr(v1)}
    # No more duties: round 1's challenges go to the two left.
    for host in (HONEST, CHEAT, LAZY):
        assert commit_round(net, host, 1).code == 0
    one = schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, 1)
    net.blocks_until(one.selection)
    assert all(set(c.verifiers) == {addr(v0), addr(v1)}
               for c in challenges.challenges(net.view, "r", 1))  # fmt: skip
    refused = net.send(v2, seal(v2, HONEST, 0, True, round_=1))
    assert refused.code != 0
    # Bonding the minimum again and registering brings it back.
    again = net.send(v2, MsgDepositCollateral(depositor=addr(v2), amount="1000"),
                     MsgRegisterVerifier(verifier=addr(v2)))  # fmt: skip
    assert again.code == 0, again.raw_log
    net.c.block()
    assert addr(v2) in {v.address for v in verifiers.verifiers(net.view)}


def play_round(net, round_, hosts, failing=()):
    """Reveal every segment of ``hosts`` and vote: pass, except ``failing`` hosts' segments."""
    window = schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, round_)
    net.blocks_until(window.selection)
    for host in hosts:
        for segment in (0, 1):
            msg = reveal(host, segment)
            msg.round = round_
            assert net.send(host, msg).code == 0
    for host in hosts:
        for segment in (0, 1):
            for v in VERIFIERS:
                assert vote(net, v, host, segment, host not in failing, round_=round_).code == 0
    open_votes(net, window)
    net.blocks_until(window.resolution)
    return window


def test_failed_host_forfeits_unclaimed_rewards_and_is_jailed(net, monkeypatch):
    params = net.c.app.params
    play_round(net, 0, (HONEST, CHEAT, LAZY))  # everyone honest in round 0 (epoch 0)
    for host in (HONEST, CHEAT, LAZY):
        assert commit_round(net, host, 1).code == 0
    window = play_round(net, 1, (HONEST, CHEAT, LAZY), failing=(CHEAT,))
    assert rewards.epoch_of(params, window.resolution) == 1  # caught in epoch 1
    view = net.view
    # Epoch 1's totals leave the slashed host's work out, and a claim reads them, not every
    # address's work (50,000 paid addresses made a claim cost more gas than a tx may).
    assert rewards.epoch_info(view, params, 1, window.resolution).host_work == str(2 * WORK)
    with monkeypatch.context() as scans:
        scans.setattr(type(view), "iterate", lambda *a, **k: pytest.fail("a claim scanned"))
        assert rewards.claimable(view, params, addr(HONEST), 1).host_work == str(WORK)
        assert rewards.claimable(view, params, addr(CHEAT), 1).host_work == "0"
    # Jailed: no longer a host of the run; epoch 0's unclaimed rewards are forfeited.
    assert not registry.is_host(view, "r", addr(CHEAT))
    assert registry.is_host(view, "r", addr(HONEST))
    due = rewards.claimable(view, params, addr(CHEAT), 0)
    assert due.forfeited and due.amount == "0" and due.host_work == str(WORK)
    net.blocks_until(rewards.epoch_bounds(params, 1)[1])
    refused = net.send(CHEAT, MsgClaimReward(claimer=addr(CHEAT), epoch=0))
    assert refused.code == codes.INVALID_REQUEST and "forfeited" in refused.raw_log
    # Nobody else's share grew: the forfeited part is simply never minted.
    before = bank.supply(net.view, DENOM)
    host_pool = REWARDS["reward_per_epoch"] * 9 // 10
    for host in (HONEST, LAZY):
        assert net.send(host, MsgClaimReward(claimer=addr(host), epoch=0)).code == 0
    net.c.block()
    assert bank.supply(net.view, DENOM) == before + 2 * (host_pool // 3)
    # It may register again, bonding the run's minimum anew, and then earn again.
    assert collateral.bonded(net.view, addr(CHEAT)) == 7_000
    again = net.send(CHEAT, MsgRegisterHost(host=addr(CHEAT), run_id="r", endpoint="e:1"))
    assert again.code == 0
    net.c.block()
    assert registry.is_host(net.view, "r", addr(CHEAT))


def test_withdrawing_after_committing_does_not_escape_the_slash(net):
    withdraw = MsgWithdrawCollateral(depositor=addr(CHEAT), amount="9000")
    assert net.send(CHEAT, withdraw).code == 0  # 1,000 stays locked by the run
    net.c.block()
    assert collateral.info(net.view, addr(CHEAT)).unbonding[0].amount == "9000"
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    supply = bank.supply(net.view, DENOM)
    net.blocks_until(window.resolution)  # CHEAT never reveals
    view = net.view
    (slash,) = slashing.slashes(view, addr(CHEAT))
    assert slash.amount == "3000"  # 30% of the 10,000 bonded when it committed
    held = collateral.info(view, addr(CHEAT))
    assert held.bonded == "700" and held.unbonding[0].amount == "6300"
    assert bank.supply(view, DENOM) == supply - 3 * 3000  # no host revealed: all three burned


def test_a_host_slashed_below_what_its_runs_reserve_commits_again_only_after_topping_up(
    tmp_path,
):
    """A slash in one run leaves less bonded than the host's other runs reserve: its commits
    there are refused until it deposits the difference (else each garbage commit would cost
    less and less collateral)."""
    net = Chain(tmp_path)
    later = make_run_config(FAKE_DATA, "tiny", min_collateral="1000", round_blocks=2,
                            total_rounds=2, start_delay_blocks=12)  # fmt: skip
    net.send(CREATOR, MsgCreateRun(creator=addr(CREATOR), run_id="r", config=CFG))
    for run_id in ("r2", "r3", "r4"):
        net.send(CREATOR, MsgCreateRun(creator=addr(CREATOR), run_id=run_id, config=later))
    net.send(CHEAT, MsgDepositCollateral(depositor=addr(CHEAT), amount="4000"),
             *(MsgRegisterHost(host=addr(CHEAT), run_id=r, endpoint="e:1")
               for r in ("r", "r2", "r3", "r4")))  # fmt: skip
    for v in VERIFIERS:
        net.send(v, MsgDepositCollateral(depositor=addr(v), amount="2000"),
                 MsgRegisterVerifier(verifier=addr(v)))  # fmt: skip
    net.c.block()
    assert commit_round(net, CHEAT, 0).code == 0
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.resolution)  # CHEAT never reveals round 0 of r: slashed, jailed
    held = collateral.info(net.view, addr(CHEAT))
    assert (held.bonded, held.locked) == ("2800", "3000")  # r's 1,000 released, 3,000 held
    r2 = schedule.round_window(registry.get_run(net.view, "r2"), net.c.app.params.poc, 0)
    net.blocks_until(r2.start)
    short = commit_round(net, CHEAT, 0, "r2")
    assert short.code == codes.INSUFFICIENT_FUNDS and "200udlc less" in short.raw_log
    topped = net.send(CHEAT, MsgDepositCollateral(depositor=addr(CHEAT), amount="200"))
    assert topped.code == 0
    assert commit_round(net, CHEAT, 0, "r2").code == 0
    net.c.app.store.close()


def test_undecided_work_is_left_out_of_the_model_and_not_paid(net):
    window = schedule.window_at(registry.get_run(net.view, "r"), net.c.app.params.poc, 2)
    net.blocks_until(window.selection)
    for host in (HONEST, CHEAT, LAZY):
        for segment in (0, 1):
            assert net.send(host, reveal(host, segment)).code == 0
    for host in (HONEST, LAZY):  # nobody votes on CHEAT's segments
        for segment in (0, 1):
            for v in VERIFIERS:
                assert vote(net, v, host, segment, True).code == 0
    open_votes(net, window)
    net.blocks_until(window.resolution)
    view = net.view
    statuses = {c.status for c in challenges.challenges(view, "r", 0) if c.host == addr(CHEAT)}
    assert statuses == {challenges.UNDECIDED}
    commit = next(c for c in rounds.commits(view, "r", 0) if c.host == addr(CHEAT))
    assert commit.outcome == challenges.COMMIT_UNDECIDED and not commit.excluded
    assert not slashing.slashes(view, addr(CHEAT))
    params = net.c.app.params
    assert rewards.claimable(view, params, addr(CHEAT), 0).host_work == "0"
    assert rewards.claimable(view, params, addr(HONEST), 0).host_work == str(WORK)


def _votes(*prints, opened=True):
    return Challenge(votes=[SealedVote(verifier=f"v{i}", opened=opened, fingerprint=p)
                            for i, p in enumerate(prints)])  # fmt: skip


def test_the_leading_fingerprint_decides_which_votes_count():
    a, b = b"\x01" * 32, b"\x02" * 32
    majority = _votes(a, b, a, b, a)
    challenges.count_votes(majority, 2, "exact")
    assert [v.counted for v in majority.votes] == [True, False, True, False, True]
    tie = _votes(a, b, a, b)  # two lazy verifiers sharing a guess tie with two replays
    challenges.count_votes(tie, 2, "exact")
    assert not any(v.counted for v in tie.votes)
    alone = _votes(a, b"")
    challenges.count_votes(alone, 2, "exact")
    assert not any(v.counted for v in alone.votes)
    sealed = _votes(a, a, opened=False)  # unopened votes never count
    challenges.count_votes(sealed, 2, "exact")
    assert not any(v.counted for v in sealed.votes)


def test_a_split_replay_passes_by_majority_and_fails_only_unanimously():
    """Counted votes share one replay: should they split on pass and fail (backups joining at
    the handover make five), a larger passing side passes the host, and nothing else decides:
    a host is failed (and slashed) only when no counted vote stood for it, so colluders
    holding a challenge's majority cannot slash an honest host."""
    a = b"\x01" * 32

    def decided(*verdicts):
        c = Challenge(revealed=True, votes=[SealedVote(verifier=f"v{i}", opened=True,
                                                       counted=True, passed=p, fingerprint=a)
                                            for i, p in enumerate(verdicts)])  # fmt: skip
        return challenges._decide(c, 2)

    assert decided(False, False, True, True, True) == challenges.PASSED
    assert decided(False, False, False, True, True) == challenges.UNDECIDED
    assert decided(False, False, True) == challenges.UNDECIDED
    assert decided(False, False, True, True) == challenges.UNDECIDED
    assert decided(False, False, False) == challenges.FAILED
    assert decided(False, False) == challenges.FAILED and decided(True, True) == challenges.PASSED


def test_tolerance_counts_every_replay_within_a_quantum_of_the_leader():
    low, mid, high = (sealing.encode_projections([n] * sealing.PROJECTIONS) for n in (0, 1, 2))
    far = sealing.encode_projections([9] * sealing.PROJECTIONS)
    c = _votes(low, mid, high, far)  # low and high differ by two quanta, both near mid
    challenges.count_votes(c, 2, "tolerance")
    assert [v.counted for v in c.votes] == [True, True, True, False]


def test_verifiers_alive_at_the_beacon_are_assigned_first_and_backups_replace_silent_ones(
    tmp_path,
):
    """Two of three verifiers are assigned each challenge, those that opened the round's beacon
    first. One of them goes silent: at the handover block the third joins each challenge it
    had not voted on, the challenges are still decided, and the silent one loses its verifier
    reward for the epoch."""
    from tests.test_beacon import commit_beacon, reveal_beacon

    net = start_round_0(Chain(tmp_path, verifiers_per_challenge=2))
    w = schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, 0)
    v0, v1, v2 = VERIFIERS
    for v in (v0, v1):  # v2 was not up during the round's beacon
        assert commit_beacon(net, v).code == 0
    net.blocks_until(w.end)
    for v in (v0, v1):
        assert reveal_beacon(net, v).code == 0
    net.blocks_until(w.selection)
    found = challenges.challenges(net.view, "r", 0)
    assert all(sorted(c.verifiers) == sorted([addr(v0), addr(v1)]) for c in found)
    assert all(c.primaries == 2 for c in found)
    for segment in (0, 1):
        assert net.send(HONEST, reveal(HONEST, segment)).code == 0
        assert vote(net, v0, HONEST, segment, True).code == 0  # v1 has gone silent
    net.blocks_until(w.handover)
    mine = [c for c in challenges.challenges(net.view, "r", 0) if c.host == addr(HONEST)]
    assert all(list(c.verifiers) == [*c.verifiers[:2], addr(v2)] for c in mine)
    unrevealed = [c for c in challenges.challenges(net.view, "r", 0) if not c.revealed]
    assert all(len(c.verifiers) == 2 for c in unrevealed)  # nothing to judge: no backups
    for segment in (0, 1):
        assert vote(net, v2, HONEST, segment, True).code == 0
    open_votes(net, w)
    net.blocks_until(w.resolution)
    view = net.view
    assert {c.status for c in challenges.challenges(view, "r", 0) if c.host == addr(HONEST)} == {
        challenges.PASSED
    }
    outcome = {c.host: c.outcome for c in rounds.commits(view, "r", 0)}
    assert outcome[addr(HONEST)] == challenges.COMMIT_PAID  # passed, but never screened
    params = net.c.app.params
    net.blocks_until(rewards.epoch_bounds(params, 0)[1])
    due = {v: rewards.claimable(net.view, params, addr(v), 0) for v in VERIFIERS}
    assert (due[v0].verifier_work, due[v2].verifier_work, due[v1].amount) == ("2", "2", "0")


def test_a_challenge_s_verifiers_cost_a_few_hashes_not_a_sort_of_the_verifier_set(monkeypatch):
    """Assigning k verifiers reads k places of one order a round (a hash a group to place the
    challenge), never scores the whole set per challenge; the k are distinct, never the host
    nor one skipped, the preferred group first, and spread evenly over the set."""
    pool = [f"v{i:04d}" for i in range(2000)]
    alive = set(pool[:50])
    calls = []
    real = challenges.score
    monkeypatch.setattr(challenges, "score", lambda *a: calls.append(a) or real(*a))
    draw = challenges._Draw(b"\x05" * 32, pool, alive)
    assert len(calls) == 2000  # the round's order: each verifier scored once
    picks = [draw.pick(f"h{n}", n % 7, 3) for n in range(1000)]
    assert len(calls) == 2000 + 1000  # one offset a challenge: its first group had room
    assert all(len(set(p)) == 3 and set(p) <= alive for p in picks)
    assert draw.pick("v0001", 0, 60, skip={"v0002"})[:48] == [
        v for v in draw.pick("v0001", 0, 60, skip={"v0002"}) if v in alive
    ]  # alive first
    assert not {"v0001", "v0002"} & set(draw.pick("v0001", 0, 60, skip={"v0002"}))
    counts = Counter(v for p in picks for v in p)
    assert len(counts) == 50 and max(counts.values()) < 2 * min(counts.values())
    assert challenges._Draw(b"", [], alive).pick("h", 0, 3) == []


def test_a_long_decided_round_s_records_are_forgotten_its_global_state_is_not(net, monkeypatch):
    """Commits, screens, challenges and the beacon of the round decided KEPT_ROUNDS before
    are deleted (hosts x records a round, kept by no one's fee); global states stay."""
    monkeypatch.setattr(challenges, "KEPT_ROUNDS", 1)  # 64 in a real chain
    play_round(net, 0, (HONEST, CHEAT, LAZY))
    view = net.view
    assert rounds.commits(view, "r", 0) and challenges.challenges(view, "r", 0)
    assert beacon.get(view, "r", 0).seed
    for host in (HONEST, CHEAT, LAZY):
        assert commit_round(net, host, 1).code == 0
    recorded = {g.round for g in rounds.global_checkpoints(net.view, "r")}
    window = play_round(net, 1, (HONEST, CHEAT, LAZY))
    view = net.view
    assert rounds.commits(view, "r", 0) == [] and challenges.challenges(view, "r", 0) == []
    assert not beacon.get(view, "r", 0).seed and screening.screens(view, "r", 0) == []
    assert len(rounds.commits(view, "r", 1)) == 3  # the round just decided stays
    assert recorded and recorded <= {g.round for g in rounds.global_checkpoints(view, "r")}
    assert window.round == 1
