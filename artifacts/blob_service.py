"""The gRPC blob service: a host serves its artifact store; others fetch from it (hash-checked)."""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import BinaryIO

import grpc
from prometheus_client import Counter

from dilochain.artifacts.object_store import MIN_RATE, fetch_object, probe_object
from dilochain.artifacts.store import (
    ArtifactError,
    ArtifactTooLarge,
    LocalArtifactStore,
    PeerSlow,
    PeerUnavailable,
    PeerUnreachable,
)
from dilochain.protocol.caller_budget import CallerBudget
from dilochain.protocol.endpoint import (
    caller_address,
    is_url,
    location_host,
    location_problem,
    peer_refusal,
    private_peers_allowed,
)
from dilochain.protocol.grpc_decode import Undecodable, tolerant
from dilochain.protocol.hashing import HASH_BYTES
from dilochain.protocol.pb.node.v1 import blob_pb2, blob_pb2_grpc
from dilochain.protocol.server_options import server_options

log = logging.getLogger(__name__)

CHUNK = 1 << 20
CHUNK_OVERHEAD = 64  # a BlobChunk message's bytes besides its data
# What a blob service says before it sends any byte, never after: a peer that says it after
# bytes sent them as junk (it is then suspect, as one that sent bad bytes).
_BEFORE_ANY_BYTE = {grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND,
                    grpc.StatusCode.INVALID_ARGUMENT}  # fmt: skip
# How gRPC says a message was larger than the channel takes (its status is RESOURCE_EXHAUSTED,
# which a busy peer's refusal also is).
_OVERSIZED_MESSAGE = "larger than max"
LOCAL_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # writing what was fetched
ATTEMPTS = 3  # passes over a hash's peers before a fetch gives up
SHARED_FETCH_WAIT = 5.0  # seconds a fetch waits for another thread's of the same artifact
PROBE_SECONDS = 5.0  # an owner's endpoint that does not answer a Has within this is unreachable
BACKOFF_SECONDS = 0.25  # before the second pass; doubled before each later one
# A stream that sends nothing for this long is cut off as unreachable: a 1 MiB chunk takes
# 8 s at 1 Mbit/s, and a host that answers Has but stalls its Get holds no fetch for the
# whole deadline its artifacts' size allows.
IDLE_SECONDS = 30.0
PROGRESS_BYTES = 64 << 10  # what counts as progress within IDLE_SECONDS (~2 KB/s at least)
# A peer that sends less than SLOW_RATE over RATE_WINDOW is cut off as slow while a fetch has
# passes left, so the next peer is asked; on the last pass every peer gets the whole allowance.
# A peer that dripped (64 KiB every 30 s keeps a stream alive: ~17 bit/s) held a fetch for its
# whole deadline, 60 s + a second a MiB of the run's largest artifact, on every pass, so a few
# Sybil hosts or verifiers listed first held every fetch that reached them. Holding one now
# costs 1 Mbit/s for the while; an honest stream that slow (a host's 32 streams sharing under
# 32 Mbit/s) is only asked last.
SLOW_RATE = 128 << 10  # bytes a second
RATE_WINDOW = 10.0
# Peers' names (other than the owner's) are looked up at once, for at most this long in all,
# each at most once at a time, and what a lookup found is used for this long.
RESOLVE_SECONDS = PROBE_SECONDS
RESOLVED_SECONDS = 60.0
UNRESOLVED_SECONDS = 5.0  # ... and a name that did not resolve (a passing DNS failure), this long
SUSPECT_SECONDS = 3600.0  # a peer that sent bad bytes is asked after the others this long
# Registered by the roles that move artifacts (node, verifier: metrics_http.role_registry).
SERVED_BYTES = Counter("dilochain_artifact_served_bytes", "Artifact bytes sent to peers",
                       registry=None)  # fmt: skip
FETCHED_BYTES = Counter("dilochain_artifact_fetched_bytes", "Artifact bytes fetched from peers",
                        registry=None)  # fmt: skip


