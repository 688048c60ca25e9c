"""Node training: encodings, compression, determinism, the outer step, data and artifacts."""

from __future__ import annotations

import errno
import hashlib
import io
import math
import os
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.artifacts import blob_service
from dilochain.artifacts.blob_service import (
    FETCHED_BYTES,
    SERVED_BYTES,
    PeerFetchingStore,
    PeerUnreachable,
    fetch_blob,
    fetch_from_peers,
    serve_blobs,
)
from dilochain.artifacts.store import ArtifactError, ArtifactTooLarge, LocalArtifactStore
from dilochain.chain.testnet import free_port
from dilochain.protocol.pb.node.v1 import blob_pb2, blob_pb2_grpc
from dilochain.testutil import NeverReads, shipped_data, until
from dilochain.training.checkpoint_codec import (
    CheckpointEncoding,
    checkpoint_leaf,
    fetch_checkpoint,
    store_checkpoint,
)
from dilochain.training.diloco import (
    CLIP_MULTIPLE,
    FIXED_BITS,
    PARAM,
    initial_global,
    outer_step,
    params_of,
    pseudo_gradient,
    round_start,
    stable_norm,
)
from dilochain.training.model import build_model
from dilochain.training.round_work import checkpoint_steps, train_round
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import CodecError, decode_state, encode_state, state_hash
from dilochain.training.train_step import (
    ADAM_STEP,
    EXP_AVG,
    EXP_AVG_SQ,
    STEP,
    load_inner_state,
    run_segment,
    set_deterministic,
)
from dilochain.verifier.replay import artifact_failure

DATA, PINS = shipped_data()
CFG = make_run_config(PINS, "tiny")
set_deterministic(1)

SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=3)
DTYPES = st.sampled_from([torch.float32, torch.float64, torch.int64, torch.int8, torch.bfloat16])


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z/._]{1,12}", fullmatch=True), st.tuples(SHAPES, DTYPES), max_size=4
    )
)
def test_tensor_codec_round_trip(spec):
    state = {k: (torch.randn(shape) * 10).to(dtype) for k, (shape, dtype) in spec.items()}
    data = encode_state(state)
    back = decode_state(data)
    assert sorted(back) == sorted(state)
    for k in state:
        assert back[k].dtype == state[k].dtype and torch.equal(back[k], state[k])
    assert encode_state(back) == data
    assert state_hash(state) == hashlib.sha256(data).digest()


def test_tensor_codec_is_key_order_independent_and_rejects_garbage():
    a = {"x": torch.ones(2), "y": torch.zeros(3)}
    assert encode_state(a) == encode_state(dict(reversed(list(a.items()))))
    data = encode_state(a)
    for bad in (b"nope", data[:-1], data + b"\x00", b"\xff" * 8 + data[8:], data[:8] + b"[]"):
        with pytest.raises(CodecError):
            decode_state(bad)


def _global():
    model = build_model(CFG.model_config, CFG.seed)
    return model, initial_global({n: p.detach().clone() for n, p in model.named_parameters()})


def test_rounds_are_deterministic_and_host_specific():
    model, g = _global()
    a = train_round(model, CFG, DATA, "dilo1host", 0, params_of(g), None)
    b = train_round(
        build_model(CFG.model_config, CFG.seed), CFG, DATA, "dilo1host", 0, params_of(g), None
    )
    assert a.ckpt_root == b.ckpt_root and a.pseudo_grad == b.pseudo_grad
    assert len(a.checkpoints) == len(checkpoint_steps(CFG)) == 3
    other = train_round(model, CFG, DATA, "dilo1other", 0, params_of(g), None)
    assert other.ckpt_root != a.ckpt_root and other.data_seed != a.data_seed
    assert a.tokens == CFG.inner_steps * CFG.batch_size * CFG.seq_len
    assert abs(a.loss - math.log(PINS.vocab_size)) < 0.5  # a fresh model: about uniform


def test_a_segment_replays_bit_exactly_from_its_start_checkpoint():
    model, g = _global()
    result = train_round(model, CFG, DATA, "dilo1host", 2, params_of(g), None)
    start = result.checkpoints[1].state()
    state = load_inner_state(build_model(CFG.model_config, 0), CFG, start)
    shards = DATA.shards_of(CFG.seed, "dilo1host")
    run_segment(state, CFG, DATA, shards, result.data_seed, 2, CFG.checkpoint_interval)
    assert checkpoint_leaf(state.checkpoint()) == result.checkpoint_hashes[2]


def test_outer_step_is_nesterov_sgd_on_the_mean():
    torch.manual_seed(1)
    theta = {"w": torch.randn(4, 3)}
    deltas = [{"w": torch.randn(4, 3)} for _ in range(3)]
    state = initial_global(theta)
    ours = outer_step(outer_step(state, deltas, 0.7, 0.9), deltas[:2], 0.7, 0.9)
    p = torch.nn.Parameter(theta["w"].clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    for batch in (deltas, deltas[:2]):
        p.grad = sum(d["w"] for d in batch) / len(batch)
        sgd.step()
    assert torch.allclose(ours["param/w"], p.detach(), atol=1e-6)
    assert outer_step(state, [], 0.7, 0.9)["param/w"].equal(theta["w"])
    assert pseudo_gradient({"w": torch.ones(2)}, {"w": torch.zeros(2)})["w"].equal(torch.ones(2))


def test_an_outsized_pseudo_gradient_moves_the_model_at_most_as_far_as_two_median_ones():
    """A pseudo-gradient 1,000 times longer than the others (consistent, screened by
    colluders, not sampled) enters the mean scaled to CLIP_MULTIPLE times the round's median
    length; the others, and a lone one, enter as they are."""
    torch.manual_seed(2)
    theta = {"w": torch.randn(8, 4), "b": torch.randn(4)}
    state = initial_global(theta)
    honest = [{k: 0.01 * torch.randn_like(v) for k, v in theta.items()} for _ in range(3)]
    poison = {k: 10.0 * torch.randn_like(v) for k, v in theta.items()}
    got = outer_step(state, [*honest, poison], 0.7, 0.9)
    median = sorted(stable_norm(d) for d in [*honest, poison])[1]
    scale = CLIP_MULTIPLE * median / stable_norm(poison)
    assert scale < 1e-2
    tamed = {k: v * scale for k, v in poison.items()}
    mean = {k: (sum(d[k] for d in honest) + tamed[k]) / 4 for k in theta}
    assert torch.allclose(got["param/w"], theta["w"] - 0.7 * 1.9 * mean["w"], atol=1e-7)
    moved = sum(float((got[f"param/{k}"] - theta[k]).norm() ** 2) for k in theta) ** 0.5
    unclipped = 0.7 * 1.9 * stable_norm(poison) / 4  # what the poison alone would have moved
    assert moved < 0.7 * 1.9 * (3 + CLIP_MULTIPLE) * median / 4 * 1.01 < unclipped / 50
    # honest rounds of similar lengths, and one host's round, are the plain Nesterov step
    plain = outer_step(state, honest, 0.7, 0.9)
    mean = {k: sum(d[k] for d in honest) / 3 for k in theta}
    assert torch.allclose(plain["param/w"], theta["w"] - 0.7 * 1.9 * mean["w"], atol=1e-7)
    alone = outer_step(state, [poison], 0.7, 0.9)
    assert torch.allclose(alone["param/b"], theta["b"] - 0.7 * 1.9 * poison["b"], atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=64), st.randoms())
