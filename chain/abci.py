"""The ABCI++ socket server CometBFT connects to, over the application.

CometBFT opens four connections (consensus, mempool, query, snapshot) and sends each a stream
of ``tendermint.abci.Request`` messages, each prefixed with its length as a protobuf uvarint;
the application answers every request, in order, with a ``Response`` framed the same way.
The compiled ABCI protos are cosmpy's (CometBFT v0.38's ``tendermint/abci/types.proto``).

All connections are served on one asyncio loop, so application calls never interleave.
CometBFT stops the node on an ``exception`` response, so whatever a client can make the
application do (queries, CheckTx, proposals, snapshots, vote extensions) is answered with a code
or a safe default even if handling fails. A failure to execute or commit a decided block is
different: the node cannot go on without committing a state it cannot vouch for, so the handler
reports it (``on_fatal``) and the node stops with that line.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from cosmpy.protos.tendermint.crypto.keys_pb2 import PublicKey
from cosmpy.protos.tendermint.types.validator_pb2 import BlockIDFlag
from google.protobuf.message import DecodeError

from dilochain.chain.app import Application, FinalizedBlock
from dilochain.chain.errors import CODESPACE, codes
from dilochain.chain.modules.validator_set import Evidence, Vote
from dilochain.chain.snapshots import (
    FORMAT,
    SnapshotInfo,
    SnapshotStore,
    offer_problem,
    restore_rows,
)

log = logging.getLogger(__name__)
# What a restore's writes and checks raise when this node's disk or memory runs out.
_NODE_FAULTS = (sqlite3.Error, OSError, MemoryError)

MAX_MESSAGE_BYTES = 104_857_600  # CometBFT's own limit on one ABCI message
MAX_BATCH = 256  # answers written together at most
APP_VERSION = 1
QueryFn = Callable[[str, bytes, bool], Awaitable[abci.ResponseQuery]]
_ABSENT = BlockIDFlag.BLOCK_ID_FLAG_ABSENT
_CONSENSUS = {"init_chain", "finalize_block", "commit"}  # no safe answer but to stop


_KINDS = {f.number: f.name for f in abci.Request.DESCRIPTOR.fields}


def request_kind(frame: bytes) -> str | None:
    """The kind of request a frame holds, from its first field's tag, even when the request
    does not decode (a query path that is not UTF-8, say: CometBFT passes such bytes on)."""
    number, shift = 0, 0
    for byte in frame[:10]:
        number |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return _KINDS.get(number >> 3)
    return None


def _fallback(kind: str, error: str) -> abci.Response:
    """The answer to a request of ``kind`` whose handling failed, where one keeps the chain
    going: a coded refusal, an empty proposal, an accepted proposal (FinalizeBlock answers
    each tx with its code) or no snapshot."""
    r = abci
    answers = {
        "check_tx": lambda: r.Response(check_tx=r.ResponseCheckTx(
            code=codes.INTERNAL, codespace=CODESPACE, log=error)),
        "prepare_proposal": lambda: r.Response(prepare_proposal=r.ResponsePrepareProposal()),
        "process_proposal": lambda: r.Response(process_proposal=r.ResponseProcessProposal(
            status=r.ResponseProcessProposal.ACCEPT)),
        "list_snapshots": lambda: r.Response(list_snapshots=r.ResponseListSnapshots()),
        "offer_snapshot": lambda: r.Response(offer_snapshot=r.ResponseOfferSnapshot(
            result=r.ResponseOfferSnapshot.REJECT)),
        "load_snapshot_chunk": lambda: r.Response(
            load_snapshot_chunk=r.ResponseLoadSnapshotChunk()),
        "apply_snapshot_chunk": lambda: r.Response(apply_snapshot_chunk=(
            r.ResponseApplySnapshotChunk(result=r.ResponseApplySnapshotChunk.ABORT))),
        "extend_vote": lambda: r.Response(extend_vote=r.ResponseExtendVote()),
        "verify_vote_extension": lambda: r.Response(verify_vote_extension=(
            r.ResponseVerifyVoteExtension(status=r.ResponseVerifyVoteExtension.ACCEPT))),
        "query": lambda: r.Response(query=r.ResponseQuery(
            code=codes.INVALID_REQUEST, codespace=CODESPACE, log=error)),
        "echo": lambda: r.Response(echo=r.ResponseEcho()),
        "flush": lambda: r.Response(flush=r.ResponseFlush()),
    }  # fmt: skip
    answer = answers.get(kind)
    return answer() if answer else r.Response(exception=r.ResponseException(error=error))


def encode_frame(message: bytes) -> bytes:
    """``message`` prefixed with its length as a uvarint."""
    size, prefix = len(message), bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            prefix.append(byte | 0x80)
        else:
            prefix.append(byte)
            return bytes(prefix) + message


def decode_frames(buffer: bytearray) -> list[bytes]:
    """Remove and return every complete frame at the front of ``buffer``.

    Raises ``ValueError`` on a length prefix that is malformed or over the limit.
    """
    frames, pos = [], 0
    while True:
        size, shift, cursor = 0, 0, pos
        while True:
            if cursor >= len(buffer):
                del buffer[:pos]
                return frames
            byte = buffer[cursor]
            cursor += 1
            size |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueError("malformed length prefix")
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {size} bytes is over the {MAX_MESSAGE_BYTES} limit")
        if cursor + size > len(buffer):
            del buffer[:pos]
            return frames
        frames.append(bytes(buffer[cursor : cursor + size]))
        pos = cursor + size


def exec_result(result: TxResponse) -> abci.ExecTxResult:
    """A tx's result as FinalizeBlock reports it."""
    return abci.ExecTxResult(
        code=result.code,
        data=bytes.fromhex(result.data),
        log=result.raw_log,
        gas_wanted=result.gas_wanted,
        gas_used=result.gas_used,
        events=result.events,
        codespace=result.codespace,
    )


