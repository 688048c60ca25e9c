"""A checkpoint as stored: weights and moments apart, named by the hash of their index, so a
screen reads the weights alone and a replay everything, each object checked by its hash."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.artifacts.store import ArtifactError, LocalArtifactStore
from dilochain.protocol.hashing import content_hash
from dilochain.training.checkpoint_codec import (
    INDEX_BYTES,
    CheckpointEncoding,
    checkpoint_leaf,
    checkpoint_objects,
    fetch_checkpoint,
    index_objects,
    store_checkpoint,
)
from dilochain.training.diloco import PARAM
from dilochain.training.tensor_codec import CodecError, encode_state, state_hash
from dilochain.training.train_step import ADAM_STEP, EXP_AVG, EXP_AVG_SQ, STEP

NAMES = st.text(st.sampled_from("abz_.09"), min_size=1, max_size=8)


@st.composite
def checkpoints(draw) -> dict[str, torch.Tensor]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    seed = draw(st.integers(0, 2**31))
    generator = torch.Generator().manual_seed(seed)
    step = draw(st.integers(0, 1000))
    out = {STEP: torch.tensor(step), ADAM_STEP: torch.tensor(step + draw(st.integers(0, 99)))}
    for name in names:
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        for prefix in (PARAM, EXP_AVG, EXP_AVG_SQ):
            out[prefix + name] = torch.randn(shape, generator=generator)
    return out


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class CountingStore(LocalArtifactStore):
    """A local store that records which artifacts were read."""

    def __init__(self, root):
        super().__init__(root)
        self.read: list[bytes] = []

    def get(self, digest: bytes, limit: int | None = None) -> bytes:
        self.read.append(digest)
        return super().get(digest, limit)


@settings(max_examples=60, deadline=None)
@given(checkpoints())
def test_a_stored_checkpoint_reads_back_whole_or_as_weights(tmp_path_factory, checkpoint):
    store = CountingStore(tmp_path_factory.mktemp("store"))
    encoding = CheckpointEncoding.of(checkpoint)
    leaf = store_checkpoint(store.put_parts, encoding)
    weights, moments = index_objects(encoding.index)
    # its name is the hash of its index, which names the two encodings by their hashes
    assert leaf == checkpoint_leaf(checkpoint) == content_hash(weights + moments)
    assert store.get(leaf) == encoding.index and len(encoding.index) == INDEX_BYTES
    assert weights == state_hash({k: v for k, v in checkpoint.items() if PARAM in k or "step" in k})
    assert checkpoint_objects(store.get, leaf) == encoding.hashes() == [weights, moments, leaf]
    assert checkpoint_objects(store.get, leaf, moments=False) == [weights, leaf]
    assert _equal(fetch_checkpoint(store.get, leaf), checkpoint)
    assert _equal(encoding.state(), checkpoint)
    assert len(encoding) == sum(store.size(h) for h in encoding.hashes())

    store.read.clear()
    read = fetch_checkpoint(store.get, leaf, moments=False)
    assert set(read) == {STEP, ADAM_STEP} | {k for k in checkpoint if k.startswith(PARAM)}
    assert store.read == [leaf, weights]  # never the moments


def test_names_change_with_any_tensor_and_not_with_dict_order():
    checkpoint = {STEP: torch.tensor(3), ADAM_STEP: torch.tensor(3), PARAM + "w": torch.ones(2),
                  EXP_AVG + "w": torch.zeros(2), EXP_AVG_SQ + "w": torch.zeros(2)}  # fmt: skip
    leaf = checkpoint_leaf(checkpoint)
    assert checkpoint_leaf(dict(reversed(checkpoint.items()))) == leaf
    for key in checkpoint:
        changed = {**checkpoint, key: checkpoint[key] + 1}
        assert checkpoint_leaf(changed) != leaf, key


def test_objects_that_are_not_a_checkpoint_s_parts_are_refused(tmp_path):
    store = LocalArtifactStore(tmp_path)
    checkpoint = {STEP: torch.tensor(0), ADAM_STEP: torch.tensor(0), PARAM + "w": torch.ones(2),
                  EXP_AVG + "w": torch.zeros(2), EXP_AVG_SQ + "w": torch.zeros(2)}  # fmt: skip
    encoding = CheckpointEncoding.of(checkpoint)
    leaf = store_checkpoint(store.put_parts, encoding)
    weights, moments = index_objects(encoding.index)
    not_an_index = store.put(encode_state(checkpoint))  # a whole state where an index belongs
    swapped = store.put(moments + weights)  # moments where the weights belong
    twice = store.put(weights + weights)  # weights where the moments belong
    with pytest.raises(ArtifactError, match="392 bytes, more than the 64 it can be"):
        fetch_checkpoint(store.get, not_an_index)  # not even read: an index is 64 bytes
    for name, error in ((swapped, "weights hold moments"), (twice, "moments hold other tensors")):
        with pytest.raises(CodecError, match=error):
            fetch_checkpoint(store.get, name)
    assert _equal(fetch_checkpoint(store.get, leaf), checkpoint)
    store.delete(moments)  # a host that kept only what its screens read
    assert _equal(fetch_checkpoint(store.get, leaf, moments=False),
                  {k: v for k, v in checkpoint.items() if not k.startswith("exp_avg")})  # fmt: skip
    with pytest.raises(ArtifactError):
        fetch_checkpoint(store.get, leaf)


def test_a_challenged_host_publishes_whole_checkpoints_and_its_last_final(tmp_path):
    """What a host uploads for its challenged segments: each segment's start and end whole
    (the revealed ones once revealed), each checkpoint's index after what it names, and for
    segment 0 the whole final checkpoint of its last round, whose moments its commit left at
    home; a leaf it does not have is passed on as itself (``_publish`` says it is missing)."""
    from types import SimpleNamespace

    from dilochain.node.host import HostNode
    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, RoundCommit

    store = LocalArtifactStore(tmp_path)
    encodings = [CheckpointEncoding.of({STEP: torch.tensor(s), ADAM_STEP: torch.tensor(s),
                                        PARAM + "w": torch.full((2,), float(s)),
                                        EXP_AVG + "w": torch.zeros(2) + s,
                                        EXP_AVG_SQ + "w": torch.ones(2) * s})
                 for s in range(5)]  # fmt: skip
    leaves = [store_checkpoint(store.put_parts, e) for e in encodings]
    last_final = leaves[4]  # the host's round r-1 final checkpoint
    host = HostNode.__new__(HostNode)  # only what the uploads use
    host.local, host.address = store, "dilo1me"
    host.cfg = SimpleNamespace(run_id="r")
    host.poc = SimpleNamespace(commits=lambda run_id, round_: [
        RoundCommit(host="dilo1other", inner_in_hash=b"\1" * 32),
        RoundCommit(host="dilo1me", inner_in_hash=last_final),
    ])  # fmt: skip
    mine = [Challenge(segment=0), Challenge(segment=1, revealed=True, start_hash=leaves[1],
                                            end_hash=b"\2" * 32)]  # fmt: skip
    objects = host._challenged_objects(1, leaves[:4], mine)
    whole = [h for leaf in (leaves[0], leaves[1]) for h in checkpoint_objects(store.get, leaf)]
    assert objects == [*whole, *encodings[1].hashes(), b"\2" * 32, *encodings[4].hashes()]
    assert encodings[4].hashes()[1] in objects  # the carried moments go up with segment 0
    host.poc = SimpleNamespace(commits=lambda run_id, round_: pytest.fail("not asked"))
    assert host._challenged_objects(1, leaves[:4], mine[1:]) == [*encodings[1].hashes(), b"\2" * 32]


def test_an_object_missing_from_the_local_store_is_not_published(tmp_path, caplog):
    """A file gone from the host's store (pruned by another run, a damaged disk) is reported
    unpublished: a commit naming it is not sent, and the uploads of a challenged round ask
    again, never marking it done while the bucket lacks it."""
    from types import SimpleNamespace

    from dilochain.node.host import HostNode

    store = LocalArtifactStore(tmp_path)
    here = store.put(b"here")
    uploaded: list[bytes] = []
    host = HostNode.__new__(HostNode)
    host.local = store
    publish = lambda path, digest: uploaded.append(digest)  # noqa: E731
    host.objects = SimpleNamespace(published=set(), publish=publish)
    assert host._publish([here], "round 1's artifacts") and uploaded == [here]
    gone = b"\x03" * 32
    assert not host._publish([here, gone], "round 1's artifacts")
    assert any("not in the local store" in r.getMessage() for r in caplog.records)
    host.objects.published.add(gone)  # already up: nothing left to do
    assert host._publish([gone], "round 1's artifacts")