def test_a_norm_is_the_same_in_any_order_of_its_values(values, rng):
    """Every party clips by the same norm: a pseudo-gradient's norm does not depend on the
    order its values are summed in (fixed-point integers), and is within sqrt(n) parts in
    2**FIXED_BITS of the exact one."""
    flat = torch.tensor(values, dtype=torch.float32)
    norm = stable_norm({"a": flat, "b": flat[:1]})
    order = list(range(len(values)))
    rng.shuffle(order)
    assert stable_norm({"b": flat[:1], "a": flat[order]}) == norm
    exact = math.sqrt(math.fsum(float(v) ** 2 for v in torch.cat([flat, flat[:1]])))
    assert abs(norm - exact) <= exact * math.sqrt(len(values) + 1) * 2.0**-FIXED_BITS
    assert stable_norm({"a": torch.zeros(3)}) == 0.0


def test_a_norm_chosen_to_sit_between_two_roundings_is_still_the_same_in_any_order():
    """A committed pseudo-gradient built so that float sums in two orders differ (one large
    value and a million tiny ones, which one order drops and another keeps) has one norm."""
    t = torch.zeros(1 << 20)
    t[0] = math.ldexp(600.5 / 1024, 1)
    t[4::4] = 2.0**-30
    assert stable_norm({"w": t}) == stable_norm({"w": t.flip(0)}) > 0


def test_an_overlapped_round_starts_one_eager_outer_step_ahead():
    """round_start: θ_{r-1} stepped by the host's own pseudo-gradient with the consensus
    momentum, p ← θ - lr·(Δ + β·(β·m + Δ)); θ_{r-1} itself without one."""
    torch.manual_seed(2)
    theta, momentum, own = torch.randn(5), torch.randn(5), torch.randn(5)
    base = {"param/w": theta, "momentum/w": momentum}
    start = round_start(base, {"w": own}, 0.7, 0.9)
    assert torch.allclose(start["w"], theta - 0.7 * (own + 0.9 * (0.9 * momentum + own)))
    assert round_start(base, None, 0.7, 0.9)["w"].equal(theta)


def test_batches_stay_in_their_shard_and_heldout_is_separate():
    batch = DATA.batch((3,), data_seed=42, step=5, batch=4, context=16)
    assert batch.shape == (4, 17) and batch.dtype == torch.int64
    assert torch.equal(batch, DATA.batch((3,), data_seed=42, step=5, batch=4, context=16))
    assert not torch.equal(batch, DATA.batch((3,), data_seed=42, step=6, batch=4, context=16))
    tokens = torch.from_numpy(DATA._open(DATA.manifest.shards[3]).astype("int64"))
    for row in batch:  # each window is a slice of shard 3
        assert any(torch.equal(tokens[s : s + 17], row) for s in range(len(tokens) - 16))
    heldout = DATA.heldout_batches(2, 4, 16)
    assert all(b.shape == (4, 17) for b in heldout)
    assert (batch < PINS.vocab_size).all() and all((b < PINS.vocab_size).all() for b in heldout)


def test_a_host_with_several_shards_draws_windows_from_all_of_them_only():
    shards = {i: torch.from_numpy(DATA._open(DATA.manifest.shards[i]).astype("int64").copy())
              for i in (1, 4)}  # fmt: skip

    def source(row: torch.Tensor) -> int:
        found = [i for i, tokens in shards.items()
                 if (tokens.unfold(0, 17, 1) == row).all(dim=1).any()]  # fmt: skip
        assert found, "a window from a shard the host does not own"
        return found[0]

    rows = torch.cat([DATA.batch((1, 4), 7, step, 8, 16) for step in range(8)])
    drawn = [source(row) for row in rows]
    assert set(drawn) == {1, 4}  # both shards are used


def test_local_store_checks_hashes(tmp_path):
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"checkpoint bytes")
    assert store.get(digest) == b"checkpoint bytes" and store.has(digest)
    path = tmp_path / digest.hex()[:2] / digest.hex()
    path.write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="corrupt"):
        store.get(digest)
    with pytest.raises(ArtifactError, match="not found"):
        store.get(b"\x00" * 32)