# Gets a blob service streams at once, in all and to one caller's address (an IPv6 /64; this
# machine's own callers, a devnet's, are not capped apiece). Beyond them up to QUEUED_GETS
# wait (a thread each) up to QUEUE_SECONDS for a stream to end; more are refused as busy,
# which a fetcher asks again. Has has threads of its own beside them all, so a full house of
# Gets never makes the host look down to an owner probe.
GET_STREAMS = 32
QUEUED_GETS = 64
QUEUE_SECONDS = 10.0
CALLER_STREAMS = 4  # streaming and waiting
HAS_THREADS = 4
# A caller that takes no chunk for this long is cut off: one that opened Gets and never read
# held a serving thread each for ever (16 such calls made an honest host unreachable to
# every verifier until it was slashed).
SEND_IDLE_SECONDS = IDLE_SECONDS
CHECKED_FILES = 65_536  # files whose hash a blob service remembers checking
# Has probes waiting for their requests at once, in all and from one address (a probe's
# request comes with its first frame: one that does not within PROBE_REQUEST_SECONDS is cut).
PROBES = 16
CALLER_PROBES = 2
PROBE_REQUEST_SECONDS = 5.0


class _Streams:
    """The Gets being served: at most ``streams`` (default :data:`GET_STREAMS`) streaming and
    :data:`QUEUED_GETS` waiting, and :data:`CALLER_STREAMS` of them a caller's address; each
    stream cancelled once it goes :data:`SEND_IDLE_SECONDS` without a chunk taken (checked once
    a second on a thread of its own while any stream is open)."""

    def __init__(self, streams: int | None = None) -> None:
        self.streams = GET_STREAMS if streams is None else streams
        self._cond = threading.Condition()
        self._open: dict[int, tuple[grpc.ServicerContext, str, list[float]]] = {}
        self._queued: dict[int, str] = {}
        self._watching = False

    def admit(self, context: grpc.ServicerContext) -> list[float] | None:
        """Register a stream, waiting for a free one up to :data:`QUEUE_SECONDS`; its progress
        clock (set it after each chunk), or None when the caller's address is at its limit,
        the queue is full, or no stream came free in time."""
        caller = caller_address(context.peer())
        deadline = time.monotonic() + QUEUE_SECONDS
        with self._cond:
            mine = sum(who == caller for _, who, _ in self._open.values())
            mine += sum(who == caller for who in self._queued.values())
            if mine >= CALLER_STREAMS and caller:  # "": this machine's own processes
                return None
            if len(self._open) >= self.streams and len(self._queued) >= QUEUED_GETS:
                return None
            self._queued[id(context)] = caller
            try:
                while len(self._open) >= self.streams:
                    left = deadline - time.monotonic()
                    if left <= 0 or not context.is_active():
                        return None
                    self._cond.wait(min(left, 1.0))
            finally:
                del self._queued[id(context)]
            clock = [time.monotonic()]
            self._open[id(context)] = (context, caller, clock)
            if not self._watching:
                self._watching = True
                threading.Thread(target=self._watch, name="blob-idle", daemon=True).start()
            return clock

    def clock(self, context: grpc.ServicerContext) -> list[float]:
        """The progress clock of the stream :meth:`admit` registered for ``context``."""
        with self._cond:
            return self._open[id(context)][2]

    def close(self, context: grpc.ServicerContext) -> None:
        """The stream ended."""
        with self._cond:
            self._open.pop(id(context), None)
            self._cond.notify()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, SEND_IDLE_SECONDS))
            with self._cond:
                if not self._open:
                    self._watching = False
                    return
                now = time.monotonic()
                stalled = [ctx for ctx, _, clock in self._open.values()
                           if now - clock[0] > SEND_IDLE_SECONDS]  # fmt: skip
            for context in stalled:
                try:
                    context.cancel()
                except Exception:  # logged; the watch goes on for the others
                    log.exception("cancelling a stalled blob stream")


