"""The challenge beacon in process: verifiers commit and open secrets; no proposer, host or
verifier can move a round's selection once the commit window has closed without paying for it."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from dilochain.chain.app import Application
from dilochain.chain.errors import codes
from dilochain.chain.modules import beacon, challenges, collateral, registry, slashing
from dilochain.chain.store import ChainStore
from dilochain.chain.testing import InProcessChain
from dilochain.protocol import beacon as encoding
from dilochain.protocol import schedule
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitBeacon, MsgRevealBeacon
from tests.test_challenges import CHEAT, HONEST, LAZY, VERIFIERS, Chain, addr, start_round_0

HOSTS = [addr(h) for h in (HONEST, CHEAT, LAZY)]
SECRETS = {addr(v): hashlib.sha256(b"secret %d" % i).digest() for i, v in enumerate(VERIFIERS)}


def commit_beacon(net, v, round_=0, secret=None):
    secret = secret or SECRETS[addr(v)]
    sealed = encoding.commitment(secret, addr(v))
    return net.send(v, MsgCommitBeacon(verifier=addr(v), run_id="r", round=round_,
                                       commitment=sealed))  # fmt: skip


def reveal_beacon(net, v, round_=0, secret=None):
    secret = secret or SECRETS[addr(v)]
    return net.send(v, MsgRevealBeacon(verifier=addr(v), run_id="r", round=round_, secret=secret))


def window(net, round_=0):
    return schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, round_)


def fork(net: Chain, path) -> Chain:
    """A second node with the same committed state as ``net`` (and the same signers' sequences)."""
    app = net.c.app
    original = app.store.path
    app.store.close()
    shutil.copy(original, path)
    net.c = InProcessChain(Application(ChainStore(original), app.genesis))
    twin = object.__new__(Chain)
    twin.c = InProcessChain(Application(ChainStore(path), app.genesis))
    twin.seq = dict(net.seq)
    return twin


@pytest.fixture
def net(tmp_path):
    # Selection from the seed alone: nobody screens, and a fail-closed chain would challenge
    # every segment of an unscreened commit.
    chain = start_round_0(Chain(tmp_path, sampling_rate="0.5", verifiers_per_challenge=2,
                                fail_closed=False))  # fmt: skip
    yield chain
    chain.c.app.store.close()


def test_commit_reveal_and_seed(net):
    w = window(net)
    assert (w.start, w.end, w.selection) == (2, 3, 5)  # beacon window: blocks 4-5
    for v in VERIFIERS:
        assert commit_beacon(net, v).code == 0
    net.blocks_until(w.end)
    anchor = net.c.app.store.meta("last_block_hash")  # the commit window's last block
    assert reveal_beacon(net, VERIFIERS[0]).code == 0  # CheckTx judges it for block 4
    net.c.block()  # 4
    found = beacon.get(net.view, "r", 0)
    assert found.anchor == anchor and not found.seed
    for v in VERIFIERS[1:]:
        assert reveal_beacon(net, v).code == 0
    net.c.block()  # 5: selection
    found = beacon.get(net.view, "r", 0)
    assert found.seed == encoding.mix(anchor, SECRETS.items())
    assert all(e.secret == SECRETS[e.verifier] for e in found.entries)
    assert not slashing.slashes(net.view)


def test_bad_commits_and_reveals_are_refused(net):
    outsider = net.send(HONEST, MsgCommitBeacon(verifier=addr(HONEST), run_id="r", round=0,
                                                commitment=b"\x00" * 32))  # fmt: skip
    assert outsider.code == codes.UNAUTHORIZED and "not a registered verifier" in outsider.raw_log
    short = net.send(VERIFIERS[0], MsgCommitBeacon(verifier=addr(VERIFIERS[0]), run_id="r",
                                                   round=0, commitment=b"\x00" * 5))  # fmt: skip
    assert short.code == codes.INVALID_REQUEST and "32-byte" in short.raw_log
    assert reveal_beacon(net, VERIFIERS[0]).code == codes.INVALID_REQUEST  # window not open
    assert commit_beacon(net, VERIFIERS[0]).code == 0
    net.c.block()
    twice = commit_beacon(net, VERIFIERS[0])
    assert twice.code == codes.INVALID_REQUEST and "already committed" in twice.raw_log
    net.blocks_until(window(net).end)
    late = commit_beacon(net, VERIFIERS[1])
    assert late.code == codes.INVALID_REQUEST and "blocks 2-3" in late.raw_log
    wrong = reveal_beacon(net, VERIFIERS[0], secret=b"\x07" * 32)
    assert wrong.code == codes.UNAUTHORIZED and "does not open" in wrong.raw_log
    uncommitted = reveal_beacon(net, VERIFIERS[1])
    assert uncommitted.code == codes.NOT_FOUND
    # A copied commitment is bound to its owner's address: the copier cannot open it.
    assert reveal_beacon(net, VERIFIERS[0]).code == 0
    net.c.block()
    again = reveal_beacon(net, VERIFIERS[0])
    assert again.code == codes.INVALID_REQUEST and "already opened" in again.raw_log


def _selection(chain: Chain) -> list[tuple[str, int, tuple[str, ...]]]:
    return [(c.host, c.segment, tuple(c.verifiers))
            for c in challenges.challenges(chain.view, "r", 0)]  # fmt: skip


def test_selection_is_fixed_once_the_commit_window_closes(net, tmp_path):
    """Proposers grinding the hashes of the beacon blocks, and hosts sending what they like
    there, draw the same challenges as anyone else: only the secrets and the anchor count."""
    w = window(net)
    for v in VERIFIERS:
        assert commit_beacon(net, v).code == 0
    net.blocks_until(w.end)
    candidates = [fork(net, tmp_path / f"candidate{i}.db") for i in range(4)]
    outcomes = []
    for i, chain in enumerate([net, *candidates]):
        for v in VERIFIERS:
            assert reveal_beacon(chain, v).code == 0
        if i % 2:  # a host floods the beacon window with txs of its own
            chain.send(HONEST, MsgCommitBeacon(verifier=addr(HONEST), run_id="r", round=0,
                                               commitment=bytes([i]) * 32))  # fmt: skip
        while chain.c.app.height < w.selection:
            grind = hashlib.sha256(b"proposer %d %d" % (i, chain.c.app.height)).digest()
            chain.c.block(block_hash=grind if i else None)
        outcomes.append((beacon.seed(chain.view, "r", 0), _selection(chain)))
    for chain in candidates:
        chain.c.app.store.close()
    assert all(outcome == outcomes[0] for outcome in outcomes)
    seed, picked = outcomes[0]
    drawn = [(h, s) for h in sorted(HOSTS) for s in (0, 1)
             if challenges.is_challenged(seed, h, s, 0.5)]  # fmt: skip
    assert [(h, s) for h, s, _ in picked] == drawn  # at rate 0.5, from the seed alone
    assert all(len(verifiers) == 2 for _, _, verifiers in picked)


def test_withholding_a_secret_costs_collateral_and_is_the_only_lever(net, tmp_path):
    """The last verifier to open can choose between two seeds (open or withhold), and pays
    ``beacon_withhold_slash_fraction`` of its collateral for withholding."""
    w = window(net)
    for v in VERIFIERS:
        assert commit_beacon(net, v).code == 0
    net.blocks_until(w.end)
    withheld = fork(net, tmp_path / "withheld.db")
    for chain, openers in ((net, VERIFIERS), (withheld, VERIFIERS[:2])):
        for v in openers:
            assert reveal_beacon(chain, v).code == 0
        while chain.c.app.height < w.selection:
            chain.c.block()
    last = addr(VERIFIERS[2])
    bonded = int(collateral.info(net.view, last).bonded)
    (slash,) = slashing.slashes(withheld.view, last)
    assert slash.reason == "withheld its beacon secret"
    assert int(slash.amount) == bonded * 3 // 10  # beacon_withhold_slash_fraction 0.3
    assert int(collateral.info(withheld.view, last).bonded) == bonded - int(slash.amount)
    assert beacon.seed(net.view, "r", 0) != beacon.seed(withheld.view, "r", 0)
    assert not slashing.slashes(net.view, last)
    withheld.c.app.store.close()


def test_without_commitments_the_anchor_alone_seeds_the_round(net):
    w = window(net)
    net.blocks_until(w.selection)
    found = beacon.get(net.view, "r", 0)
    assert not found.entries and found.seed == encoding.mix(found.anchor, [])
    assert challenges.challenges(net.view, "r", 0)  # the round is still challenged
