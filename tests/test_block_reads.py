"""Block reads for anonymous callers are bounded and cached: a block is up to tens of MB of
CometBFT's JSON, and 60 concurrent reads of a 5 MB block stalled commits for seconds and took
250 MB (found by a review)."""

from __future__ import annotations

import asyncio

import pytest
from cosmpy.protos.tendermint.types.block_pb2 import Block
from cosmpy.protos.tendermint.types.types_pb2 import BlockID

from dilochain.chain import block_reads
from dilochain.chain.block_reads import BoundedReads, Busy


async def _settle() -> None:
    """Let every task that is ready run until it waits (a caller's task starts its read's)."""
    for _ in range(10):
        await asyncio.sleep(0)


def _held(release: asyncio.Event, fetched: list[int]):
    """A fetch that records each height asked for and answers once ``release`` is set."""

    async def fetch(height: int):
        fetched.append(height)
        await release.wait()
        return BlockID(hash=bytes([height])), Block()

    return fetch


def test_reads_past_the_limit_are_refused_and_a_block_read_is_kept():
    async def scenario() -> None:
        release, fetched = asyncio.Event(), []
        reads = BoundedReads(_held(release, fetched))
        limit = block_reads.RUNNING + block_reads.WAITING
        asked = [asyncio.create_task(reads.get(h)) for h in range(limit)]
        await _settle()  # every one has started: RUNNING fetch, the rest wait
        assert len(fetched) == block_reads.RUNNING
        with pytest.raises(Busy, match="ask again"):
            await reads.get(limit)
        release.set()
        done = await asyncio.gather(*asked)
        assert [block_id.hash for block_id, _ in done] == [bytes([h]) for h in range(limit)]
        assert sorted(fetched) == list(range(limit))
        # The last CACHED read are kept: asked again, they are not fetched again.
        kept = range(limit - block_reads.CACHED, limit)
        for h in kept:
            assert (await reads.get(h))[0].hash == bytes([h])
        assert len(fetched) == limit
        await reads.get(0)  # long evicted: read again
        assert len(fetched) == limit + 1

    asyncio.run(scenario())


def test_a_block_asked_for_while_it_is_being_read_is_read_once():
    async def scenario() -> None:
        release, fetched = asyncio.Event(), []
        reads = BoundedReads(_held(release, fetched))
        asked = [asyncio.create_task(reads.get(7)) for _ in range(block_reads.RUNNING + 3)]
        await _settle()
        release.set()
        assert {block_id.hash for block_id, _ in await asyncio.gather(*asked)} == {b"\x07"}
        assert fetched == [7]

    asyncio.run(scenario())


def test_a_read_whose_caller_hangs_up_keeps_its_slot_to_its_end():
    """Calling and hanging up must not start reads past the limit (the parse goes on after
    the caller left: a review found the limit bounded waiting callers, not the work)."""

    async def scenario() -> None:
        release, fetched = asyncio.Event(), []
        reads = BoundedReads(_held(release, fetched))
        callers = [asyncio.create_task(reads.get(h)) for h in range(block_reads.RUNNING)]
        await _settle()
        for caller in callers:
            caller.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        later = asyncio.create_task(reads.get(99))
        await _settle()
        assert fetched == list(range(block_reads.RUNNING))  # 99 waits for a slot
        release.set()
        assert (await later)[0].hash == bytes([99])
        await reads.get(0)  # the read its caller left finished and was kept
        assert sorted(fetched) == [*range(block_reads.RUNNING), 99]

    asyncio.run(scenario())


def test_a_block_s_answer_is_encoded_once_on_a_thread_and_then_sent_as_it_is():
    """A cached 21 MiB block's answer was built and encoded again for every caller, on the
    loop that runs consensus (92 ms a call): the cache holds the encoded answer, which
    ``GetLatestBlock`` shares (its fields are ``GetBlockByHeight``'s)."""
    from types import SimpleNamespace

    from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q

    from dilochain.chain.grpc_services import Services

    block = Block()
    block.data.txs.extend([b"t" * 1000] * 5)
    fetched: list[int] = []

    class Rpc:
        async def block(self, height: int):
            fetched.append(height)
            return BlockID(hash=bytes([height])), block

    services = Services(SimpleNamespace(height=7), Rpc())

    async def scenario() -> list[bytes]:
        return [await services.blocks.get(7) for _ in range(3)]

    answers = asyncio.run(scenario())
    assert fetched == [7] and answers[0] is answers[1] is answers[2]
    assert tm_q.GetLatestBlockResponse.FromString(answers[0]).block == block
    assert (
        answers[0]
        == tm_q.GetBlockByHeightResponse(
            block_id=BlockID(hash=b"\x07"), block=block
        ).SerializeToString()
    )