class BlobServicer:
    """Serves one store's artifacts in 1 MiB chunks, read from its file as they go out (a
    checkpoint of many GB is never held in memory, however many peers ask for it at once, and
    a caller that went away costs no more reads). The caller checks the hash while it streams,
    as it does for every source; the server too, the first time it serves a file, and it
    holds back the last chunk of a file that does not hash right. Anyone can call it: a
    request that does not decode or names no sha256 is INVALID_ARGUMENT, never an internal
    error."""

    def __init__(self, store: LocalArtifactStore, streams: int | None = None):
        self.store = store
        self._checked: dict[bytes, tuple[int, int, int]] = {}  # digest: its file's stat, hashed
        self._streams = _Streams(streams)
        self._probes = CallerBudget(PROBES, CALLER_PROBES)

    @staticmethod
    def _digest(request, context) -> bytes:
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error)
        if len(request.hash) != HASH_BYTES:
            size = len(request.hash)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"a hash is {HASH_BYTES} bytes (sha256), not {size}")  # fmt: skip
        return request.hash

    def _get(self, requests: Iterator, context) -> Iterator[blob_pb2.BlobChunk]:
        """A Get admitted as a stream (its caller's share, :data:`CALLER_STREAMS`) from its
        first frame, before its request is in: a caller that never finishes its request holds
        a stream, and a thread, no longer than an idle one (:data:`SEND_IDLE_SECONDS`), and
        one address no more of them than of streams. (Served as a unary method, a Get held a
        thread from its first frame until its request came, counted nowhere: one connection
        of unfinished Gets took every serving thread, and the host looked down to every
        verifier.)"""
        clock = self._streams.admit(context)
        if clock is None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "busy: too many artifacts streaming (ask again)")  # fmt: skip
        try:
            request = _first(requests)
            if request is not None:
                yield from self.Get(request, context)
        finally:
            self._streams.close(context)

    def Get(self, request, context) -> Iterator[blob_pb2.BlobChunk]:
        """Stream the artifact ``request`` names (on a stream :meth:`_get` admitted)."""
        digest = self._digest(request, context)
        yield from self._stream(digest, request.max_bytes, context, self._streams.clock(context))

    def _stream(
        self, digest: bytes, max_bytes: int, context, clock: list[float]
    ) -> Iterator[blob_pb2.BlobChunk]:
        path = self.store.file(digest)
        try:
            served = path.open("rb") if path is not None else None
        except OSError:  # pruned since it was asked for
            served = None
        if served is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"artifact {digest.hex()[:16]}… not here")
        with served:
            info = os.fstat(served.fileno())
            if 0 < max_bytes < info.st_size:  # none of it sent: the asker would refuse it
                context.abort(grpc.StatusCode.OUT_OF_RANGE,
                              f"artifact {digest.hex()[:16]}… is {info.st_size} bytes, more "
                              f"than the {max_bytes} asked for")  # fmt: skip
            seen = (info.st_ino, info.st_size, info.st_mtime_ns)
            hasher = hashlib.sha256() if self._checked.get(digest) != seen else None
            chunk = served.read(CHUNK)
            while context.is_active() and chunk:
                following = served.read(CHUNK)
                if hasher is not None:
                    hasher.update(chunk)
                    if not following and hasher.digest() != digest:
                        self._damaged(digest, context)
                SERVED_BYTES.inc(len(chunk))
                yield blob_pb2.BlobChunk(data=chunk)
                clock[0] = time.monotonic()
                chunk = following
            if hasher is not None and not chunk:  # served whole (an empty file: checked here)
                if hasher.digest() != digest:
                    self._damaged(digest, context)
                if len(self._checked) >= CHECKED_FILES:  # a long-lived host's: hashed again
                    self._checked.clear()
                self._checked[digest] = seen

    def _damaged(self, digest: bytes, context) -> None:
        """A file whose bytes no longer hash to its name (a damaged disk, an unsynced write a
        power loss cut short): removed, so this host fetches it again where it can, and the
        caller told so before its last chunk, never served as the artifact."""
        log.error("artifact %s… in %s is damaged (its bytes do not hash to its name): removed, "
                  "not served", digest.hex()[:16], self.store.root)  # fmt: skip
        self.store.delete(digest)
        self._checked.pop(digest, None)
        context.abort(grpc.StatusCode.DATA_LOSS, f"artifact {digest.hex()[:16]}… is damaged here")

    def _has(self, requests: Iterator, context) -> blob_pb2.HasBlobResponse:
        """A Has admitted from its first frame (:data:`CALLER_PROBES` an address,
        :data:`PROBES` in all) and given :data:`PROBE_REQUEST_SECONDS` for its request, as
        :meth:`_get` is for the same reason."""
        who = caller_address(context.peer())
        if not self._probes.take(who):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy: too many probes (ask again)")
        timer = threading.Timer(PROBE_REQUEST_SECONDS, context.cancel)
        timer.daemon = True
        timer.start()
        try:
            request = _first(requests)
        finally:
            timer.cancel()
            self._probes.give(who)
        if request is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no request")
        return self.Has(request, context)

    def Has(self, request, context) -> blob_pb2.HasBlobResponse:
        """Whether this service has the artifact ``request`` names."""
        return blob_pb2.HasBlobResponse(present=self.store.has(self._digest(request, context)))

    def handler(self) -> grpc.GenericRpcHandler:
        """The ``dilochain.node.v1.Blob`` service, its requests decoded tolerantly."""
        decode = tolerant(blob_pb2.GetBlobRequest.FromString)
        encode = lambda message: message.SerializeToString()  # noqa: E731
        return grpc.method_handlers_generic_handler("dilochain.node.v1.Blob", {
            "Get": grpc.stream_stream_rpc_method_handler(self._get, decode, encode),
            "Has": grpc.stream_unary_rpc_method_handler(self._has, decode, encode),
        })  # fmt: skip


