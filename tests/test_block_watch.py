"""The committed-height feed (chain side) and the client's watch over it."""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from rich.console import Console

from dilochain import block_watch
from dilochain.block_watch import LIVE_WAIT_SECONDS, BlockWatch
from dilochain.chain.block_feed import BlockFeed, EventsService, FeedFull
from dilochain.chain.grpc_errors import Readiness
from dilochain.endpoints import FailoverChannel
from dilochain.protocol.endpoint import caller_address
from dilochain.protocol.pb.poc.v1 import events_pb2 as ev
from dilochain.protocol.pb.poc.v1 import events_pb2_grpc as ev_grpc
from dilochain.rpc_channel import RpcChannel

pytestmark = pytest.mark.wall_clock  # asserts how long things take: see conftest


def test_the_feed_wakes_followers_with_the_newest_height_and_ends_when_closed():
    async def scenario() -> list:
        feed = BlockFeed(5)
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
        return seen

    assert asyncio.run(scenario()) == [7, 7, None]


def test_follower_slots_are_bounded_per_node_and_per_address():
    feed = BlockFeed(0, limit=4, per_peer=2)
    feed.join("203.0.113.5")
    feed.join("203.0.113.5")
    with pytest.raises(FeedFull, match="already has 2"):
        feed.join("203.0.113.5")
    feed.join("")  # this machine's own processes: only the node-wide limit
    feed.join("198.51.100.7")
    with pytest.raises(FeedFull, match="already serves 4"):
        feed.join("")
    feed.leave("203.0.113.5")
    feed.join("203.0.113.5")  # a slot given back is taken again
    assert feed.followers == 4 and feed.by_peer == {"203.0.113.5": 2, "": 1, "198.51.100.7": 1}
    # A peer's slots are counted by its IPv4 address or its IPv6 /64: one machine can take any
    # address of its /64, and 4,096 streams from one /64 locked every follower out (a review).
    assert [caller_address(p) for p in ("ipv4:127.0.0.1:5", "ipv6:[::1]:5", "unix:/tmp/s",
                                        "ipv4:203.0.113.5:443", "ipv6:[2001:db8::1]:9",
                                        "ipv6:[2001:db8::ffff:1]:7", "ipv6:[2001:db8:0:1::1]:7",
                                        "ipv6:%5B::1%5D:54006", "ipv6:%5B2001:db8::2%5D:9",
                                        "ipv6:[::ffff:203.0.113.9]:5", "ipv6:[::ffff:127.0.0.1]:5")
            ] == ["", "", "", "203.0.113.5", "2001:db8::/64", "2001:db8::/64",
                  "2001:db8:0:1::/64", "", "2001:db8::/64",
                  "203.0.113.9", ""]  # fmt: skip
    # An IPv4 caller of a dual-stack listener ([::]) is named by its IPv4 address, not the
    # /64 that every IPv4 address maps into (::ffff:0:0/96 lies in ::/64).
    # As a real gRPC server names an IPv6 caller (percent-encoded: a review found every IPv6
    # connection counted as a caller of its own).
    assert [caller_address(p) for p in _ipv6_peers(2)] == ["", ""]


def _ipv6_peers(count: int) -> list[str]:
    """The peer strings a gRPC server on [::] gives ``count`` connections from ::1."""
    peers: list[str] = []
    server = grpc.server(ThreadPoolExecutor(1))
    answer = grpc.unary_unary_rpc_method_handler(lambda _, ctx: peers.append(ctx.peer()) or b"")
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t", {"P": answer})])
    port = server.add_insecure_port("[::1]:0")
    server.start()
    try:
        for _ in range(count):
            with grpc.insecure_channel(f"[::1]:{port}") as channel:
                channel.unary_unary("/t/P")(b"", timeout=10)
    finally:
        server.stop(0)
    return peers


def test_the_stream_refuses_past_its_limit_and_ends_while_catching_up():
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
                feed.committed(4)
                heights.append((await first.read()).height)
                readiness.ready, readiness.why = False, "catching up"
                feed.committed(5)  # replayed while catching up: the stream ends instead
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    await first.read()
                with pytest.raises(grpc.aio.AioRpcError) as unready:
                    await stub.Blocks(ev.BlocksRequest()).read()
                for _ in range(400):  # until the server has freed the ended stream's slot
                    if not feed.followers:
                        break
                    await asyncio.sleep(0.05)
                codes = (full.value.code(), ended.value.code(), unready.value.code())
                return heights, codes, feed.followers
        finally:
            await server.stop(None)

    heights, codes, followers = asyncio.run(scenario())
    assert heights == [3, 4] and followers == 0
    assert codes == (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
                     grpc.StatusCode.UNAVAILABLE)  # fmt: skip


