"""Artifacts in an S3-compatible object store, against a real S3 server (versitygw): published
with credentials, read by strangers without, refused while streaming when wrong."""

from __future__ import annotations

import errno
import io
import socket
import threading
import time

import pytest

from dilochain.artifacts import object_store
from dilochain.artifacts.blob_service import PeerFetchingStore, fetch_from_peers
from dilochain.artifacts.object_store import ObjectStore, fetch_object, probe_object
from dilochain.artifacts.store import (
    ArtifactError,
    ArtifactTooLarge,
    LocalArtifactStore,
    PeerUnavailable,
    PeerUnreachable,
)
from dilochain.local_s3 import LocalS3
from dilochain.protocol.endpoint import (
    allow_private_peers,
    location_problem,
    peer_refusal,
    private_switch_problem,
    settle_private_peers,
)
from dilochain.protocol.hashing import content_hash

pytestmark = pytest.mark.wall_clock  # asserts how long things take: see conftest


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with LocalS3(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def creds(s3, monkeypatch):
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return s3


HOST = "dlc1host"


def _store(s3: LocalS3, run: str = "run-a") -> ObjectStore:
    return ObjectStore(s3.url, run, HOST, endpoint=s3.endpoint)


def _file(tmp_path, data: bytes):
    local = LocalArtifactStore(tmp_path / "local")
    digest = local.put(data)
    return local.file(digest), digest


def test_published_artifacts_are_read_without_credentials_and_pruned(creds, tmp_path):
    store = _store(creds)
    store.check()  # writes and reads back its probe
    path, digest = _file(tmp_path, b"pseudo-gradient " * 1000)
    assert store.location == f"{creds.endpoint}/dilochain/runs/run-a/{HOST}"
    assert store.publish(path, digest) is True
    assert store.publish(path, digest) is False  # content-addressed: never twice
    assert store.has(digest)
    keys = [o["Key"] for o in creds.client().list_objects_v2(Bucket="dilochain")["Contents"]]
    assert f"runs/run-a/{HOST}/{digest.hex()}" in keys
    out = io.BytesIO()
    assert fetch_object(store.location, digest, 1 << 20, out) == 16000  # a plain GET
    assert out.getvalue() == b"pseudo-gradient " * 1000
    # A peer's fetch, by location, as for a blob service; kept locally afterwards.
    mine = LocalArtifactStore(tmp_path / "peer")
    peer = PeerFetchingStore(mine, lambda: [store.location], 1 << 20, owner=store.location)
    assert peer.get(digest) == b"pseudo-gradient " * 1000 and mine.has(digest)
    store.delete(digest)
    assert not store.has(digest)
    with pytest.raises(PeerUnavailable, match="not there"):
        fetch_object(store.location, digest, 1 << 20, io.BytesIO())
    # Its owner's store without it is worth asking again (a host uploads what it reveals just
    # after the reveal); another host's store without it is not.
    with pytest.raises(PeerUnreachable, match="not there"):
        fetch_from_peers([store.location], digest, 1 << 20, attempts=1, owner=store.location)
    with pytest.raises(ArtifactError, match="on no peer") as err:
        fetch_from_peers([store.location], digest, 1 << 20, attempts=1, owner="10.0.0.9:7000")
    assert not isinstance(err.value, PeerUnavailable)


def test_large_artifacts_go_up_in_parts_and_stream_down(creds, tmp_path, monkeypatch):
    monkeypatch.setattr(object_store, "PART_BYTES", 5 << 20)  # S3's smallest part
    store = _store(creds, "run-big")
    data = bytes(range(256)) * (11 << 12)  # 11 MiB: three parts
    path, digest = _file(tmp_path, data)
    store.publish(path, digest)
    head = creds.client().head_object(Bucket="dilochain", Key=f"runs/run-big/{HOST}/{digest.hex()}")
    assert head["ContentLength"] == len(data) and "-3" in head["ETag"]  # a multipart ETag
    sink = tmp_path / "fetched"
    with sink.open("wb") as out:
        fetch_from_peers([store.location], digest, len(data), out=out)
    assert content_hash(sink.read_bytes()) == digest


def test_uploads_a_killed_host_left_unfinished_are_aborted(creds, tmp_path):
    """A host killed in the middle of a multipart upload leaves its parts stored (and billed)
    for ever: a republish begins a new upload and a delete never sees them. Those under the
    host's own prefix older than a day are aborted when it prunes; a recent one (an upload
    in progress) and another host's are left alone."""
    store, other = _store(creds, "run-parts"), _store(creds, "run-parts-other")
    client = creds.client()

    def begun(prefix: str) -> str:
        key = f"{prefix}/{'ab' * 32}"
        upload = client.create_multipart_upload(Bucket="dilochain", Key=key)["UploadId"]
        client.upload_part(Bucket="dilochain", Key=key, UploadId=upload, PartNumber=1,
                           Body=b"p" * 1024)  # fmt: skip
        return upload

    mine, theirs = begun(store.prefix), begun(other.prefix)

    def unfinished() -> set[str]:
        found = client.list_multipart_uploads(Bucket="dilochain").get("Uploads", [])
        return {u["UploadId"] for u in found}

    assert store.abort_stale_uploads() == 0 and {mine, theirs} <= unfinished()  # recent
    assert store.abort_stale_uploads(older_than=0) == 1
    assert mine not in unfinished() and theirs in unfinished()
    assert other.abort_stale_uploads(older_than=0) == 1 and theirs not in unfinished()


def test_wrong_oversized_or_damaged_objects_are_refused(creds, tmp_path):
    store = _store(creds, "run-bad")
    path, digest = _file(tmp_path, b"x" * 5000)
    store.publish(path, digest)
    with pytest.raises(ArtifactError, match="more than the 4096"):
        fetch_object(store.location, digest, 4096, io.BytesIO())
    # An object whose bytes are not what its key says (a hostile or broken host).
    other = content_hash(b"what the chain committed")
    creds.client().put_object(Bucket="dilochain", Key=f"runs/run-bad/{HOST}/{other.hex()}",
                                Body=b"lie")  # fmt: skip
    with pytest.raises(ArtifactError, match="corrupt"):
        fetch_object(store.location, other, 1 << 20, io.BytesIO())
    # A damaged local copy is never uploaded.
    damaged_path, damaged = _file(tmp_path, b"checkpoint bytes")
    damaged_path.write_bytes(b"flipped bytes!!!")
    with pytest.raises(ArtifactError, match="does not hash"):
        store.publish(damaged_path, damaged)
    assert not store.has(damaged)


def test_a_misconfigured_store_is_one_clear_line(s3, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(ArtifactError, match="no S3 credentials: set AWS_ACCESS_KEY_ID"):
        _store(s3).check()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ArtifactError, match="SignatureDoesNotMatch"):
        _store(s3).check()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
    with pytest.raises(ArtifactError, match="NoSuchBucket"):
        ObjectStore("s3://no-such-bucket/p", "r", HOST, endpoint=s3.endpoint).check()
    # Written fine, but strangers cannot read it: not a public-read prefix.
    with pytest.raises(ArtifactError, match="public-read"):
        ObjectStore("s3://dilochain/private", "r", HOST, endpoint=s3.endpoint).check()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = ObjectStore(s3.url, "r", HOST, endpoint=f"http://127.0.0.1:{port}")
    with pytest.raises(ArtifactError, match="writing a test object"):
        down.check()
    assert isinstance(probe_object(down.location, b"\0" * 32, 1.0), PeerUnreachable)
    for bad in ("s3://UPPER/x", "s3://bucket/x\n", "https://bucket/x"):
        with pytest.raises(ArtifactError, match="an object store is s3://BUCKET"):
            ObjectStore(bad, "r", HOST)


def _dribbling_server(head: bytes, then_close: bool = False) -> tuple[str, threading.Event]:
    """A server that sends ``head`` at once, then a byte every 0.2 s for ever (until told), or
    (``then_close``) closes the connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            conn.recv(65536)
            try:
                conn.sendall(head)
                while not then_close and not stop.wait(0.2):
                    conn.sendall(b"x")
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/b", stop


def test_a_server_that_dribbles_is_cut_off_as_unreachable(monkeypatch):
    """A hostile location sending a byte now and then (in its headers or its body) holds a
    reader no longer than the fetch's deadline; what arrived is not called corrupt."""
    monkeypatch.setattr(object_store, "MIN_RATE", 1 << 30)  # deadline: the timeout, ~1 s
    digest = content_hash(b"anything")
    for head in (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"HTTP/1.1 200 OK\r\n"):
        url, stop = _dribbling_server(head)
        started = time.monotonic()
        with pytest.raises(PeerUnreachable, match="too slow"):
            fetch_object(url, digest, 1 << 20, io.BytesIO(), timeout=1.0)
        stop.set()
        assert time.monotonic() - started < 5


def test_one_peer_s_surprise_does_not_end_the_fetch(creds, tmp_path, monkeypatch):
    """Whatever one location raises is that location's failure; the next is asked."""
    store = _store(creds, "run-two")
    path, digest = _file(tmp_path, b"served by the second")
    store.publish(path, digest)
    real = object_store.fetch_object

    def odd(location, *args, **kwargs):
        if "surprise" in location:
            raise RuntimeError("a parser's surprise")
        return real(location, *args, **kwargs)

    monkeypatch.setattr("dilochain.artifacts.blob_service.fetch_object", odd)
    got = fetch_from_peers(["http://surprise.example/x", store.location], digest, 1 << 20)
    assert got == b"served by the second"


def test_a_connection_lost_mid_body_is_unreachable_not_corrupt():
    """A store that stops (killed, restarted) in the middle of a body: worth asking again.
    http.client's read(n) ends quietly on a closed connection; the length it declared says
    the body was cut short."""
    url, _ = _dribbling_server(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10,
                               then_close=True)  # fmt: skip
    with pytest.raises(PeerUnreachable, match="closed after 10 of 1000 bytes"):
        fetch_object(url, content_hash(b"anything"), 1 << 20, io.BytesIO(), timeout=5.0)


def test_a_body_of_no_declared_length_is_refused_before_it_is_read():
    """A body of no declared length ends when the connection closes, so junk could not be told
    from a body cut short: such a body from a Sybil's "object store" was asked again on every
    fetch and every pass, never a suspect. Object stores declare a GET's length (or chunk it,
    whose end is explicit): one that does not is refused before any byte is read. A
    Content-Length http.client cannot parse (a latin-1 superscript two) is no length, not a
    ValueError that ended the fetch (and ``node start``'s check) with a traceback."""
    data = b"y" * 1000
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
    for head in (close + b"\r\n", close + b"Content-Length: \xb2\r\n\r\n"):
        url, _ = _dribbling_server(head + data, then_close=True)
        out = io.BytesIO()
        with pytest.raises(ArtifactError, match="no declared length") as refused:
            fetch_object(url, content_hash(data), 1 << 20, out, timeout=5.0)
        assert not isinstance(refused.value, PeerUnavailable) and out.getvalue() == b""
    declared = close + f"Content-Length: {len(data)}\r\n\r\n".encode()
    url, _ = _dribbling_server(declared + data, then_close=True)
    out = io.BytesIO()
    assert fetch_object(url, content_hash(data), 1 << 20, out, timeout=5.0) == len(data)
    assert out.getvalue() == data
    url, _ = _dribbling_server(declared + data, then_close=True)
    with pytest.raises(ArtifactTooLarge, match="1000 bytes, more than the 999 it can be"):
        fetch_object(url, content_hash(data), 999, io.BytesIO(), timeout=5.0)


def test_the_reader_s_full_disk_is_its_own_error_not_the_store_s(creds, tmp_path):
    """ENOSPC writing what arrives is this machine's failing: raised as it is (a verifier then
    does not vote), never a store 'unreachable' that ends in a FAIL vote on an honest host."""
    store = _store(creds, "run-full")
    path, digest = _file(tmp_path, b"an honest host's artifact")
    store.publish(path, digest)

    class Full(io.BytesIO):
        def write(self, data) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        fetch_from_peers([store.location], digest, 1 << 20, out=Full(), owner=store.location)
    assert raised.value.errno == errno.ENOSPC and not isinstance(raised.value, ArtifactError)


def test_no_artifact_is_fetched_from_link_local_multicast_or_reserved_addresses(monkeypatch):
    """A location a stranger registers never steers a verifier at its cloud's metadata service
    (169.254.169.254) or other addresses no peer has: refused as written (and by the chain),
    as resolved, and as connected (a name may resolve differently by then)."""
    digest = content_hash(b"anything")
    for written in (
        "http://169.254.169.254/latest",
        "[fe80::1]:9000",
        "0.0.0.0:7000",
        "http://[::ffff:169.254.169.254]/x",
        "[ff02::1]:9",
        "240.0.0.1:80",
        "http://[fd00:ec2::254]/x",
        "100.100.100.200:80",
        "192.0.0.192:80",
    ):
        assert "link-local" in location_problem(written), written
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "metadata.internal":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr("dilochain.artifacts.blob_service.socket.getaddrinfo", resolver)
    started = time.monotonic()
    with pytest.raises(ArtifactError, match=r"leads to 169\.254\.169\.254") as refused:
        fetch_from_peers(["http://metadata.internal/latest/meta-data"], digest, 1 << 20)
    assert not isinstance(refused.value, PeerUnavailable) and time.monotonic() - started < 1


def test_private_and_loopback_peers_are_refused_on_a_chain_reached_over_the_internet():
    """On a public chain a location on a private network or loopback is a stranger steering a
    verifier at its own network: refused as resolved and as connected, unless the operator
    allows it; on a chain reached at such an address (a devnet, a LAN) it is fetched."""
    digest = content_hash(b"anything")
    try:
        for chain, allowed in ((["127.0.0.1:9090"], True), (["tcp://10.1.2.3:26657"], True),
                               (["[::1]:9090", "localhost:9091"], True),
                               (["100.101.1.2:9090"], True), (["node.example.com:9090"], False),
                               (["127.0.0.1:9090", "8.8.8.8:9090"], False)):  # fmt: skip
            allow_private_peers(None)
            settle_private_peers(chain)
            assert (peer_refusal("192.168.1.5") is None) == allowed, chain
        allow_private_peers(None)
        settle_private_peers(["127.0.0.1:9090"], "refuse")  # the operator's word wins
        assert "private or loopback" in peer_refusal("::ffff:10.0.0.1")
        assert peer_refusal("8.8.8.8") is None
        settle_private_peers(["8.8.8.8:9090"])  # settled once: a later chain changes nothing
        with pytest.raises(ArtifactError, match=r"leads to (127\.0\.0\.1|::1), a private or loop"):
            fetch_from_peers(["localhost:9"], digest, 1 << 20)
        url, stop = _dribbling_server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        with pytest.raises(ArtifactError, match=r"leads to 127\.0\.0\.1"):
            fetch_object(url, digest, 1 << 20, io.BytesIO(), timeout=5.0)
        stop.set()
    finally:
        allow_private_peers(None)
    assert private_switch_problem("auto") is None
    assert "allow, refuse or auto" in private_switch_problem("yes")