def _first(requests: Iterator):
    """The one request of a unary call served as a stream (None if it never came: the call
    was cancelled, or ended without one)."""
    try:
        return next(requests, None)
    except grpc.RpcError:  # cancelled while waiting for it
        return None


def serve_blobs(
    store: LocalArtifactStore, address: str, streams: int | None = None
) -> tuple[grpc.Server, str]:
    """Start a blob server on ``address`` (``host:0`` picks a port); returns it and its address.
    Its threads each stream one artifact (a few MiB of memory each), up to ``streams`` (default
    :data:`GET_STREAMS`: a round's screening committees and replays) at once with
    :data:`QUEUED_GETS` waiting, and :data:`HAS_THREADS` beside."""
    streams = GET_STREAMS if streams is None else streams
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=streams + QUEUED_GETS + HAS_THREADS),
        options=server_options(),
    )
    server.add_generic_rpc_handlers((BlobServicer(store, streams).handler(),))
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ArtifactError(f"cannot serve blobs on {address} (address in use or invalid)")
    server.start()
    return server, f"{address.rsplit(':', 1)[0]}:{port}"


# Worth asking again: down, too slow, or busy (at its streams' limit).
_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.RESOURCE_EXHAUSTED}  # fmt: skip


def fetch_artifact(
    location: str, digest: bytes, limit: int, out: BinaryIO, dial: Sequence[str] = (),
    min_rate: float = 0.0,
) -> int:  # fmt: skip
    """Fetch ``digest`` from a host's artifact location, its blob service (``host:port``,
    dialled at ``dial`` where given: see :func:`checked_dial`; cut off below ``min_rate``) or
    its object-store prefix (a URL), into ``out``; the bytes received (see
    :func:`fetch_blob`)."""
    if not is_url(location):
        return fetch_blob(location, digest, limit, out, dial=dial, min_rate=min_rate)
    received = fetch_object(location, digest, limit, out)
    FETCHED_BYTES.inc(received)
    return received


class _IdleWatch:
    """Cancels a streaming call that makes no progress, :data:`PROGRESS_BYTES` received, for
    ``seconds``, or (given ``min_rate``) receives less than ``min_rate`` bytes a second over a
    :data:`RATE_WINDOW` from its first bytes on (checked once a second on a thread of its own,
    which :meth:`stop` ends): a peer sending empty chunks, or a byte at a time, is as silent
    as one sending nothing."""

    def __init__(self, call: grpc.Future, seconds: float, min_rate: float = 0.0):
        self.call, self.seconds, self.min_rate = call, seconds, min_rate
        self.last, self.fired, self.slow, self._since = time.monotonic(), "", False, 0
        # The rate's first window starts at the first bytes: the time before them (a busy
        # host's queue, a connection) is IDLE_SECONDS' to judge.
        self._window: float | None = None
        self._in_window = 0
        self._done = threading.Event()
        threading.Thread(target=self._watch, name="fetch-idle", daemon=True).start()

    def progress(self, received: int) -> None:
        """``received`` more bytes arrived."""
        if self._window is None and received:
            self._window = time.monotonic()
        self._since += received
        self._in_window += received
        if self._since >= PROGRESS_BYTES:
            self.last, self._since = time.monotonic(), 0

    def stop(self) -> None:
        """The call is over."""
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(min(1.0, self.seconds)):
            now = time.monotonic()
            if now - self.last > self.seconds:
                self.fired = f"sent nothing for {self.seconds:g} s"
            elif self.min_rate and self._window is not None and now - self._window >= RATE_WINDOW:
                if self._in_window < self.min_rate * RATE_WINDOW:
                    self.slow = True
                    self.fired = (f"sent {self._in_window} bytes in {RATE_WINDOW:g} s, slower "
                                  f"than {self.min_rate:g} bytes a second")  # fmt: skip
                self._window, self._in_window = now, 0
            if self.fired:
                self.call.cancel()
                return