class FeedServer:
    """An Events server with a feed the test commits to, on an event loop of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.feed = BlockFeed(1)
        self.joined = 0
        started = threading.Event()
        threading.Thread(target=self._serve, args=(started,), daemon=True).start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        join = self.feed.join

        def counted(peer: str) -> None:
            self.joined += 1
            join(peer)

        self.feed.join = counted

        async def latest(request: bytes, context) -> bytes:  # the tendermint service's
            found = tm_q.GetLatestBlockResponse()
            found.block.header.height = self.feed.height
            return found.SerializeToString()

        self.server = grpc.aio.server()
        ev_grpc.add_EventsServicer_to_server(EventsService(self.feed, Readiness()), self.server)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "cosmos.base.tendermint.v1beta1.Service",
            {"GetLatestBlock": grpc.unary_unary_rpc_method_handler(latest)},
        ),))  # fmt: skip
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.loop.run_until_complete(self.server.start())
        started.set()
        self.loop.run_forever()

    def commit(self, height: int) -> None:
        self.loop.call_soon_threadsafe(self.feed.committed, height)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def test_a_stream_frozen_behind_the_chain_moves_to_a_node_ahead(monkeypatch):
    """The node a client follows is cut off from its peers: its stream goes silent at height 7
    while another of the client's nodes is at 12. Once stale, the stream is opened again at
    that node (and the client's calls go there): a host stuck on it would miss its reveals."""
    monkeypatch.setattr(block_watch, "REOPEN_STALE_SECONDS", 0.6)
    frozen, live = FeedServer(), FeedServer()
    channel = FailoverChannel([f"127.0.0.1:{frozen.port}", f"127.0.0.1:{live.port}"])
    watch = BlockWatch(channel)
    stop = threading.Event()
    try:
        for height in range(2, 8):  # both at the same pace until 7; then only the live one
            watch.wait_past(height - 2, stop, poll=0.05)
            time.sleep(0.1)
            frozen.commit(height)
            live.commit(height)
        watch.wait_past(6, stop, poll=0.05)
        live.commit(12)
        for _ in range(600):
            watch.wait_past(watch.height, stop, poll=0.1)
            if watch.height >= 12:
                break
        assert watch.height == 12 and channel.current == f"127.0.0.1:{live.port}"
        assert (frozen.joined, live.joined) == (1, 1)  # followed there after the move
    finally:
        watch.close()
        channel.close()
        frozen.stop()
        live.stop()


def test_a_stream_gone_quiet_is_stale_polled_and_opened_again(monkeypatch):
    monkeypatch.setattr(block_watch, "REOPEN_STALE_SECONDS", 0.6)
    server = FeedServer()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    watch = BlockWatch(channel)
    stop = threading.Event()
    try:
        for height in range(2, 8):  # blocks every 0.1 s: the watch learns their pace
            watch.wait_past(height - 2, stop, poll=0.05)
            time.sleep(0.1)
            server.commit(height)
        watch.wait_past(6, stop, poll=0.05)
        assert watch.height == 7 and watch.fresh()
        for _ in range(100):  # no block for more than two intervals: stale
            if not watch.fresh():
                break
            time.sleep(0.05)
        assert not watch.fresh() and watch.live
        started = time.monotonic()
        watch.wait_past(7, stop, poll=0.1)  # the poll interval, not LIVE_WAIT_SECONDS
        assert time.monotonic() - started < 1.0
        for _ in range(400):  # the silent stream is cancelled and opened again
            if server.joined >= 2 and watch.live:
                break
            # A follower's next pass: it is what reopens a stream silent for long enough
            # (five block intervals: on a loaded machine the first pass can come sooner).
            watch.wait_past(7, stop, poll=0.05)
        assert server.joined >= 2 and watch.live and watch.height == 7
    finally:
        watch.close()
        channel.close()
        server.stop()


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


def test_a_loop_passes_once_at_once_then_once_a_block():
    server = FeedServer()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    watch = BlockWatch(channel)
    stop = threading.Event()
    try:
        for _ in range(200):  # until the stream is open
            if watch.live:
                break
            time.sleep(0.05)
        seen = []
        for _ in watch.passes(stop, poll=5):
            seen.append(watch.height)
            if len(seen) == 4:
                stop.set()  # the loop ends at its next pass
            else:
                server.commit(watch.height + 1)  # the next pass comes with this block
        assert seen == [1, 2, 3, 4]
    finally:
        watch.close()
        channel.close()
        server.stop()


def test_a_channel_without_streams_polls():
    watch = BlockWatch(RpcChannel("tcp://127.0.0.1:9"))  # CometBFT's RPC: unary calls only
    watch._thread.join(5)
    assert not watch._thread.is_alive() and not watch.live
    started = time.monotonic()
    watch.wait_past(0, threading.Event(), poll=0.1)
    assert time.monotonic() - started < LIVE_WAIT_SECONDS
    watch.close()


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


def test_the_following_bench_runs_on_a_chain_at_tiny_size(running_chain, capsys):
    """``bench.block_following``'s smoke test, on this module's chain (no chain of its own)."""
    from bench.block_following import compare

    args = argparse.Namespace(clients=2, seconds=0.6, poll=0.2, block_time="200ms")
    rows = compare(running_chain.address, running_chain.process.proc.pid,
                   running_chain.wallets[3], args, Console(width=200))  # fmt: skip
    assert [r["way"] for r in rows] == ["poll", "follow"]
    assert all(r["qps"] > 0 and r["interval"] > 0 for r in rows)
    assert "following:" in capsys.readouterr().out
