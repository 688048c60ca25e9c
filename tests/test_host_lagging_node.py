"""A host whose queries reach a chain node behind the one its txs reach (a failover), or that
restarted while a commit was in a mempool: what its round starts from of its round before,
the check before its commit that the chain chains the same, and reveals that a node without
the round's challenges yet does not mark done. Each once got an honest host slashed."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import astuple
from types import SimpleNamespace

import pytest

from dilochain.node.host import Chained, HostNode, Sent
from dilochain.node.resume import PendingCommit
from dilochain.node.reveals import Revealer
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitRound
from dilochain.protocol.pb.poc.v1.types_pb2 import Run, RunConfig
from dilochain.protocol.schedule import Window, round_window

MINE = Chained(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32)


def _host(on_chain: Chained | None) -> HostNode:
    host = HostNode.__new__(HostNode)  # only what the round's start and its commit use
    host._previous_commit = lambda round_: on_chain
    return host


def _sent(round_: int, outcome: bool | None) -> Sent:
    future: Future[bool] = Future()
    if outcome is not None:
        future.set_result(outcome)
    return Sent(round_, 40, future, MINE)


def test_a_round_starts_from_the_commit_before_as_this_host_knows_it():
    lagging = _host(None)  # a chain node that has not seen round 1's commit yet
    assert lagging._built_on(2, _sent(1, None)) == (MINE, True)  # in flight
    assert lagging._built_on(2, _sent(1, True)) == (MINE, False)  # included: not what it says
    assert _host(MINE)._built_on(2, _sent(1, False)) == (MINE, False)  # "failed", yet landed
    assert lagging._built_on(2, _sent(0, True)) == (None, False)  # not the round before
    assert _host(MINE)._built_on(2, None) == (MINE, False)  # after a restart: the chain's


RUNNING = SimpleNamespace(is_set=lambda: False, wait=lambda seconds: False)


def _committing(host: HostNode, tmp_path) -> list:
    """``host`` made able to send commits (``commit`` records them) from ``tmp_path``."""
    sent: list = []
    host.cfg = SimpleNamespace(state_dir=tmp_path, run_id="r")
    host.address = "dilo1me"
    host._publish = lambda named, what: True
    host._wait_for_height = lambda height, stop: None
    host.commit = lambda msg, window_end: sent.append(msg) or True
    host.local = SimpleNamespace(sync=lambda digests: None, has=lambda digest: True, root=tmp_path)
    return sent


def _pending(round_: int, previous: Chained | None) -> PendingCommit:
    msg = MsgCommitRound(host="dilo1me", run_id="r", round=round_, pseudo_grad_hash=b"\x07" * 32,
                         residual_hash=b"\x08" * 32, final_hash=b"\x09" * 32)  # fmt: skip
    return PendingCommit(msg, [b"\x07" * 32], [b"\x0a" * 32],
                         list(astuple(previous)) if previous else [])  # fmt: skip


@pytest.mark.parametrize("on_chain", [MINE, None])
def test_a_round_the_chain_chains_otherwise_is_not_committed(on_chain, tmp_path):
    """Trained from nothing after a restart while round 1's commit was in a mempool, and that
    commit then landed: round 2's commit is dropped, not sent to be slashed (and the other
    way round)."""
    host = _host(on_chain)
    sent = _committing(host, tmp_path)
    window = Window(2, start=30, end=39, selection=43, opening=60, resolution=62, handover=50)
    trained_from = None if on_chain is not None else MINE
    assert not host._send_pending(_pending(2, trained_from), window, RUNNING) and sent == []


def test_a_commit_a_restart_interrupted_is_sent_after_it(tmp_path):
    """Killed while its commit waited for the window (an overlapped host trains a round
    ahead, so most of a window), the host sends that very commit after the restart, and its
    next round chains on it; a commit the chain has, or whose window closed, is forgotten."""
    run = Run(run_id="r", start_height=10, config=RunConfig(round_blocks=20, total_rounds=6))
    params = PocParams()
    window = round_window(run, params, 3)
    host = _host(MINE)
    sent = _committing(host, tmp_path)
    host.run_, host.chain_params = run, params
    host.poc = SimpleNamespace(commits=lambda run_id, round_: [])
    host._round_info = lambda: SimpleNamespace(height=window.start - 5)
    stopped = SimpleNamespace(is_set=lambda: True, wait=lambda seconds: True)  # the kill
    final = SimpleNamespace(hashes=lambda moments=True: [b"w", b"m", b"i"] if moments else [b"w"])
    result = SimpleNamespace(checkpoints=[final])
    host.commit_msg = lambda view, round_, result, hashes: _pending(3, MINE).msg
    assert not host._commit_when_open(None, 3, result, (b"p", b"r"), 1.0, window, stopped, MINE)
    assert PendingCommit.load(tmp_path / "pending_commit.json").msg == _pending(3, MINE).msg
    host._committer = ThreadPoolExecutor(max_workers=1)  # after the restart
    resumed = host._resume_commit(3, RUNNING)
    assert resumed.outcome.result(timeout=10) and sent == [_pending(3, MINE).msg]
    assert resumed.chained == Chained(b"\x07" * 32, b"\x08" * 32, b"\x09" * 32)
    assert host._built_on(4, resumed) == (resumed.chained, False)
    assert not (tmp_path / "pending_commit.json").exists()
    # On chain already; not the round the record says it trained; or, started with another
    # --artifacts folder, what it names is not here (committed, its host would be slashed).
    here = host.local.has
    for round_, commits, has in ((3, [SimpleNamespace(host="dilo1me")], here), (2, [], here),
                                 (3, [], lambda digest: digest != b"\x0a" * 32)):  # fmt: skip
        _pending(3, MINE).save(tmp_path / "pending_commit.json")
        host.poc = SimpleNamespace(commits=lambda run_id, r, found=commits: found)
        host.local.has = has
        assert host._resume_commit(round_, RUNNING) is None
        assert not (tmp_path / "pending_commit.json").exists()


def test_no_challenge_on_a_node_that_has_not_drawn_them_is_not_nothing_to_reveal():
    run = Run(run_id="r", start_height=10, config=RunConfig(round_blocks=20, total_rounds=4))
    params = PocParams()
    selection = round_window(run, params, 1).selection
    poc = SimpleNamespace(challenges=lambda run_id, round_: [])
    host = Revealer(poc, run, params, "dilo1me", None, 1.0, threading.Event())
    height = [selection - 1]  # the node answering now is a block behind the draw
    host.take_over(lambda: {1: [b"\x01" * 32] * 5}, lambda end: end,
                   lambda: SimpleNamespace(height=height[0]))  # fmt: skip
    assert not host.reveal(1, selection + 5)  # asked again at the next block
    height[0] = selection
    assert host.reveal(1, selection + 5)  # drawn there, and none is this host's


def test_a_commit_refused_as_a_second_counts_once_the_chain_shows_the_first(tmp_path):
    """Resent after a restart, a commit the chain already holds is refused; the node asking
    may be a block behind the one that has it: asked again, it counts as made."""
    host = _host(None)
    _committing(host, tmp_path)
    msg = _pending(3, None).msg
    mine = SimpleNamespace(host="dilo1me", pseudo_grad_hash=msg.pseudo_grad_hash)
    answers = iter([[], [mine]])
    host.poc = SimpleNamespace(commits=lambda run_id, round_: next(answers))
    heights = iter(range(100, 200))
    host._round_info = lambda: SimpleNamespace(height=next(heights))
    host._blocks = lambda stop: iter(range(10))
    assert host._on_chain(msg, RUNNING)
    host.poc = SimpleNamespace(commits=lambda run_id, round_: [])
    assert not host._on_chain(msg, RUNNING)  # a few blocks, then it is not there