def fetch_blob(
    endpoint: str, digest: bytes, limit: int, out: BinaryIO, timeout: float = 60.0,
    dial: Sequence[str] = (), min_rate: float = 0.0,
) -> int:  # fmt: skip
    """Fetch an artifact from a host's blob service into ``out`` (emptied first), hashing while
    it streams and stopping as soon as it passes ``limit`` bytes (no artifact of the run can be
    larger); the bytes received. The whole call may take ``timeout`` plus ``limit`` at
    :data:`MIN_RATE` (a fixed deadline would make a large enough checkpoint unfetchable), and
    :data:`IDLE_SECONDS` without a chunk, or (given ``min_rate``) a :data:`RATE_WINDOW` below
    ``min_rate`` bytes a second, ends it as unreachable. ``dial``: the gRPC targets to connect
    to, in turn while none is reached (the addresses ``endpoint`` was checked at,
    :func:`checked_dial`)."""
    targets = list(dial) or [endpoint]
    for target in targets[:-1]:
        try:
            return _fetch_blob_at(endpoint, target, digest, limit, out, timeout, min_rate)
        except PeerUnreachable:
            if out.tell():  # it was reached, and then went silent
                raise
    return _fetch_blob_at(endpoint, targets[-1], digest, limit, out, timeout, min_rate)


def _channel(endpoint: str, target: str, limit: int) -> grpc.Channel:
    """A channel to ``endpoint`` dialled at ``target``, naming ``endpoint`` as its authority
    (a proxy in front of blob services routes by it), that takes no message larger than a
    chunk of an artifact of ``limit`` bytes (gRPC receives a message whole before it is
    handed over: 4 MiB by default, where a 64-byte index was asked for)."""
    options = [("grpc.max_receive_message_length", min(limit, CHUNK) + CHUNK_OVERHEAD)]
    options += [] if target == endpoint else [("grpc.default_authority", endpoint)]
    return grpc.insecure_channel(target, options=options)


def _fetch_blob_at(
    endpoint: str, target: str, digest: bytes, limit: int, out: BinaryIO, timeout: float,
    min_rate: float,
) -> int:  # fmt: skip
    out.seek(0)
    out.truncate()
    received, hasher = 0, hashlib.sha256()
    with _channel(endpoint, target, limit) as channel:
        asked = blob_pb2.GetBlobRequest(hash=digest, max_bytes=limit)
        chunks = blob_pb2_grpc.BlobStub(channel).Get(asked, timeout=timeout + limit / MIN_RATE)
        idle = _IdleWatch(chunks, IDLE_SECONDS, min_rate)
        try:
            for chunk in chunks:
                idle.progress(len(chunk.data))
                if received + len(chunk.data) > limit:
                    chunks.cancel()
                    raise ArtifactError(f"{endpoint}: sent more than the {limit} bytes allowed")
                out.write(chunk.data)
                hasher.update(chunk.data)
                received += len(chunk.data)
        except grpc.RpcError as err:
            if idle.fired:
                kind = PeerSlow if idle.slow else PeerUnreachable
                raise kind(f"{endpoint}: {idle.fired}") from None
            if received and err.code() in _BEFORE_ANY_BYTE:  # junk, then an excuse
                raise ArtifactError(f"{endpoint}: sent {received} bytes, then said "
                                    f"{err.code().name}: {err.details()}") from None  # fmt: skip
            if err.code() == grpc.StatusCode.OUT_OF_RANGE:  # its size said: nothing was sent
                raise ArtifactTooLarge(f"{endpoint}: {err.details()}") from None
            if _OVERSIZED_MESSAGE in (err.details() or ""):  # more than allowed, in one message
                raise ArtifactError(f"{endpoint}: sent more than the {limit} bytes allowed, in "
                                    "one message") from None  # fmt: skip
            kind = PeerUnreachable if err.code() in _UNREACHABLE else PeerUnavailable
            raise kind(f"{endpoint}: {err.details() or err.code()}") from None
        finally:
            idle.stop()
    if hasher.digest() != digest:
        raise ArtifactError(f"artifact {digest.hex()[:16]}… from {endpoint} is corrupt")
    FETCHED_BYTES.inc(received)
    return received


