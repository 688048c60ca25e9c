"""The verifier's work gate: never more than its slots at once, waiting work goes in order of
deadline, then of arrival, and work whose window closed while it waited is not done."""

from __future__ import annotations

import threading
import time

import pytest

from dilochain.verifier.work_gate import WindowClosed, WorkGate

HEIGHT = lambda: 5  # noqa: E731  the chain's height: every deadline below is ahead


def _queued(gate: WorkGate, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(gate._waiting) < count:
        assert time.monotonic() < deadline, "the waiters never queued"
        time.sleep(0.001)


def _held(
    gate: WorkGate, then: list[str] | None = None
) -> tuple[threading.Thread, threading.Event]:
    """A thread holding ``gate``'s slot (deadline 100) until the event is set (then it says so
    in ``then``), once it holds it."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with gate.slot(100):
            held.set()
            release.wait(30)
        if then is not None:
            then.append("held one finished")

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(30)
    return thread, release


def test_waiting_work_goes_by_deadline_then_arrival():
    gate = WorkGate(1, HEIGHT)
    order: list[str] = []

    def waiter(deadline: int, name: str):
        with gate.slot(deadline):
            order.append(name)

    holder, release = _held(gate)
    threads = [holder]
    for count, (deadline, name) in enumerate(
        [(30, "late"), (10, "first"), (20, "second"), (10, "first, arrived later")], 1
    ):
        threads.append(threading.Thread(target=waiter, args=(deadline, name)))
        threads[-1].start()
        _queued(gate, count)  # each arrives after the one before
    release.set()
    for thread in threads:
        thread.join(30)
    assert order == ["first", "first, arrived later", "second", "late"]
    assert gate._running == 0 and not gate._waiting


def test_no_more_than_its_slots_at_once():
    gate, lock, both = WorkGate(2, HEIGHT), threading.Lock(), threading.Event()
    running, most = [0], [0]

    def work(deadline: int):
        with gate.slot(deadline):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
                if running[0] == 2:
                    both.set()
            assert both.wait(30)  # the first in holds its slot until a second is in
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=work, args=(10 + i % 3,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most[0] == 2 and running[0] == 0


def test_a_gate_needs_a_slot():
    with pytest.raises(ValueError, match="at least one slot"):
        WorkGate(0, HEIGHT)


def test_work_whose_window_closed_while_it_waited_is_not_done():
    height = [5]
    gate, done = WorkGate(1, lambda: height[0]), []
    with gate.slot(6):  # block 6, the next, is its last: in time
        done.append(6)
    height[0] = 6
    with pytest.raises(WindowClosed, match="block 6 has passed"), gate.slot(6):
        done.append("late")
    assert done == [6] and gate._running == 0  # the slot it took is free again
    with gate.slot(7):
        done.append(7)
    assert done == [6, 7]


def test_a_closed_gate_gives_no_slot_and_work_in_one_finishes():
    """A stopping verifier waited for every replay of its pass to get a slot and run (with the
    fetches and screens queued behind them, ~35 s on the devnet): closing the gate ends the
    waiting ones at once, lets the one in a slot finish, and gives later work no slot."""
    gate = WorkGate(1, HEIGHT)
    outcomes: list[str] = []

    def waiter():
        try:
            with gate.slot(10):
                outcomes.append("waiter ran")
        except WindowClosed as err:
            outcomes.append(str(err))

    holder, release = _held(gate, outcomes)
    threads = [holder]
    threads += [threading.Thread(target=waiter) for _ in range(2)]
    for thread in threads[1:]:
        thread.start()
    _queued(gate, 2)
    gate.close()
    for thread in threads[1:]:
        thread.join(30)
    assert outcomes == ["the verifier is stopping"] * 2 and gate._waiting == []
    release.set()
    threads[0].join(30)
    assert outcomes[-1] == "held one finished" and gate._running == 0
    with pytest.raises(WindowClosed, match="stopping"), gate.slot(100):
        pass