def test_a_put_rewrites_a_file_cut_short_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """After a power loss an unsynced artifact can come back empty: putting the same bytes
    again (a host retraining the round) writes it again instead of trusting its name. A write
    that fails (a full disk) leaves nothing behind."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"checkpoint bytes", sync=False)
    path = tmp_path / digest.hex()[:2] / digest.hex()
    path.write_bytes(b"")
    assert store.put(b"checkpoint bytes") == digest and store.get(digest) == b"checkpoint bytes"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        store.put(b"another artifact")
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [digest.hex()]


def test_a_blob_endpoint_is_dialled_at_the_address_its_check_saw(tmp_path, monkeypatch):
    """DNS rebinding: a name answers an allowed address to the check and another to the
    connection. The fetch dials the checked address itself, so gRPC never looks the name up:
    here the name resolves once (to this machine's blob service) and never again."""
    import socket

    served = LocalArtifactStore(tmp_path / "a")
    digest = served.put(b"the round's checkpoint")
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    port = int(endpoint.rsplit(":", 1)[1])
    lookups = []
    real = socket.getaddrinfo

    def once(host, *args, **kwargs):
        if host == "dual.example":  # ::1 first, as glibc answers localhost on most machines
            return real("::1", *args, **kwargs) + real("127.0.0.1", *args, **kwargs)
        if host != "rebinding.example":
            return real(host, *args, **kwargs)
        lookups.append(host)
        if len(lookups) > 1:
            raise socket.gaierror("answered only once")
        return real("127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(blob_service.socket, "getaddrinfo", once)
    try:
        assert blob_service.checked_dial(f"rebinding.example:{port}") == (
            (f"ipv4:127.0.0.1:{port}",), None)  # fmt: skip
        # A name with addresses of both families: the one the service does not listen on
        # (::1 here) is passed over for the other, as gRPC's own resolver would.
        assert blob_service.checked_dial(f"dual.example:{port}")[0] == (
            f"ipv6:[::1]:{port}", f"ipv4:127.0.0.1:{port}")  # fmt: skip
        dual = f"dual.example:{port}"
        assert fetch_from_peers([dual], digest, 1 << 20, owner=dual) == b"the round's checkpoint"
        lookups.clear()
        found = fetch_from_peers([f"rebinding.example:{port}"], digest, 1 << 20)
        assert found == b"the round's checkpoint" and lookups == ["rebinding.example"]
        # The next fetch dials the address checked then (kept a minute), never asking again.
        assert fetch_from_peers([f"rebinding.example:{port}"], digest, 1 << 20) == found
        assert lookups == ["rebinding.example"]
        monkeypatch.setattr(blob_service, "_lookups", blob_service._Lookups())  # forgotten
        with pytest.raises(ArtifactError, match="does not resolve"):
            fetch_from_peers([f"rebinding.example:{port}"], digest, 1 << 20, attempts=1)
    finally:
        server.stop(grace=0)


def test_unsynced_puts_are_readable_at_once_and_synced_later(tmp_path, monkeypatch):
    store = LocalArtifactStore(tmp_path / "store")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    digest = store.put(b"checkpoint bytes", sync=False)
    assert synced == [] and store.get(digest) == b"checkpoint bytes"
    (tmp_path / "data.bin").write_bytes(b"a dataset shard")
    linked = bytes(32)
    store.link_file(tmp_path / "data.bin", linked)
    store.sync([digest, linked, b"\x01" * 32])  # links and missing artifacts are skipped
    assert len(synced) == 2  # the file, then its folder


def test_an_artifact_several_threads_warm_at_once_is_fetched_once(tmp_path, monkeypatch):
    """A round's screens fetch its commits at once, and every commit names the round's global
    state: one fetch, the other threads wait for it and find it on disk."""
    fetches, started, release = [], threading.Event(), threading.Event()

    def fetch(peers, digest, limit, attempts=3, out=None, owner=None):
        fetches.append(digest)
        if digest == state:
            started.set()
            assert release.wait(30)
        out.write(b"global state")
        return b""

    monkeypatch.setattr(blob_service, "fetch_from_peers", fetch)
    monkeypatch.setattr(blob_service, "SHARED_FETCH_WAIT", 120.0)  # however slow the machine
    local = LocalArtifactStore(tmp_path / "v")
    digest = state = hashlib.sha256(b"global state").digest()
    other = bytes(32)
    stores = [PeerFetchingStore(local, lambda: ["peer:1"], 100) for _ in range(4)]
    threads = [threading.Thread(target=s.warm, args=(digest,)) for s in stores[:3]]
    threads[0].start()
    assert started.wait(30)
    for thread in threads[1:]:
        thread.start()
    stores[3].warm(other)  # another artifact is not held behind it
    release.set()
    for thread in threads:
        thread.join(30)
    assert sorted(fetches) == sorted([digest, other]) and local.get(digest) == b"global state"
    assert local._writers == {}


def test_a_full_disk_while_fetching_is_this_machine_s_failure_not_the_peer_s(tmp_path):
    """A verifier whose disk fills while it streams a host's artifact must not fail the host's
    screen: the write error is raised as itself, not as a peer's bad artifact."""
    served = LocalArtifactStore(tmp_path / "a")
    digest = served.put(b"x" * 100_000)
    server, endpoint = serve_blobs(served, "127.0.0.1:0")

    class FullDisk(io.BytesIO):
        def write(self, data) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    try:
        with pytest.raises(OSError, match="No space left"):
            fetch_from_peers([endpoint], digest, 100_000, out=FullDisk(), owner=endpoint)
    finally:
        server.stop(None)


def test_a_damaged_file_in_the_store_is_never_served_as_the_artifact(tmp_path, caplog):
    """A host's disk damaged a file after it was written: its blob service finds out while it
    streams, holds back the last chunk, removes the file and says so (DATA_LOSS), so the
    caller moves on and the operator learns of it; a file served whole once is not hashed
    again until it changes."""
    served = LocalArtifactStore(tmp_path / "a")
    big = bytes(range(256)) * 20_000  # several chunks
    digest = served.put(big)
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    try:
        assert fetch_from_peers([endpoint], digest, len(big)) == big
        path = served.file(digest)
        path.write_bytes(big[:-1] + b"\x00")  # the same size, one byte changed
        out = io.BytesIO()
        with pytest.raises(ArtifactError, match="damaged here"):
            fetch_blob(endpoint, digest, len(big), out)
        assert len(out.getvalue()) < len(big) and not served.has(digest)
        assert any("is damaged" in r.getMessage() for r in caplog.records)
    finally:
        server.stop(None)


def test_callers_that_never_read_cannot_lock_the_blob_service_out(tmp_path, monkeypatch):
    """Gets opened and never read held a serving thread each for ever: enough of them made an
    honest host unreachable to every verifier (its Has probe queued behind them) until it was
    slashed. Now Has has threads of its own, a Get beyond the streams waits a while for one
    (beyond the queue it is refused as busy, asked again), and a stream whose caller takes no
    chunk for a while is cut off."""
    monkeypatch.setattr(blob_service, "GET_STREAMS", 3)
    monkeypatch.setattr(blob_service, "QUEUED_GETS", 1)
    monkeypatch.setattr(blob_service, "QUEUE_SECONDS", 120.0)
    monkeypatch.setattr(blob_service, "SEND_IDLE_SECONDS", 1000.0)  # nobody cut off yet
    made, real = [], blob_service._Streams
    monkeypatch.setattr(blob_service, "_Streams", lambda *a: made.append(real(*a)) or made[-1])
    served = LocalArtifactStore(tmp_path / "a")
    big = os.urandom(96 << 20)  # more than any flow-control window takes unread
    digest = served.put(big)
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    channels, waited = [], []
    try:
        held = []
        for _ in range(3):  # a stranger's calls: each takes one chunk, then reads no more
            own = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own
            channels.append(grpc.insecure_channel(endpoint, options=own))
            call = blob_pb2_grpc.BlobStub(channels[-1]).Get(blob_pb2.GetBlobRequest(hash=digest))
            assert len(next(call).data) == blob_service.CHUNK
            held.append(call)
        stub = blob_pb2_grpc.BlobStub(channels[0])
        assert stub.Has(blob_pb2.GetBlobRequest(hash=digest), timeout=5).present
        queued = threading.Thread(target=lambda: waited.append(
            fetch_blob(endpoint, digest, len(big), io.BytesIO())))  # fmt: skip
        queued.start()
        deadline = time.monotonic() + 60
        while not made[0]._queued:  # an honest fetch waits in the queue ...
            assert time.monotonic() < deadline and queued.is_alive()
            time.sleep(0.05)
        with pytest.raises(grpc.RpcError) as busy:  # ... which is full now
            list(stub.Get(blob_pb2.GetBlobRequest(hash=digest), timeout=5))
        assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stub.Has(blob_pb2.GetBlobRequest(hash=digest), timeout=5).present
        monkeypatch.setattr(blob_service, "SEND_IDLE_SECONDS", 1.0)  # the stalled go
        queued.join(60)
        assert waited == [len(big)]  # served once a stalled stream was cut off
        for call in held:  # cut off by the service, not by the caller
            with pytest.raises(grpc.RpcError) as cut:
                list(call)
            assert cut.value.code() == grpc.StatusCode.CANCELLED
    finally:  # fmt: skip
        for channel in channels:
            channel.close()
        server.stop(None)


def test_one_caller_address_gets_a_few_streams_at_once():
    """A caller's address (an IPv6 /64: one machine's) may stream so many artifacts at once;
    this machine's own callers (a devnet's hosts and verifiers) are not capped apiece."""

    class Context:
        def __init__(self, peer: str):
            self.peer = lambda: peer
            self.cancel = lambda: None  # what the idle watch calls

    streams = blob_service._Streams()
    caps = blob_service.CALLER_STREAMS
    stranger = [Context(f"ipv6:[2001:db8::{i}]:{5000 + i}") for i in range(caps + 1)]
    others = [Context("ipv6:[2001:db8:0:1::1]:5000"), Context("ipv4:203.0.113.5:1")]
    local = [Context(f"ipv4:127.0.0.1:{6000 + i}") for i in range(caps + 1)]
    assert all(streams.admit(c) is not None for c in stranger[:caps])
    assert streams.admit(stranger[caps]) is None  # the same /64
    assert all(streams.admit(c) is not None for c in others)  # another /64, an IPv4 caller
    assert all(streams.admit(c) is not None for c in local)
    streams.close(stranger[0])
    assert streams.admit(stranger[caps]) is not None
    for context in [*stranger, *others, *local]:  # the idle watch ends with the last stream
        streams.close(context)


def test_blob_service_and_peer_fetch(tmp_path):
    served = LocalArtifactStore(tmp_path / "a")
    big = bytes(range(256)) * 20_000  # several chunks
    digest = served.put(big)
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    fetched, sent = FETCHED_BYTES._value.get(), SERVED_BYTES._value.get()
    try:
        out = io.BytesIO(b"left over from an earlier try")
        assert fetch_blob(endpoint, digest, len(big), out) == len(big) and out.getvalue() == big
        assert FETCHED_BYTES._value.get() - fetched == SERVED_BYTES._value.get() - sent == len(big)
        with pytest.raises(ArtifactError, match="more than the"):
            fetch_blob(endpoint, digest, len(big) - 1, out)  # an endless stream stops there
        with (tmp_path / "streamed").open("wb") as file:  # into a file, never all in memory
            assert fetch_from_peers([endpoint], digest, len(big), out=file) == b""
        assert (tmp_path / "streamed").read_bytes() == big
        mine = PeerFetchingStore(LocalArtifactStore(tmp_path / "b"), lambda: [endpoint], len(big))
        assert mine.get(digest) == big and mine.has(digest)
        warmed = PeerFetchingStore(LocalArtifactStore(tmp_path / "w"), lambda: [endpoint],
                                   len(big))  # fmt: skip
        warmed.warm(digest)  # streamed to disk, never whole in memory
        with pytest.raises(ArtifactError, match="on no peer"):
            warmed.warm(b"\x01" * 32)
        assert warmed.local.get(digest) == big and warmed.touched == {digest, b"\x01" * 32}
        assert [p.name for p in (tmp_path / "w").rglob("*") if p.is_file()] == [digest.hex()]
        with pytest.raises(ArtifactError, match="on no peer") as err:  # the host lacks it
            mine.get(b"\x01" * 32)
        assert not artifact_failure(err.value).unavailable
        dead = f"127.0.0.1:{free_port()}"
        down = PeerFetchingStore(LocalArtifactStore(tmp_path / "d"), lambda: [dead, endpoint],
                                 len(big), owner=dead)  # fmt: skip
        with pytest.raises(PeerUnreachable) as err:  # the owner restarting: asked again later
            down.get(b"\x01" * 32, attempts=1)  # (the other peer lacks it: that says nothing)
        assert artifact_failure(err.value).unavailable
        lacking = PeerFetchingStore(LocalArtifactStore(tmp_path / "e"), lambda: [endpoint, dead],
                                    len(big), owner=endpoint)  # fmt: skip
        with pytest.raises(ArtifactError) as err:  # the owner answered that it lacks it
            lacking.get(b"\x01" * 32, attempts=1)
        assert not artifact_failure(err.value).unavailable
        # A local copy damaged on disk is replaced by a peer's, not an error.
        (tmp_path / "b" / digest.hex()[:2] / digest.hex()).write_bytes(b"bit rot")
        assert mine.get(digest) == big and mine.local.get(digest) == big
        (tmp_path / "a" / digest.hex()[:2] / digest.hex()).write_bytes(b"evil")
        other = PeerFetchingStore(LocalArtifactStore(tmp_path / "c"), lambda: [endpoint], 1 << 30)
        with pytest.raises(ArtifactError) as err:
            other.get(digest)
        assert not other.has(digest)
        assert not artifact_failure(err.value).unavailable  # bad bytes are a verdict at once
        # Damaged here and nowhere intact: the error says both.
        (tmp_path / "b" / digest.hex()[:2] / digest.hex()).write_bytes(b"bit rot")
        with pytest.raises(ArtifactError, match=r"from .* is corrupt .*, and .* on no peer"):
            mine.get(digest, attempts=1)
    finally:
        server.stop(grace=0)


def test_the_blob_service_answers_garbage_and_malformed_hashes_in_kind(tmp_path):
    """Anyone can call a host's blob service: bytes that are no request, and hashes of any
    length, are INVALID_ARGUMENT (never INTERNAL, never a path outside the store)."""
    served = LocalArtifactStore(tmp_path / "a")
    digest = served.put(b"x")
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(endpoint) as channel:
            has = channel.unary_unary("/dilochain.node.v1.Blob/Has")  # raw bytes in and out
            get = channel.unary_stream("/dilochain.node.v1.Blob/Get")
            for call in (lambda b: has(b, timeout=10), lambda b: list(get(b, timeout=10))):
                with pytest.raises(grpc.RpcError) as err:
                    call(b"\xff\xff\xff")
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "does not decode" in err.value.details()
                for bad in (b"", b"\x01", b"\x02" * 33, b"\x03" * 100_000):
                    with pytest.raises(grpc.RpcError) as err:
                        call(blob_pb2.GetBlobRequest(hash=bad).SerializeToString())
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert "a hash is 32 bytes" in err.value.details()
            stub = blob_pb2_grpc.BlobStub(channel)
            assert stub.Has(blob_pb2.GetBlobRequest(hash=digest), timeout=10).present
    finally:
        server.stop(grace=0)


def _fetches_counted(monkeypatch) -> list[str]:
    """The endpoints ``fetch_blob`` is called for, in order, from now on."""
    asked: list[str] = []
    real = blob_service.fetch_blob

    def counted(endpoint, *args, **kwargs):
        asked.append(endpoint)
        return real(endpoint, *args, **kwargs)

    monkeypatch.setattr(blob_service, "fetch_blob", counted)
    return asked


def test_peer_fetches_retry_with_backoff_and_drop_bad_peers(tmp_path, monkeypatch):
    served = LocalArtifactStore(tmp_path / "a")
    data = b"a pseudo-gradient" * 1000
    digest = served.put(data)
    late = f"127.0.0.1:{free_port()}"  # a peer that comes up while the fetch backs off
    started = []
    timer = threading.Timer(0.1, lambda: started.append(serve_blobs(served, late)[0]))
    timer.start()
    try:
        assert fetch_from_peers([late], digest, len(data), attempts=4, backoff=0.2) == data
    finally:
        timer.join()
        for server in started:
            server.stop(grace=0)

    # A peer that sends bad bytes is asked once; one that is down is asked every pass.
    liar = LocalArtifactStore(tmp_path / "liar")  # other bytes under the hash
    liar.put(b"not it", digest)
    # A hostile peer's server serves what it has (an honest one withholds a damaged file).
    monkeypatch.setattr(blob_service.BlobServicer, "_damaged", lambda self, digest, context: None)
    server, bad = serve_blobs(liar, "127.0.0.1:0")
    asked = _fetches_counted(monkeypatch)
    down = f"127.0.0.1:{free_port()}"
    try:
        with pytest.raises(ArtifactError, match=r"on no peer after 3 tries \(.*corrupt.*; 127"):
            fetch_from_peers([bad, down], digest, len(data), backoff=0.01)
    finally:
        server.stop(grace=0)
    assert asked == [bad, down, down, down]


def test_a_peer_that_sent_bad_bytes_is_asked_after_the_others_by_later_fetches(
    tmp_path, monkeypatch
):
    """A peer that sent junk under a hash was dropped by the fetch it spoiled only: listed
    first, it made every later fetch download junk from it before an honest peer was asked."""
    served, liar = LocalArtifactStore(tmp_path / "a"), LocalArtifactStore(tmp_path / "liar")
    data = b"a pseudo-gradient" * 1000
    digest = served.put(data)
    liar.put(b"junk" * 4000, digest)
    monkeypatch.setattr(blob_service.BlobServicer, "_damaged", lambda self, digest, context: None)
    lying, bad = serve_blobs(liar, "127.0.0.1:0")
    honest, good = serve_blobs(served, "127.0.0.1:0")
    asked = _fetches_counted(monkeypatch)
    try:
        for _ in range(3):
            assert fetch_from_peers([bad, good], digest, 1 << 20) == data
        assert asked == [bad, good, good, good]
        monkeypatch.setattr(blob_service, "SUSPECT_SECONDS", 0.0)  # forgiven: asked first again
        assert fetch_from_peers([bad, good], digest, 1 << 20) == data
        assert asked[-2:] == [bad, good]
    finally:
        lying.stop(None)
        honest.stop(None)


def _lying_blobs(liar: LocalArtifactStore, one_message: bool = False, then=None):
    """A blob service that serves whatever its store holds under a name, of any size it was
    asked for (``one_message``: all in one message; ``then``: a status it ends with, as an
    excuse); (server, endpoint, bytes it sent)."""
    sent: list[int] = []

    class Lying(blob_service.BlobServicer):
        def _damaged(self, digest, context):
            return None  # it serves its junk as if it were the artifact

        def Get(self, request, context):
            unbounded = blob_pb2.GetBlobRequest(hash=request.hash)
            chunks = [chunk.data for chunk in super().Get(unbounded, context)]
            for data in [b"".join(chunks)] if one_message else chunks:
                sent.append(len(data))
                yield blob_pb2.BlobChunk(data=data)
            if then is not None:
                context.abort(then, "it is 10**12 bytes, more than asked for")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((Lying(liar).handler(),))
    endpoint = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    return server, endpoint, sent


def test_a_peer_answering_junk_for_an_index_sends_no_more_than_an_index_can_take(tmp_path):
    """A peer (a Sybil host or verifier among the sources) that answers a checkpoint's 64-byte
    index with junk was read up to the run's largest artifact before the hash was checked: 64
    GB at 8B parameters, once an hour for each of its names and each fetcher. A fetch now
    stops past what the kind of artifact asked for can take, and a channel takes no message
    larger than a chunk of it (gRPC receives a message whole, 4 MiB by default)."""
    checkpoint = {STEP: torch.tensor(4), ADAM_STEP: torch.tensor(4), PARAM + "w": torch.ones(999),
                  EXP_AVG + "w": torch.zeros(999), EXP_AVG_SQ + "w": torch.ones(999)}  # fmt: skip
    served, liar = LocalArtifactStore(tmp_path / "a"), LocalArtifactStore(tmp_path / "liar")
    leaf = store_checkpoint(served.put_parts, CheckpointEncoding.of(checkpoint))
    junk = 32 * blob_service.CHUNK  # far more than gRPC's flow control lets a server send ahead
    liar.put(b"junk" * (junk // 4), leaf)
    server, bad, sent = _lying_blobs(liar)
    honest, good = serve_blobs(served, "127.0.0.1:0")
    store = PeerFetchingStore(LocalArtifactStore(tmp_path / "c"), lambda: [bad, good], 1 << 30)
    small = LocalArtifactStore(tmp_path / "small")  # under gRPC's default largest message
    small.put(b"junk" * (3 * blob_service.CHUNK // 4), leaf)
    try:
        fetched = fetch_checkpoint(store.get, leaf, like={"w": torch.empty(999)})
        whole, at_once, _ = _lying_blobs(small, one_message=True)
        with pytest.raises(ArtifactError, match="more than the 64 bytes allowed, in one message"):
            fetch_blob(at_once, leaf, 64, io.BytesIO())
        whole.stop(grace=0)
    finally:
        server.stop(grace=0)
        honest.stop(None)
    assert all(torch.equal(fetched[k], v) for k, v in checkpoint.items())
    # It was asked and cut off at its first chunk: what the server counts as sent is what its
    # generator handed to gRPC, which runs up to its flow-control window (about 4 MiB here)
    # ahead of what the fetch read.
    assert 0 < sum(sent) <= 8 * blob_service.CHUNK < junk
    assert blob_service._suspects.last([bad, good]) == [good, bad]


def test_a_peer_s_word_that_an_artifact_is_too_large_proves_nothing(tmp_path):
    """A blob service says an artifact is larger than asked for before sending any of it, and
    is then no suspect (a commit may name a large artifact where a small one belongs). But
    only this machine's copy proves it: a peer that says it while the owner is down does not
    make the fetch give up as if it were so (a second review: a host's aggregation then
    stopped waiting for a restarting owner), and one that says it after sending bytes sent
    junk, and is a suspect."""
    served, liar = LocalArtifactStore(tmp_path / "a"), LocalArtifactStore(tmp_path / "liar")
    data = b"a pseudo-gradient" * 1000
    digest = served.put(data)
    liar.put(b"junk" * 4000, digest)
    claims, claiming, _ = _lying_blobs(LocalArtifactStore(tmp_path / "empty"),
                                       then=grpc.StatusCode.OUT_OF_RANGE)  # fmt: skip
    excuses, excusing, sent = _lying_blobs(liar, then=grpc.StatusCode.OUT_OF_RANGE)
    down = f"127.0.0.1:{free_port()}"
    try:
        with pytest.raises(ArtifactError) as raised:
            fetch_from_peers([claiming, down], digest, 1 << 20, backoff=0.01, owner=down)
        assert isinstance(raised.value, PeerUnreachable)  # worth waiting for the owner
        with pytest.raises(ArtifactError) as raised:
            fetch_from_peers([claiming, down], digest, 1 << 20, backoff=0.01)
        assert not isinstance(raised.value, ArtifactTooLarge)
        assert blob_service._suspects.last([claiming, down]) == [claiming, down]
        honest, good = serve_blobs(served, "127.0.0.1:0")
        assert fetch_from_peers([excusing, good], digest, 1 << 20) == data
        honest.stop(None)
    finally:
        claims.stop(grace=0)
        excuses.stop(grace=0)
    assert sent and blob_service._suspects.last([excusing, good]) == [good, excusing]


def test_a_caller_that_never_finishes_its_requests_holds_no_more_than_its_share(
    tmp_path, monkeypatch
):
    """Served as unary methods, Get and Has held a serving thread each from their first frame
    until their request came, counted nowhere: one connection of unfinished calls took every
    thread of an honest host's blob service, which then looked down to every verifier until
    its patience ended and the host was failed. They are admitted from their first frame now,
    an address's share at most (the rest refused at once), and cut off once idle."""
    monkeypatch.setattr(blob_service, "SEND_IDLE_SECONDS", 1.0)
    monkeypatch.setattr(blob_service, "PROBE_REQUEST_SECONDS", 1.0)
    served = LocalArtifactStore(tmp_path)
    data = b"an artifact" * 1000
    digest = served.put(data)
    server, endpoint = serve_blobs(served, "127.0.0.1:0", streams=4)  # 4 + 64 + 4 threads
    hog = NeverReads(endpoint)
    port = hog.sock.getsockname()[1]
    monkeypatch.setattr(
        blob_service,
        "caller_address",  # the hog is a stranger, all else another
        lambda peer: "203.0.113.5" if peer.endswith(f":{port}") else "192.0.2.9",
    )
    request = blob_pb2.GetBlobRequest(hash=digest).SerializeToString()
    try:
        for _ in range(100):
            for method in ("Get", "Has"):
                hog.ask(f"/dilochain.node.v1.Blob/{method}", request, finished=False)
        until(lambda: hog.read(quiet=0.1) or hog.refused() == 200 - blob_service.CALLER_STREAMS
               - blob_service.CALLER_PROBES)  # fmt: skip
        began = time.monotonic()
        assert fetch_blob(endpoint, digest, 1 << 20, io.BytesIO()) == len(data)
        with grpc.insecure_channel(endpoint) as channel:
            has = blob_pb2_grpc.BlobStub(channel).Has(blob_pb2.GetBlobRequest(hash=digest),
                                                      timeout=10)  # fmt: skip
        assert has.present and time.monotonic() - began < 10
        time.sleep(3)  # the hog's unfinished calls are cut off once idle: its share is free
        refused = hog.refused()
        for _ in range(blob_service.CALLER_STREAMS):
            hog.ask("/dilochain.node.v1.Blob/Get", request, finished=False)
        hog.read(quiet=1.0)
        assert hog.refused() == refused
    finally:
        hog.close()
        server.stop(None)


def test_a_caller_that_vanished_gives_back_its_streams_before_they_idle_out(tmp_path, monkeypatch):
    """A blob service pings its callers too (``protocol.server_options``): a fetcher gone
    without closing its connection held its address's streams until each idled out (30 s);
    the connection is closed once a ping goes unanswered."""
    from dilochain.protocol.server_options import server_options

    monkeypatch.setattr(blob_service, "server_options", lambda: server_options(1.0, 1.0))
    monkeypatch.setattr(blob_service, "caller_address", lambda peer: "203.0.113.5")  # one
    served = LocalArtifactStore(tmp_path)
    request = blob_pb2.GetBlobRequest(hash=served.put(b"an artifact")).SerializeToString()
    server, endpoint = serve_blobs(served, "127.0.0.1:0", streams=4)
    share, callers = blob_service.CALLER_STREAMS, []

    def refused_of_a_full_share(then_silent: bool) -> int:
        caller = NeverReads(endpoint)
        callers.append(caller)
        for _ in range(share + (2 if then_silent else 0)):
            caller.ask("/dilochain.node.v1.Blob/Get", request, finished=False)
        caller.read(quiet=0.5)  # answering pings meanwhile
        if not then_silent:
            caller.close()
        return caller.refused()

    try:
        assert refused_of_a_full_share(then_silent=True) == 2  # it holds its share, and goes
        began = time.monotonic()
        until(lambda: refused_of_a_full_share(then_silent=False) == 0, patience=20)
        assert time.monotonic() - began < blob_service.SEND_IDLE_SECONDS  # not idled out
    finally:
        for caller in callers:
            caller.close()
        server.stop(None)


def test_the_peer_asked_last_stays_last_behind_peers_that_sent_bad_bytes(tmp_path, monkeypatch):
    """``last`` (a committing host that may withhold) is asked after every other peer, those
    that lately sent bad bytes included: ordering it in the store and suspects in the fetch
    put it before them, and a slow peer then went behind it."""
    first, suspect, withholding = (f"127.0.0.1:{free_port()}" for _ in range(3))
    blob_service._suspects.add(suspect)
    store = PeerFetchingStore(LocalArtifactStore(tmp_path / "a"),
                              lambda: [withholding, suspect, first], 1 << 20)  # fmt: skip
    asked = _fetches_counted(monkeypatch)
    with pytest.raises(ArtifactError):
        store.get(b"\x01" * 32, attempts=1, last=withholding)
    assert asked == [first, suspect, withholding]


def test_peers_names_are_looked_up_only_past_the_owner_and_all_at_once(tmp_path, monkeypatch):
    """Every registered host's name was resolved, one after another, before a fetch asked its
    owner: a stranger's name whose servers never answer cost every fetch the resolver's
    timeout. The owner is asked first; the others are looked up only if it fails, together,
    for a bounded time."""
    real, looked_up = socket.getaddrinfo, []

    def resolver(host, *args, **kwargs):
        if str(host).endswith(".slow-dns.example"):  # an authoritative server that never answers
            looked_up.append(host)
            time.sleep(3)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(blob_service, "RESOLVE_SECONDS", 0.5)
    served = LocalArtifactStore(tmp_path / "a")
    data = b"an artifact" * 100
    digest = served.put(data)
    server, owner = serve_blobs(served, "127.0.0.1:0")
    hostile = [f"h{i}.slow-dns.example:9000" for i in range(6)]
    try:
        assert fetch_from_peers([*hostile, owner], digest, len(data), owner=owner) == data
        assert looked_up == []
        down = f"127.0.0.1:{free_port()}"
        started = time.monotonic()
        with pytest.raises(PeerUnreachable, match="does not resolve"):
            fetch_from_peers([*hostile, down], digest, len(data), owner=down, backoff=0.01)
        assert time.monotonic() - started < 9  # not 6 lookups of 3 s one after another (18 s)
        assert sorted(looked_up) == sorted(h.split(":")[0] for h in hostile)
    finally:
        server.stop(None)


def test_a_refused_peer_past_the_owner_is_never_dialled(tmp_path, monkeypatch):
    """Peers looked up together past the owner: each refused one (a loopback name on a chain
    reached over the internet) is left out, not dialled by name (which would let gRPC resolve
    it again, past the check), whichever of them led to the lookup."""
    from dilochain.protocol import endpoint

    served = LocalArtifactStore(tmp_path / "a")
    data = b"an artifact" * 100
    digest = served.put(data)
    server, address = serve_blobs(served, "127.0.0.1:0")
    monkeypatch.setattr(endpoint._PrivatePeers, "allowed", False)
    port = address.rsplit(":", 1)[1]
    try:
        with pytest.raises(ArtifactError, match="private or loopback") as refused:
            fetch_from_peers([f"nothing.invalid:{port}", f"localhost:{port}"], digest, len(data),
                             backoff=0.01)  # fmt: skip
        assert not isinstance(refused.value, PeerUnreachable)
    finally:
        server.stop(None)


def test_names_that_never_resolve_hold_no_other_lookup(tmp_path, monkeypatch):
    """A lookup hangs on a thread of its own, one at a time a name, and its answer is kept a
    while: eight hosts' names whose DNS never answers do not make a good name 'not resolve'
    (a pool of eight lookups did), nor are they looked up again by the next fetch."""
    real, looked_up = socket.getaddrinfo, []

    def resolver(host, *args, **kwargs):
        looked_up.append(host)
        if str(host).endswith(".hang.example"):
            time.sleep(10)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1" if host == "good.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(blob_service, "RESOLVE_SECONDS", 3.0)  # time enough on a busy machine
    monkeypatch.setattr(blob_service, "_lookups", blob_service._Lookups())
    served = LocalArtifactStore(tmp_path / "a")
    data = b"an artifact" * 100
    digest = served.put(data)
    server, address = serve_blobs(served, "127.0.0.1:0")
    good = f"good.example:{address.rsplit(':', 1)[1]}"
    hanging = [f"h{i}.hang.example:9000" for i in range(8)]
    try:
        assert fetch_from_peers([*hanging, good], digest, len(data)) == data
        assert fetch_from_peers([*hanging, good], digest, len(data)) == data
        assert looked_up.count("good.example") == 1 and looked_up.count("h0.hang.example") == 1
    finally:
        server.stop(None)


def test_an_owner_whose_name_never_resolves_holds_a_fetch_only_so_long(tmp_path, monkeypatch):
    """The owner's name was looked up on the fetching thread without a bound: a host whose
    registered name's DNS servers never answer held every fetch of its artifacts for the
    resolver's whole timeout before another peer was asked."""
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if str(host).endswith(".hang.example"):
            time.sleep(10)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(blob_service, "RESOLVE_SECONDS", 1.0)
    monkeypatch.setattr(blob_service, "_lookups", blob_service._Lookups())
    served = LocalArtifactStore(tmp_path / "a")
    data = b"an artifact" * 100
    digest = served.put(data)
    server, address = serve_blobs(served, "127.0.0.1:0")
    owner = "owner.hang.example:9000"
    try:
        began = time.monotonic()
        assert fetch_from_peers([owner, address], digest, len(data), owner=owner) == data
        assert time.monotonic() - began < 7  # its lookup's bound, not the resolver's 10 s
    finally:
        server.stop(None)


def test_a_name_that_failed_to_resolve_once_is_looked_up_again_soon(tmp_path, monkeypatch):
    """A resolver's passing failure is kept briefly, not the minute a found address is: the
    owner's host would otherwise look down to every fetch for a minute (a review)."""
    real, failures = socket.getaddrinfo, [1]

    def resolver(host, *args, **kwargs):
        if host == "flaky.example" and failures:
            failures.pop()
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1" if host == "flaky.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(blob_service, "_lookups", blob_service._Lookups())
    monkeypatch.setattr(blob_service, "UNRESOLVED_SECONDS", 0.2)
    served = LocalArtifactStore(tmp_path / "a")
    data = b"an artifact" * 100
    digest = served.put(data)
    server, address = serve_blobs(served, "127.0.0.1:0")
    owner = f"flaky.example:{address.rsplit(':', 1)[1]}"
    try:
        with pytest.raises(PeerUnreachable, match="does not resolve"):
            fetch_from_peers([owner], digest, len(data), attempts=1, owner=owner)
        time.sleep(0.3)
        assert fetch_from_peers([owner], digest, len(data), attempts=1, owner=owner) == data
    finally:
        server.stop(None)


def test_an_owner_that_accepts_connections_and_never_answers_is_passed_over(tmp_path, monkeypatch):
    """A host's endpoint that is black-holed (connections accepted, nothing answered) costs a
    fetch one short probe, not the stream's full deadline on every pass: its peers are asked,
    and without them the owner is unreachable (worth asking again), not "lacking" it."""
    import socket
    import time

    from dilochain.artifacts import blob_service

    monkeypatch.setattr(blob_service, "PROBE_SECONDS", 0.5)
    served = LocalArtifactStore(tmp_path / "a")
    digest = served.put(b"the round's checkpoint")
    server, endpoint = serve_blobs(served, "127.0.0.1:0")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes handshakes; nothing ever answers
        owner = f"127.0.0.1:{silent.getsockname()[1]}"
        try:
            began = time.monotonic()
            found = fetch_from_peers([owner, endpoint], digest, 1 << 20, owner=owner)
            assert found == b"the round's checkpoint"
            with pytest.raises(PeerUnreachable):
                fetch_from_peers([owner], digest, 1 << 20, owner=owner)
            assert time.monotonic() - began < 20  # the stream's own deadline is 60 s a pass
        finally:
            server.stop(grace=0)


def test_a_stream_that_goes_silent_is_cut_off_as_unreachable(tmp_path, monkeypatch):
    """A host's blob service that answers ``Has`` at once and then sends nothing of its
    ``Get``, or empty chunks, holds a fetch for ``IDLE_SECONDS``, not the deadline its
    artifacts' size allows (60 s plus a second a MiB, on every pass)."""
    import time

    served = LocalArtifactStore(tmp_path / "a")
    digest = served.put(b"x" * (3 << 20))
    empty = served.put(b"y" * (3 << 20))  # asked for this one, it sends empty chunks for ever
    released = threading.Event()

    class Stalling(blob_service.BlobServicer):
        def Get(self, request, context):
            chunks = super().Get(request, context)
            yield next(chunks)  # one chunk, then silence: nothing, or empty chunks
            while context.is_active() and not released.wait(0.1):
                if request.hash == empty:
                    yield blob_pb2.BlobChunk(data=b"")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((Stalling(served).handler(),))
    endpoint = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    monkeypatch.setattr(blob_service, "IDLE_SECONDS", 1.0)
    try:
        for asked in (digest, empty):
            began = time.monotonic()
            with pytest.raises(PeerUnreachable, match="sent nothing for 1 s"):
                fetch_blob(endpoint, asked, 1 << 30, io.BytesIO())
            assert time.monotonic() - began < 10
    finally:
        released.set()
        server.stop(grace=0)


def _serve_slowly(served: LocalArtifactStore, pause: float, before: float = 0.0):
    """A blob service that waits ``before`` seconds (a queue), then sends 64 KiB every
    ``pause`` seconds; (server, endpoint, bytes sent so far)."""

    sent: list[int] = []

    class Slow(blob_service.BlobServicer):
        def Get(self, request, context):
            time.sleep(before)
            for chunk in super().Get(request, context):
                for start in range(0, len(chunk.data), 64 << 10):
                    piece = chunk.data[start : start + (64 << 10)]
                    sent.append(len(piece))
                    yield blob_pb2.BlobChunk(data=piece)
                    time.sleep(pause)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((Slow(served).handler(),))
    endpoint = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    return server, endpoint, sent


def test_a_peer_that_drips_is_passed_over_for_the_next_and_still_waited_on_when_alone(
    tmp_path, monkeypatch
):
    """A peer that serves at a drip (here 256 KiB/s against a floor of 1 MiB/s) is cut off
    after a rate window while other peers are left, and asked after them, but before the one
    asked last (a committing host that may withhold); alone, it is waited on in the last pass.
    Before, it held each fetch for the deadline the run's largest artifact allows, on every
    pass, ahead of every honest peer listed after it."""
    served = LocalArtifactStore(tmp_path / "a")
    data = os.urandom(2 << 20)
    digest = served.put(data)
    server, drip, dripped = _serve_slowly(served, pause=0.25)
    honest, fair = serve_blobs(served, "127.0.0.1:0")
    monkeypatch.setattr(blob_service, "SLOW_RATE", 1 << 20)
    monkeypatch.setattr(blob_service, "RATE_WINDOW", 1.0)
    asked = _fetches_counted(monkeypatch)
    down, withholding = (f"127.0.0.1:{free_port()}" for _ in range(2))
    try:
        assert fetch_from_peers([drip, fair], digest, 1 << 30) == data
        assert asked == [drip, fair] and 0 < sum(dripped) < len(data)
        asked.clear()
        assert fetch_from_peers([drip, down, withholding], digest, 1 << 30, backoff=0.01,
                                last=withholding) == data  # fmt: skip
        # cut in the first two passes, each time moved behind `down` but not `withholding`
        assert asked == [drip, down, withholding, down, drip, withholding, down, drip]
    finally:
        server.stop(grace=0)
        honest.stop(grace=0)


def test_time_a_peer_keeps_a_fetch_waiting_before_its_first_bytes_is_no_slowness(
    tmp_path, monkeypatch
):
    """A busy host queues a Get before it streams it: the rate is measured from the first
    bytes on, so a stream that waited in the queue and then flows is not cut as slow."""
    served = LocalArtifactStore(tmp_path / "a")
    data = os.urandom(1 << 20)
    digest = served.put(data)
    server, queued, _ = _serve_slowly(served, pause=0.0, before=4.0)
    monkeypatch.setattr(blob_service, "SLOW_RATE", 32 << 10)  # one 64 KiB piece a window
    monkeypatch.setattr(blob_service, "RATE_WINDOW", 2.0)
    asked = _fetches_counted(monkeypatch)
    try:
        assert fetch_from_peers([queued], digest, 1 << 30, attempts=2, backoff=0.01) == data
        assert asked == [queued]  # never cut: asked once
    finally:
        server.stop(grace=0)


def test_a_round_that_diverged_says_so_and_an_honest_one_does_not():
    """A host commits no round whose parameters went to NaN or infinity (every verifier would
    fail it and the host be slashed for a broken optimiser, not a cheat): the round says so."""
    model, g = _global()
    assert train_round(model, CFG, DATA, "dilo1host", 0, params_of(g), None).finite
    wild = make_run_config(PINS, "tiny", inner_lr=1e3)
    diverged = train_round(build_model(wild.model_config, wild.seed), wild, DATA, "dilo1host", 0,
                           params_of(g), None)  # fmt: skip
    assert not diverged.finite and math.isnan(diverged.loss)