class PeerFetchingStore:
    """A local store that fetches what it lacks from peers' blob services, then keeps it;
    ``touched`` holds every hash read through it (what a job used, for pruning)."""

    def __init__(
        self, local: LocalArtifactStore, peers: Callable[[], list[str]], limit: int,
        owner: str | None = None,
    ):  # fmt: skip
        self.local = local
        self.peers = peers
        self.limit = limit
        self.owner = owner  # the endpoint of the host whose artifacts these are, if known
        self.touched: set[bytes] = set()

    def put(self, data: bytes, digest: bytes | None = None) -> bytes:
        """Store locally."""
        return self.local.put(data, digest)

    def has(self, digest: bytes) -> bool:
        """Whether the local store has it."""
        return self.local.has(digest)

    def delete(self, digest: bytes) -> None:
        """Remove the local copy."""
        self.local.delete(digest)

    def _limit(self, limit: int | None) -> int:
        """What a fetch allows: ``limit`` (the kind's), never more than the run's largest."""
        return self.limit if limit is None else min(limit, self.limit)

    def warm(self, digest: bytes, limit: int | None = None, attempts: int = ATTEMPTS) -> None:
        """Have ``digest`` in the local store: if absent, fetched from peers straight to disk
        (hash-checked as it streams, stopped past ``limit`` bytes; a local copy is checked
        when it is read), once however many threads ask for it at once unless the first
        takes longer than :data:`SHARED_FETCH_WAIT`."""
        self.touched.add(digest)

        def fetch(out: BinaryIO) -> None:
            fetch_from_peers(self.peers(), digest, self._limit(limit), attempts=attempts,
                             out=out, owner=self.owner)  # fmt: skip

        # Another thread's fetch of it first, for a while: past that, from this store's own
        # sources (that one may be asking a host that drips it).
        with self.local.writing(digest, wait=SHARED_FETCH_WAIT):
            if not self.local.has(digest):
                self.local.put_stream(digest, fetch, sync=False)

    def get(
        self, digest: bytes, limit: int | None = None, attempts: int = ATTEMPTS,
        last: str | None = None,
    ) -> bytes:  # fmt: skip
        """Local bytes, or the first peer's that hash right and are at most ``limit`` bytes
        (see :func:`fetch_from_peers`), ``last`` (a peer that may withhold it, slowly) asked
        after every other. A local copy that no longer hashes right (a damaged disk, a bad
        restore) is replaced by a peer's; if no peer has it, the error says both."""
        self.touched.add(digest)
        damaged = ""
        if self.local.has(digest):
            try:
                return self.local.get(digest, limit)
            except ArtifactTooLarge:  # a peer's copy would be as large: kept, asked nowhere
                raise
            except ArtifactError as err:
                damaged = f"{err}, and "
                log.warning("%s: fetching it again from the run's peers", err)
                self.local.delete(digest)
        try:
            data = fetch_from_peers(self.peers(), digest, self._limit(limit), attempts,
                                    owner=self.owner, last=last)  # fmt: skip
        except ArtifactError as err:
            raise type(err)(f"{damaged}{err}") from None
        self.local.put(data, digest)  # hash-checked by the fetch
        return data


def checked_dial(location: str) -> tuple[tuple[str, ...], str | None]:
    """Where to connect for ``location`` and why never: (gRPC targets of the addresses its
    host resolves to, one a family in the resolver's order, None) when every address may be
    fetched from; ((), why) when one is an address no artifact is fetched from
    (``protocol.endpoint.peer_refusal``: link-local, multicast or reserved; private or
    loopback where this process refuses those); ((), None) when it does not resolve. A blob
    endpoint is dialled at the addresses checked here, never resolved again by gRPC (a name
    answering a public address to the check and a private one to the connection, DNS
    rebinding, would reach this machine's own network); an object store's connection is
    checked again once made."""
    host, _, port = location_host(location).rpartition(":")
    try:
        found = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return (), None
    for info in found:
        if (why := peer_refusal(info[4][0])) is not None:
            return (), f"{location}: leads to {info[4][0]}, {why}"
    families: dict[int, list[str]] = {}
    for family, *_, address in found:
        ip = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
        families.setdefault(family, []).append(f"{ip}:{port}")
    return tuple(
        ("ipv6:" if family == socket.AF_INET6 else "ipv4:") + ",".join(dict.fromkeys(found_))
        for family, found_ in families.items()
    ), None


