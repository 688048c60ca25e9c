"""An asyncio client of CometBFT's JSON-RPC: what the gRPC services forward to CometBFT."""

from __future__ import annotations

import asyncio
import base64
import json
from concurrent.futures import ThreadPoolExecutor

import aiohttp
from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import Tx
from cosmpy.protos.tendermint.abci.types_pb2 import Event, EventAttribute
from cosmpy.protos.tendermint.types.block_pb2 import Block
from cosmpy.protos.tendermint.types.types_pb2 import BlockID, Data, Header, PartSetHeader
from cosmpy.protos.tendermint.version.types_pb2 import Consensus

from dilochain.chain.context import block_timestamp
from dilochain.chain.errors import CODESPACE, codes


class CometRpcError(Exception):
    """CometBFT answered with an error, or could not be reached."""


class CometUnreachable(CometRpcError):
    """CometBFT's RPC does not answer (down, restarting, overloaded): worth asking again."""


def _block_id(data: dict) -> BlockID:
    parts = data.get("parts") or {}
    return BlockID(
        hash=bytes.fromhex(data.get("hash") or ""),
        part_set_header=PartSetHeader(
            total=int(parts.get("total") or 0), hash=bytes.fromhex(parts.get("hash") or "")
        ),
    )


def header_from_json(data: dict) -> Header:
    """A block header from CometBFT's JSON (hex hashes, RFC 3339 time)."""
    header = Header(
        version=Consensus(
            block=int(data["version"].get("block") or 0), app=int(data["version"].get("app") or 0)
        ),
        chain_id=data["chain_id"],
        height=int(data["height"]),
        last_block_id=_block_id(data["last_block_id"]),
        proposer_address=bytes.fromhex(data["proposer_address"]),
    )
    for name in ("last_commit_hash", "data_hash", "validators_hash", "next_validators_hash",
                 "consensus_hash", "app_hash", "last_results_hash", "evidence_hash"):  # fmt: skip
        setattr(header, name, bytes.fromhex(data[name]))
    header.time.FromJsonString(data["time"])
    return header


def tx_response_from_json(found: dict, time_ns: int) -> tuple[TxResponse, Tx]:
    """A ``TxResponse`` (tx packed in) and the tx, from CometBFT's ``tx`` result and its
    block's time."""
    result = found["tx_result"]
    response = TxResponse(
        height=int(found["height"]),
        txhash=found["hash"].upper(),
        codespace=result.get("codespace", ""),
        code=int(result.get("code") or 0),
        data=base64.b64decode(result.get("data") or "").hex().upper(),
        raw_log=result.get("log", ""),
        gas_wanted=int(result.get("gas_wanted") or 0),
        gas_used=int(result.get("gas_used") or 0),
        timestamp=block_timestamp(time_ns),
        events=[
            Event(type=event["type"], attributes=[
                EventAttribute(key=a["key"], value=a.get("value", ""), index=bool(a.get("index")))
                for a in event.get("attributes") or []
            ])
            for event in result.get("events") or []
        ],
    )  # fmt: skip
    tx = Tx.FromString(base64.b64decode(found["tx"]))
    response.tx.Pack(tx, type_url_prefix="/")
    return response, tx


def block_from_json(result: dict) -> tuple[BlockID, Block]:
    """The block and its id from CometBFT's ``block`` result."""
    data = result["block"]
    block = Block(
        header=header_from_json(data["header"]),
        data=Data(txs=[base64.b64decode(tx) for tx in data["data"]["txs"] or []]),
    )
    return _block_id(result["block_id"]), block


def _result(raw: bytes) -> dict:
    """A JSON-RPC reply's ``result``; :class:`CometRpcError` for an error, and
    :class:`CometUnreachable` for what is no JSON-RPC reply."""
    try:
        reply = json.loads(raw)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise CometUnreachable(f"not a JSON-RPC reply: {raw[:80]!r}")
    if "error" in reply:
        error = reply["error"]
        raise CometRpcError(str(error.get("data") or error.get("message")))
    return reply["result"]


# Blocks and txs are parsed on threads of their own: as many as reads of a kind run at once,
# whatever the machine's cores (the loop's default executor is shared and sized by them).
PARSER = ThreadPoolExecutor(2, thread_name_prefix="block-parse")


def _mempool_code(error: str) -> int:
    """The SDK code for a refusal by CometBFT's mempool (named in its error text)."""
    if "already exists in cache" in error:
        return codes.TX_IN_MEMPOOL
    if "mempool is full" in error:
        return codes.MEMPOOL_FULL
    if "too large" in error:
        return codes.TX_TOO_LARGE
    return codes.INTERNAL


def broadcast_response(digest: str, checked: dict | None, error: str = "") -> TxResponse:
    """``BroadcastTx``'s answer for the tx with hash ``digest``: from CometBFT's
    ``broadcast_tx_sync`` result (CheckTx's), or from the error it gave instead."""
    if checked is None:
        code = _mempool_code(error)
        return TxResponse(txhash=digest, code=code, codespace=CODESPACE, raw_log=error)
    return TxResponse(txhash=digest, code=int(checked["code"]),
                      codespace=checked.get("codespace", ""),
                      raw_log=checked.get("log", ""))  # fmt: skip


class CometRpc:
    """JSON-RPC over HTTP to one CometBFT node (one keep-alive session)."""

    def __init__(self, address: str):
        self.url = f"http://{address}"
        self._session: aiohttp.ClientSession | None = None

    async def call(self, method: str, **params: object) -> dict:
        """The ``result`` of one JSON-RPC call; raises :class:`CometRpcError` on an error. A
        call whose kept-alive connection CometBFT has dropped (it closes idle ones) is made
        once more on a new connection."""
        return _result(await self._call_bytes(method, params))

    async def _call_bytes(self, method: str, params: dict) -> bytes:
        """The raw JSON-RPC reply to one call (see :meth:`call`)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            return await self._post(body)
        except aiohttp.ClientConnectionError:  # a kept-alive connection it dropped: once more
            pass
        except (aiohttp.ClientError, TimeoutError) as err:
            raise CometUnreachable(f"CometBFT RPC at {self.url} unreachable: {err}") from None
        try:
            return await self._post(body)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise CometUnreachable(f"CometBFT RPC at {self.url} unreachable: {err}") from None

    async def _post(self, body: dict) -> bytes:
        async with self._session.post(self.url, json=body) as response:
            return await response.read()

    async def broadcast_tx_sync(self, raw: bytes) -> dict:
        """Submit a tx to the mempool; the CheckTx result."""
        return await self.call("broadcast_tx_sync", tx=base64.b64encode(raw).decode())

    async def block(self, height: int) -> tuple[BlockID, Block]:
        """The committed block at ``height``. Its JSON (up to the block size limit, tens of
        MB) is parsed and decoded on a thread, not on the loop that runs consensus."""
        raw = await self._call_bytes("block", {"height": str(height)})
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(PARSER, lambda: block_from_json(_result(raw)))

    async def tx(self, digest: bytes) -> dict:
        """CometBFT's indexed record of the committed tx with hash ``digest``, its JSON (a MB
        for a large tx) parsed on a thread, not on the loop that runs consensus."""
        raw = await self._call_bytes("tx", {"hash": base64.b64encode(digest).decode()})
        return await asyncio.get_running_loop().run_in_executor(PARSER, _result, raw)

    async def mempool_size(self) -> int:
        """How many txs wait in the mempool."""
        return int((await self.call("num_unconfirmed_txs"))["n_txs"])

    async def status(self) -> dict:
        """Node info, sync info and validator info."""
        return await self.call("status")

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None