class AbciHandler:
    """Maps each ABCI request to the application."""

    def __init__(
        self, app: Application, query: QueryFn, version: str,
        on_commit: Callable[[FinalizedBlock], None] | None = None,
        on_fatal: Callable[[str], None] | None = None, snapshots: SnapshotStore | None = None,
        retain_blocks: int = 0,
    ):  # fmt: skip
        self.app = app
        self.query = query
        self.version = version
        self.on_commit = on_commit  # told of each block once it is committed
        self.on_fatal = on_fatal  # told why the node cannot go on (a block it cannot execute)
        self.snapshots = snapshots  # taken and served for state sync (None: neither)
        self.retain_blocks = retain_blocks  # CometBFT may prune blocks older (0: keep all)
        self._finalized: FinalizedBlock | None = None
        self._restoring: tuple[SnapshotInfo, bytes] | None = None  # offered snapshot, app hash
        self._next_chunk = 0
        self._restored_bytes = 0  # of the chunks applied so far
        self._senders: set[str] = set()  # peers that served the snapshot being restored

    async def handle(self, request: abci.Request) -> abci.Response:
        """The response to one request; a coded or default answer if handling fails."""
        kind = request.WhichOneof("value")
        try:
            if kind == "query":
                q = request.query
                return abci.Response(query=await self.query(q.path, q.data, q.prove))
            handler = getattr(self, f"_{kind}", None)
            if handler is None:
                return abci.Response(exception=abci.ResponseException(error=f"unknown {kind}"))
            return handler(getattr(request, kind))
        except Exception as err:
            log.exception("ABCI %s failed", kind)
            error = f"{kind}: {type(err).__name__}: {err}"[:1000]
            if kind in _CONSENSUS and self.on_fatal is not None:
                self.on_fatal(error)
            return _fallback(kind, error)

    def _echo(self, req: abci.RequestEcho) -> abci.Response:
        return abci.Response(echo=abci.ResponseEcho(message=req.message))

    def _flush(self, req: abci.RequestFlush) -> abci.Response:
        return abci.Response(flush=abci.ResponseFlush())

    def _info(self, req: abci.RequestInfo) -> abci.Response:
        height = self.app.height
        return abci.Response(
            info=abci.ResponseInfo(
                data="dilochain",
                version=self.version,
                app_version=APP_VERSION,
                last_block_height=height,
                last_block_app_hash=self.app.app_hash if height else b"",
            )
        )

    def _init_chain(self, req: abci.RequestInitChain) -> abci.Response:
        app_hash = self.app.init_chain(req.chain_id, req.app_state_bytes or None)
        # No validators in the response: CometBFT keeps the genesis set (the app recorded it).
        return abci.Response(init_chain=abci.ResponseInitChain(app_hash=app_hash))

    def _check_tx(self, req: abci.RequestCheckTx) -> abci.Response:
        result = self.app.check_tx(req.tx, recheck=req.type == abci.CheckTxType.RECHECK)
        return abci.Response(
            check_tx=abci.ResponseCheckTx(
                code=result.code,
                log=result.raw_log,
                gas_wanted=result.gas_wanted,
                gas_used=result.gas_used,
                codespace=result.codespace,
            )
        )

    def _prepare_proposal(self, req: abci.RequestPrepareProposal) -> abci.Response:
        txs = self.app.prepare_proposal(list(req.txs), req.max_tx_bytes)
        return abci.Response(prepare_proposal=abci.ResponsePrepareProposal(txs=txs))

    def _process_proposal(self, req: abci.RequestProcessProposal) -> abci.Response:
        limit = self.app.genesis.consensus_params.block.max_bytes
        status = (
            abci.ResponseProcessProposal.ACCEPT
            if self.app.process_proposal(list(req.txs), limit)
            else abci.ResponseProcessProposal.REJECT
        )
        return abci.Response(process_proposal=abci.ResponseProcessProposal(status=status))

    def _finalize_block(self, req: abci.RequestFinalizeBlock) -> abci.Response:
        finalized = self.app.finalize_block(
            req.height, req.time.ToNanoseconds(), list(req.txs), req.hash, req.proposer_address,
            votes=[Vote(v.validator.address.hex().upper(), v.block_id_flag != _ABSENT)
                   for v in req.decided_last_commit.votes],
            evidence=[Evidence(m.validator.address.hex().upper(), m.height,
                               abci.MisbehaviorType.Name(m.type).lower())
                      for m in req.misbehavior],
        )  # fmt: skip
        self._finalized = finalized
        return abci.Response(
            finalize_block=abci.ResponseFinalizeBlock(
                events=finalized.events,
                tx_results=[exec_result(r) for r in finalized.results],
                validator_updates=[
                    abci.ValidatorUpdate(pub_key=PublicKey(ed25519=key), power=power)
                    for key, power in finalized.validator_updates
                ],
                app_hash=finalized.app_hash,
            )
        )

    def _commit(self, req: abci.RequestCommit) -> abci.Response:
        self.app.commit()
        if self.on_commit is not None and self._finalized is not None:
            self.on_commit(self._finalized)
        if self.snapshots is not None and self.snapshots.due(self.app.height):
            self.snapshots.take_in_background(self.app.height, self.app.store.snapshot_rows)
        return abci.Response(commit=abci.ResponseCommit(retain_height=self._retain_height()))

    def _retain_height(self) -> int:
        """The oldest block CometBFT must keep: ``retain_blocks`` back, but never past what
        evidence may still refer to (by height) or the oldest snapshot served."""
        if not self.retain_blocks:
            return 0
        evidence = self.app.genesis.consensus_params.evidence.max_age_num_blocks
        retain = max(0, self.app.height - max(self.retain_blocks, evidence))
        listed = self.snapshots.list() if self.snapshots is not None else []
        return min([retain, *(s.height for s in listed)])

    # ---- state sync: serving snapshots, and restoring one --------------------------------------
    def _list_snapshots(self, req: abci.RequestListSnapshots) -> abci.Response:
        found = self.snapshots.offer() if self.snapshots is not None else []
        return abci.Response(list_snapshots=abci.ResponseListSnapshots(snapshots=[
            abci.Snapshot(height=s.height, format=FORMAT, chunks=s.chunks, hash=s.hash,
                          metadata=s.metadata) for s in found]))  # fmt: skip

    def _load_snapshot_chunk(self, req: abci.RequestLoadSnapshotChunk) -> abci.Response:
        chunk = (self.snapshots.chunk(req.height, req.format, req.chunk)
                 if self.snapshots is not None else b"")  # fmt: skip
        return abci.Response(load_snapshot_chunk=abci.ResponseLoadSnapshotChunk(chunk=chunk))

    def _offer_snapshot(self, req: abci.RequestOfferSnapshot) -> abci.Response:
        offer = abci.ResponseOfferSnapshot
        s = req.snapshot
        snapshot = SnapshotInfo(s.height, s.chunks, s.hash, s.metadata)
        if self.app.height or self.app.store.meta("genesis") is not None:
            result = offer.ABORT  # this node has a state of its own, if only genesis
        elif (problem := offer_problem(snapshot, s.format)) is not None:
            log.warning("snapshot of height %d refused: %s", s.height, problem)
            result = offer.REJECT_FORMAT if s.format != FORMAT else offer.REJECT
        else:
            self.app.abandon_restore()
            self._restoring, self._next_chunk = (snapshot, req.app_hash), 0
            self._restored_bytes = 0
            self._senders = set()
            result = offer.ACCEPT
        return abci.Response(offer_snapshot=offer(result=result))

    def _apply_snapshot_chunk(self, req: abci.RequestApplySnapshotChunk) -> abci.Response:
        applied = abci.ResponseApplySnapshotChunk
        if self._restoring is None:
            return abci.Response(apply_snapshot_chunk=applied(result=applied.ABORT))
        snapshot, app_hash = self._restoring
        index = req.index
        if index != self._next_chunk:  # CometBFT applies chunks in order
            return abci.Response(apply_snapshot_chunk=applied(result=applied.RETRY_SNAPSHOT))
        expected = snapshot.metadata[32 * index : 32 * index + 32]
        if hashlib.sha256(req.chunk).digest() != expected:  # that peer's copy: another's
            return abci.Response(apply_snapshot_chunk=applied(
                result=applied.RETRY, refetch_chunks=[index],
                reject_senders=[req.sender] if req.sender else []))  # fmt: skip
        if req.sender:
            self._senders.add(req.sender)
        try:
            restored = self._restore_chunk(snapshot, app_hash, req.chunk)
        except ValueError as err:  # the snapshot itself is malformed
            log.warning("snapshot of height %d refused: chunk %d: %s", snapshot.height, index, err)
            return self._refuse_snapshot()
        except _NODE_FAULTS as err:  # no fault of the snapshot: another one may fit
            why = f"chunk {index}: this node's disk or memory failed ({err!r}); trying another"
            log.error("snapshot of height %d not restored: %s", snapshot.height, why)
            return self._refuse_snapshot(blame_senders=False)
        if not restored:
            return self._refuse_snapshot()
        return abci.Response(apply_snapshot_chunk=applied(result=applied.ACCEPT))

    def _restore_chunk(self, snapshot: SnapshotInfo, app_hash: bytes, chunk: bytes) -> bool:
        """Write one chunk's rows and, after the last, check the whole state against
        ``app_hash``: whether the restore can go on (or is done)."""
        self.app.restore_rows(restore_rows(chunk, self._restored_bytes))
        self._restored_bytes += len(chunk)
        self._next_chunk += 1
        if self._next_chunk < snapshot.chunks:
            return True
        self._restoring = None
        return self.app.finish_restore(snapshot.height, app_hash)

    def _refuse_snapshot(self, blame_senders: bool = True) -> abci.Response:
        """Refuse the snapshot being restored and, unless this node's own disk or memory
        failed, every peer that served it (its chunks matched the metadata they advertised:
        they all served the same bad state)."""
        self._restoring = None
        try:
            self.app.abandon_restore()
        except _NODE_FAULTS:  # a full disk may refuse the delete too: the next offer retries
            log.exception("a refused snapshot's rows are not deleted yet")
        applied = abci.ResponseApplySnapshotChunk
        senders = sorted(self._senders) if blame_senders else []
        return abci.Response(apply_snapshot_chunk=applied(
            result=applied.REJECT_SNAPSHOT, reject_senders=senders))  # fmt: skip

    def _extend_vote(self, req: abci.RequestExtendVote) -> abci.Response:
        return abci.Response(extend_vote=abci.ResponseExtendVote())

    def _verify_vote_extension(self, req: abci.RequestVerifyVoteExtension) -> abci.Response:
        accept = abci.ResponseVerifyVoteExtension.ACCEPT
        return abci.Response(verify_vote_extension=abci.ResponseVerifyVoteExtension(status=accept))