class _Lookups:
    """:func:`checked_dial` of peers' locations, each on a thread of its own, at most one at a
    time a location, its answer kept :data:`RESOLVED_SECONDS` (one that did not resolve
    :data:`UNRESOLVED_SECONDS`): a stranger's name whose DNS servers never answer holds one
    thread, never a pool every other lookup waits behind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple, tuple[float, tuple[tuple[str, ...], str | None]]] = {}
        self._pending: dict[tuple, futures.Future] = {}

    def checked(self, locations: list[str]) -> dict[str, tuple[tuple[str, ...], str | None]]:
        """Each location's :func:`checked_dial`, waiting at most :data:`RESOLVE_SECONDS` in
        all; one not answered by then is taken as not resolving."""
        now, answers, waiting = time.monotonic(), {}, {}
        with self._lock:
            for location in locations:
                key = (location, private_peers_allowed())  # what the answer's checks depend on
                kept = self._found.get(key)
                if kept is not None and now - kept[0] < _kept_for(kept[1]):
                    answers[location] = kept[1]
                    continue
                if key not in self._pending:
                    self._pending[key] = futures.Future()
                    threading.Thread(target=self._look_up, args=(key,), daemon=True,
                                     name="resolve").start()  # fmt: skip
                waiting[location] = self._pending[key]
        futures.wait(waiting.values(), timeout=RESOLVE_SECONDS)
        for location, found in waiting.items():
            answers[location] = found.result() if found.done() else ((), None)
        return answers

    def _look_up(self, key: tuple[str, bool | None]) -> None:
        try:
            answer = checked_dial(key[0])
        except Exception:  # a resolver's surprise: as a name that does not resolve
            answer = ((), None)
        with self._lock:
            self._found[key] = (time.monotonic(), answer)
            if len(self._found) > CHECKED_FILES:  # a long-lived process's: looked up again
                self._found.clear()
            self._pending.pop(key).set_result(answer)


def _kept_for(answer: tuple[tuple[str, ...], str | None]) -> float:
    """How long a lookup's answer is used: a name that did not resolve briefly (a resolver's
    passing failure would otherwise make its host look down for a minute)."""
    targets, refused = answer
    return RESOLVED_SECONDS if targets or refused else UNRESOLVED_SECONDS


_lookups = _Lookups()


class _Suspects:
    """Peers that sent bytes other than what they were asked for (a wrong hash, more than the
    fetch allowed), each remembered :data:`SUSPECT_SECONDS`: asked after every other peer by
    later fetches too. A peer that sent junk was dropped by the fetch it spoiled only, so a few
    Sybil peers listed first made every later fetch download up to the run's largest artifact
    size of junk from each of them before an honest peer was asked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}

    def add(self, endpoint: str) -> None:
        """``endpoint`` sent bad bytes."""
        with self._lock:
            if len(self._since) >= CHECKED_FILES:  # a long-lived process's: forgiven early
                self._since.clear()
            self._since[endpoint] = time.monotonic()

    def last(self, endpoints: list[str]) -> list[str]:
        """``endpoints``, the suspects among them moved behind the others (in order)."""
        now = time.monotonic()
        with self._lock:
            suspect = {e for e in endpoints
                       if now - self._since.get(e, -SUSPECT_SECONDS) < SUSPECT_SECONDS}  # fmt: skip
        return [e for e in endpoints if e not in suspect] + [e for e in endpoints if e in suspect]


_suspects = _Suspects()


def _unreachable(endpoint: str, digest: bytes, dial: Sequence[str]) -> PeerUnreachable | None:
    """A quick ``Has`` of ``endpoint`` (dialled at each of ``dial`` in turn; a ``HEAD`` of an
    object store's): the error if it cannot be reached within ``PROBE_SECONDS`` (down, or
    accepting connections and never answering), else None."""
    if is_url(endpoint):
        return probe_object(endpoint, digest, PROBE_SECONDS)
    silent = None
    for target in dial or [endpoint]:
        with _channel(endpoint, target, 0) as channel:  # a Has answers no bytes
            try:
                blob_pb2_grpc.BlobStub(channel).Has(blob_pb2.GetBlobRequest(hash=digest),
                                                    timeout=PROBE_SECONDS)  # fmt: skip
                return None
            except grpc.RpcError as err:
                if err.code() not in _UNREACHABLE:
                    return None
                silent = PeerUnreachable(f"{endpoint}: {err.details() or err.code()}")
    return silent


