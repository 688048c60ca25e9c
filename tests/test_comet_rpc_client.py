"""The chain's JSON-RPC client to CometBFT: a kept-alive connection CometBFT dropped (it closes
idle ones, e.g. after a pause) is retried once on a new connection; a node that keeps dropping
them is an error."""

from __future__ import annotations

import asyncio
import json

import pytest

from dilochain.chain.comet_rpc import CometRpc, CometRpcError


async def _serve(drops: int) -> tuple[asyncio.AbstractServer, list[int]]:
    """A JSON-RPC server on loopback that closes its first ``drops`` connections unanswered."""
    seen = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen[0] += 1
        if seen[0] <= drops:
            writer.close()
            return
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))  # fmt: skip
        await reader.readexactly(length)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


@pytest.mark.parametrize(("drops", "answered"), [(0, True), (1, True), (2, False)])
def test_a_dropped_connection_is_retried_once(drops, answered):
    async def scenario():
        server, seen = await _serve(drops)
        port = server.sockets[0].getsockname()[1]
        rpc = CometRpc(f"127.0.0.1:{port}")
        try:
            if answered:
                assert await rpc.call("status") == {"ok": True}
            else:
                with pytest.raises(CometRpcError, match="unreachable"):
                    await rpc.call("status")
            assert seen[0] == min(drops + 1, 2)
        finally:
            await rpc.close()
            server.close()

    asyncio.run(scenario())
