"""The Simulate admission gate: bounded queue, one at a time, blocks go between simulations."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from dilochain.chain.simulate_gate import SimulateBusy, SimulateGate


def test_a_full_queue_refuses_at_once():
    async def main():
        gate = SimulateGate(max_waiting=2)
        return await asyncio.gather(
            *(gate.run(lambda i=i: i) for i in range(4)), return_exceptions=True
        )

    first, second, third, fourth = asyncio.run(main())
    assert (first, second) == (0, 1)
    assert isinstance(third, SimulateBusy) and isinstance(fourth, SimulateBusy)
    assert "2 simulations are waiting" in str(third)  # this machine's: the total alone


def test_one_address_takes_a_few_places_in_the_queue_and_others_still_get_in():
    async def main():
        gate = SimulateGate(max_waiting=4, per_caller=2)
        flood = [gate.run(lambda: "flood", caller="203.0.113.5") for _ in range(5)]
        honest = [gate.run(lambda: "honest", caller=who) for who in ("198.51.100.7", "")]
        return await asyncio.gather(*flood, *honest, return_exceptions=True)

    *flood, honest, local = asyncio.run(main())
    assert flood[:2] == ["flood", "flood"] and (honest, local) == ("honest", "honest")
    assert all(isinstance(f, SimulateBusy) for f in flood[2:])
    assert "as many as this node or your address may have" in str(flood[2])


def test_blocks_run_between_simulations_and_simulations_take_a_bounded_share():
    log: list[str] = []
    busy = []

    def simulate() -> None:
        log.append("sim")
        began = time.perf_counter()
        while time.perf_counter() < began + 0.004:  # a CPU-bound simulation
            pass
        busy.append(time.perf_counter() - began)

    async def blocks(done: asyncio.Event) -> None:
        while not done.is_set():
            log.append("block")
            await asyncio.sleep(0)

    async def main() -> None:
        gate = SimulateGate(max_waiting=100, share=0.25)
        done = asyncio.Event()
        producer = asyncio.create_task(blocks(done))
        await asyncio.gather(*(gate.run(simulate) for _ in range(20)))
        done.set()
        await producer

    began = time.perf_counter()
    asyncio.run(main())
    wall = time.perf_counter() - began
    # The gate held the rest of the time for everything else (the last one's pause is the
    # next simulation's to take).
    assert sum(busy) <= 0.25 * wall + max(busy)
    sims = [i for i, event in enumerate(log) if event == "sim"]
    assert len(sims) == 20
    assert all(b - a > 1 for a, b in itertools.pairwise(sims))  # a block between each


def test_share_must_be_a_fraction():
    with pytest.raises(ValueError, match="share"):
        SimulateGate(share=0)


def test_a_caller_that_must_not_wait_is_refused_while_the_gate_is_closed():
    """An abci_query holds CometBFT's query connection: it never waits for the gate."""

    def simulate() -> str:
        began = time.perf_counter()
        while time.perf_counter() < began + 0.02:
            pass
        return "done"

    async def main() -> list:
        gate = SimulateGate(share=0.5)
        first = await gate.run(simulate)  # returns at once: its pause is the next one's
        try:
            await gate.run(simulate, wait=False)
            refused = None
        except SimulateBusy as err:
            refused = err
        await asyncio.sleep(0.03)  # past the pause
        return [first, refused, await gate.run(simulate, wait=False)]

    first, refused, later = asyncio.run(main())
    assert first == later == "done" and isinstance(refused, SimulateBusy)
