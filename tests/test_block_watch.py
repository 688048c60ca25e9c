"""The committed-height feed (chain side) and the client's watch over it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import grpc
import pytest

from dilochain.block_watch import LIVE_WAIT_SECONDS, BlockWatch
from dilochain.chain.block_feed import BlockFeed, EventsService, FeedFull
from dilochain.chain.grpc_errors import Readiness
from dilochain.protocol.pb.poc.v1 import events_pb2 as ev
from dilochain.protocol.pb.poc.v1 import events_pb2_grpc as ev_grpc


def test_the_feed_wakes_followers_with_the_newest_height_and_ends_when_closed():
    async def scenario() -> list:
        feed = BlockFeed(5, limit=2)
        waiting = asyncio.ensure_future(feed.after(5))
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing past 5 yet
        feed.committed(6)
        feed.committed(7)  # before the follower ran: it gets the newest, not a backlog
        seen = [await waiting, await feed.after(3)]  # behind: answered at once
        later = asyncio.ensure_future(feed.after(7))
        await asyncio.sleep(0)
        feed.close()
        seen.append(await later)
        feed.join()
        feed.join()
        with pytest.raises(FeedFull):
            feed.join()
        feed.leave()
        feed.join()  # a slot given back is taken again
        return seen

    assert asyncio.run(scenario()) == [7, 7, None]


def test_the_stream_refuses_past_its_limit_and_sends_nothing_while_catching_up():
    async def scenario() -> tuple:
        feed, readiness = BlockFeed(3, limit=1), Readiness()
        server = grpc.aio.server()
        ev_grpc.add_EventsServicer_to_server(EventsService(feed, readiness), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = ev_grpc.EventsStub(channel)
                first = stub.Blocks(ev.BlocksRequest())
                heights = [(await first.read()).height]  # the height at once
                with pytest.raises(grpc.aio.AioRpcError) as full:
                    await stub.Blocks(ev.BlocksRequest()).read()
                readiness.ready, readiness.why = False, "catching up"
                feed.committed(4)  # replayed while catching up: not sent
                readiness.ready = True
                feed.committed(5)
                heights.append((await first.read()).height)
                first.cancel()
                for _ in range(400):  # until the server has seen the cancel and freed the slot
                    if not feed.followers:
                        break
                    await asyncio.sleep(0.05)
                readiness.ready = False
                with pytest.raises(grpc.aio.AioRpcError) as unready:
                    await stub.Blocks(ev.BlocksRequest()).read()
                return heights, full.value.code(), unready.value.code(), feed.followers
        finally:
            await server.stop(None)

    heights, full, unready, followers = asyncio.run(scenario())
    assert heights == [3, 5]
    assert full == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert unready == grpc.StatusCode.UNAVAILABLE and followers == 0


def test_a_chain_s_blocks_wake_a_watch_and_closing_it_ends_its_thread(running_chain):
    from dilochain.poc_client import PocClient

    poc = PocClient(running_chain.address)
    stop = threading.Event()
    try:
        seen = []
        for _ in range(4):
            before = poc.blocks.height
            poc.blocks.wait_past(before, stop, poll=0.05)
            seen.append(poc.blocks.height)
        assert poc.blocks.live
        assert seen == sorted(seen) and seen[-1] > seen[0]
        # It follows the node's own height: what a query says a moment later is no older.
        assert running_chain.client.query_height() >= seen[-1]
        watch = poc.blocks
    finally:
        poc.close()
    assert not watch._thread.is_alive()
    assert not watch.live


def test_with_no_stream_a_wait_lasts_the_poll_interval():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    watch = BlockWatch(channel)
    try:
        started = time.monotonic()
        watch.wait_past(0, threading.Event(), poll=0.2)
        waited = time.monotonic() - started
        assert not watch.live and watch.height == 0
        assert 0.15 <= waited < LIVE_WAIT_SECONDS
        stop = threading.Event()
        stop.set()
        started = time.monotonic()
        watch.wait_past(0, stop, poll=60)  # a stopped loop never waits
        assert time.monotonic() - started < 0.1
    finally:
        watch.close()
        channel.close()