def fetch_from_peers(
    endpoints: list[str], digest: bytes, limit: int, attempts: int = ATTEMPTS,
    backoff: float = BACKOFF_SECONDS, out: BinaryIO | None = None, owner: str | None = None,
    last: str | None = None,
) -> bytes:  # fmt: skip
    """The first of ``endpoints`` that serves ``digest`` (hash-checked, at most ``limit``
    bytes): its bytes, or, given ``out`` (a file), streamed into it (then b"" is returned: a
    shard of a dataset need not fit in memory). Up to ``attempts`` passes over the peers, with
    exponential backoff between them; a peer that sent bad bytes is not asked again, and one
    slower than :data:`SLOW_RATE` is cut off and asked again after the others (but before
    ``last``, a peer asked after every other, peers that lately sent bad bytes included: one
    that may withhold), on every pass but the last, which waits on each.
    :class:`ArtifactError` says why each failed: :class:`PeerUnreachable` when ``owner`` (the
    endpoint of the host whose artifact it is) could not be reached, or is an object store
    that does not have it yet, whatever other peers answered (they say nothing of the owner:
    a hostile one could send bad bytes on purpose)."""
    sink = out if out is not None else io.BytesIO()
    errors: dict[str, ArtifactError] = {}
    left = [e for e in dict.fromkeys(endpoints) if location_problem(e) is None]  # never unix:…
    left = _suspects.last(left)  # peers that lately sent bad bytes after the others
    if last in left:  # and after them, the one that may withhold
        left.append(left.pop(left.index(last)))
    if owner in left:  # the owner first: the others' names are looked up only if it fails
        left.insert(0, left.pop(left.index(owner)))
    dial: dict[str, tuple[str, ...]] = {}

    def admit(checked: dict[str, tuple[tuple[str, ...], str | None]]) -> None:
        for endpoint, (targets, refused) in checked.items():
            dial[endpoint] = () if is_url(endpoint) else targets
            if refused is not None:
                errors[endpoint] = ArtifactError(refused)
                left.remove(endpoint)
            elif not targets and not is_url(endpoint):  # dialled by name, it could be anywhere
                errors[endpoint] = PeerUnreachable(f"{endpoint}: its name does not resolve")
                left.remove(endpoint)

    if owner in left:
        admit(_lookups.checked([owner]))  # bounded: its name's servers may never answer
    if owner in left and (silent := _unreachable(owner, digest, dial[owner])) is not None:
        errors[owner] = silent  # not asked again: a silent endpoint would hold every pass
        left.remove(owner)
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        for endpoint in list(left):
            if endpoint not in dial:  # past the owner: the rest are looked up, all at once
                admit(_lookups.checked([e for e in left if e not in dial]))
            if endpoint not in left:  # refused, or its name did not resolve
                continue
            try:
                fetch_artifact(endpoint, digest, limit, sink, dial[endpoint],
                               min_rate=SLOW_RATE if attempt < attempts - 1 else 0.0)  # fmt: skip
                return b"" if out is not None else sink.getvalue()
            # Too large, in a peer's word: no junk was sent, and it proves nothing (only this
            # machine's copy does: a hostile peer could say it of anything).
            except (PeerUnavailable, ArtifactTooLarge) as err:
                errors[endpoint] = err
                if isinstance(err, ArtifactTooLarge):
                    left.remove(endpoint)
                elif isinstance(err, PeerSlow):  # behind the others (but `last`) from now on
                    left.remove(endpoint)
                    before_last = last is not None and left[-1:] == [last]
                    left.insert(len(left) - 1 if before_last else len(left), endpoint)
            except ArtifactError as err:
                errors[endpoint] = err
                left.remove(endpoint)
                _suspects.add(endpoint)
            except Exception as err:  # one peer's oddity ends its part, not the fetch
                if isinstance(err, OSError) and err.errno in LOCAL_STORAGE_ERRNOS:
                    raise  # this machine's disk, no peer's fault
                errors[endpoint] = ArtifactError(f"{endpoint}: {type(err).__name__}: {err}")
                left.remove(endpoint)
        if not left:
            break
    tries = f" after {attempt + 1} tries" if attempt else ""
    # The owner down, or its object store without the artifact yet (a host uploads what it
    # reveals just after the reveal, which a window of a few blocks leaves no time for first).
    said = errors.get(owner)
    worth_waiting = isinstance(said, PeerUnreachable) or (
        owner is not None and is_url(owner) and isinstance(said, PeerUnavailable)
    )
    raise (PeerUnreachable if worth_waiting else ArtifactError)(
        f"artifact {digest.hex()[:16]}… is on no peer{tries} "
        f"({'; '.join(map(str, errors.values())) or 'no peers'})"
    )