class _Connection(asyncio.Protocol):
    """One CometBFT connection: frames in, one response per request out, in order."""

    def __init__(self, handler: AbciHandler, connections: set[_Connection]):
        self.handler = handler
        self.connections = connections
        self.buffer = bytearray()
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.transport: asyncio.Transport | None = None
        self.worker: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connections.add(self)
        self.worker = asyncio.get_running_loop().create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        self.buffer.extend(data)
        try:
            frames = decode_frames(self.buffer)
        except ValueError as err:
            log.error("ABCI connection closed: %s", err)
            assert self.transport is not None
            self.transport.close()
            return
        for frame in frames:
            self.queue.put_nowait(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.queue.put_nowait(None)

    async def _serve(self) -> None:
        """Answer each frame in order; answers to frames that arrived together (CometBFT sends
        the mempool's CheckTxs in bursts) leave in one write."""
        assert self.transport is not None
        answers: list[bytes] = []
        while (frame := await self.queue.get()) is not None:
            try:
                request = abci.Request.FromString(frame)
            except DecodeError as err:  # a client's query or tx is answered in kind
                kind = request_kind(frame)
                error = f"undecodable request: {err}"
                response = (
                    _fallback(kind, error)
                    if kind in ("query", "check_tx")
                    else (abci.Response(exception=abci.ResponseException(error=error)))
                )
            else:
                if request.WhichOneof("value") == "query" and answers:
                    self._write(answers)  # a query may wait: what is answered leaves first
                response = await self.handler.handle(request)
            answers.append(encode_frame(response.SerializeToString()))
            if self.queue.empty() or len(answers) >= MAX_BATCH:
                self._write(answers)

    def _write(self, answers: list[bytes]) -> None:
        assert self.transport is not None
        if not self.transport.is_closing():
            self.transport.write(b"".join(answers))
        answers.clear()


class AbciServer:
    """Listens on a unix socket for CometBFT's ABCI connections: only this user's processes can
    connect, and once CometBFT's four connections are open any further one is refused (nothing
    else may drive the application's blocks)."""

    MAX_CONNECTIONS = 4  # consensus, mempool, query and snapshot

    def __init__(self, handler: AbciHandler):
        self.handler = handler
        self.connections: set[_Connection] = set()
        self.refused = 0
        self._server: asyncio.Server | None = None

    async def start(self, path: Path) -> None:
        """Start listening at ``path`` (a socket file, readable by this user alone)."""
        loop = asyncio.get_running_loop()
        path.unlink(missing_ok=True)
        self._server = await loop.create_unix_server(self._accept, str(path))
        path.chmod(0o600)

    def _accept(self) -> asyncio.Protocol:
        if len(self.connections) >= self.MAX_CONNECTIONS:
            self.refused += 1
            log.warning("ABCI: refused a connection beyond CometBFT's %d", self.MAX_CONNECTIONS)
            return _Refused()
        return _Connection(self.handler, self.connections)

    async def stop(self) -> None:
        """Close the listener and every connection."""
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.close()
            await self._server.wait_closed()


class _Refused(asyncio.Protocol):
    """A connection the server does not serve: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
