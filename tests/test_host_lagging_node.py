"""A host whose queries reach a chain node behind the one its txs reach (a failover), or that
restarted while a commit was in a mempool: what its round starts from of its round before,
the check before its commit that the chain chains the same, and reveals that a node without
the round's challenges yet does not mark done. Each once got an honest host slashed."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from dilochain.node.host import Chained, HostNode, Sent
from dilochain.protocol.params import PocParams
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


@pytest.mark.parametrize("on_chain", [MINE, None])
def test_a_round_the_chain_chains_otherwise_is_not_committed(on_chain):
    """Trained from nothing after a restart while round 1's commit was in a mempool, and that
    commit then landed: round 2's commit is dropped, not sent to be slashed (and the other
    way round)."""
    host = _host(on_chain)
    host._publish = lambda named, what: True
    host._wait_for_height = lambda height, stop: None
    host.commit = lambda *args: pytest.fail("committed a round the chain chains otherwise")
    result = SimpleNamespace(checkpoints=[SimpleNamespace(hashes=lambda moments: [b"w", b"i"])])
    window = Window(2, start=30, end=39, selection=43, opening=60, resolution=62, handover=50)
    trained_from = None if on_chain is not None else MINE
    running = SimpleNamespace(is_set=lambda: False)
    assert not host._commit_when_open(None, 2, result, (b"p", b"r"), 1.0, window, running,
                                      trained_from)  # fmt: skip


def test_no_challenge_on_a_node_that_has_not_drawn_them_is_not_nothing_to_reveal():
    run = Run(run_id="r", start_height=10, config=RunConfig(round_blocks=20, total_rounds=4))
    params = PocParams()
    selection = round_window(run, params, 1).selection
    host = HostNode.__new__(HostNode)  # only what a reveal with no challenge of its own uses
    host.run_, host.chain_params, host.address = run, params, "dilo1me"
    host.cfg = SimpleNamespace(run_id="r")
    host.checkpoint_hashes = {1: [b"\x01" * 32] * 5}
    host.poc = SimpleNamespace(challenges=lambda run_id, round_: [])
    height = [selection - 1]  # the node answering now is a block behind the draw
    host._round_info = lambda: SimpleNamespace(height=height[0])
    assert not host.reveal(1, selection + 5)  # asked again at the next block
    height[0] = selection
    assert host.reveal(1, selection + 5)  # drawn there, and none is this host's
