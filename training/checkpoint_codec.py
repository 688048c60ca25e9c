"""A checkpoint as stored: two objects and a 64-byte index, so a reader takes only what it needs.

A checkpoint (``train_step.InnerState.checkpoint``) is split into its *weights* — the round's
step, AdamW's step count and the parameters, all a screen or an aggregation reads — and its
*moments* — AdamW's two moments, 8 of a checkpoint's 12 bytes a parameter in fp32, read only
by a replay that starts from it. Each is a canonical state encoding (``tensor_codec``), stored
under its own content hash, and the checkpoint is named by the content hash of its index, the
weights' hash followed by the moments'. That name is the leaf the chain's Merkle root, final
hash, reveals and proofs already commit to, so nothing on the chain changes and the store stays
content-addressed: a reader fetches the index by the leaf, then the objects it names, each
checked against its hash as any artifact is. A host publishes a final checkpoint's index and
weights with its commit (what its screens read) and the moments only when a replay needs them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dilochain.protocol.hashing import HASH_BYTES, Buffer, content_hash
from dilochain.training.tensor_codec import CodecError, Encoding, decode_state, state_bound
from dilochain.training.train_step import EXP_AVG, EXP_AVG_SQ

INDEX_BYTES = 2 * HASH_BYTES
# An artifact's bytes by its hash, checked, of at most ``limit`` bytes (a store's get).
Fetch = Callable[..., bytes]
PutParts = Callable[[Sequence[Buffer], bytes], object]  # store bytes given as parts, by hash


def _is_moment(key: str) -> bool:
    return key.startswith((EXP_AVG, EXP_AVG_SQ))


@dataclass(frozen=True, eq=False)
class CheckpointEncoding:
    """A checkpoint's two encodings; its index and name (``digest``) follow from them."""

    weights: Encoding
    moments: Encoding

    @classmethod
    def of(cls, checkpoint: dict[str, torch.Tensor]) -> CheckpointEncoding:
        """Encode ``checkpoint`` (viewing its tensors: snapshot live state first)."""
        weights = {k: v for k, v in checkpoint.items() if not _is_moment(k)}
        moments = {k: v for k, v in checkpoint.items() if _is_moment(k)}
        return cls(Encoding.of(weights), Encoding.of(moments))

    @functools.cached_property
    def index(self) -> bytes:
        """The weights' content hash followed by the moments'."""
        return self.weights.digest() + self.moments.digest()

    def digest(self) -> bytes:
        """The checkpoint's name: the content hash of its index (a Merkle leaf)."""
        return content_hash(self.index)

    def hashes(self, moments: bool = True) -> list[bytes]:
        """Its weights' hash, with ``moments`` its moments', then its name (the index's hash)
        (:func:`checkpoint_objects` of a stored one)."""
        return _in_store_order(self.index, self.digest(), moments)

    def objects(self) -> list[tuple[tuple[Buffer, ...], bytes]]:
        """What to store, as (parts, content hash), in :meth:`hashes`' order."""
        return list(zip((self.weights.parts, self.moments.parts, (self.index,)), self.hashes(),
                        strict=True))  # fmt: skip

    def state(self) -> dict[str, torch.Tensor]:
        """The checkpoint decoded."""
        return {**decode_state(self.weights), **decode_state(self.moments)}

    def __len__(self) -> int:
        return len(self.weights) + len(self.moments) + INDEX_BYTES


def store_checkpoint(put_parts: PutParts, checkpoint: CheckpointEncoding) -> bytes:
    """Store each object of ``checkpoint`` with ``put_parts`` (a store's); its name."""
    for parts, digest in checkpoint.objects():
        put_parts(parts, digest)
    return checkpoint.digest()


def checkpoint_leaf(checkpoint: dict[str, torch.Tensor]) -> bytes:
    """The name of ``checkpoint`` (:meth:`CheckpointEncoding.digest`)."""
    return CheckpointEncoding.of(checkpoint).digest()


def index_objects(index: bytes) -> tuple[bytes, bytes]:
    """The (weights, moments) hashes an index names; raises :class:`CodecError` for bytes that
    are not an index."""
    if len(index) != INDEX_BYTES:
        raise CodecError(f"a checkpoint index is {INDEX_BYTES} bytes, not {len(index)}")
    return index[:HASH_BYTES], index[HASH_BYTES:]


def _in_store_order(index: bytes, leaf: bytes, moments: bool) -> list[bytes]:
    """The hashes a checkpoint is stored as, in the order to store or upload them, so a store
    that has its name has what it names: the weights, with ``moments`` the moments, then the
    name ``leaf`` (the hash of ``index``)."""
    weights, rest = index_objects(index)
    return [weights, rest, leaf] if moments else [weights, leaf]


def checkpoint_objects(fetch: Fetch, leaf: bytes, moments: bool = True) -> list[bytes]:
    """The hashes of what the stored checkpoint ``leaf`` is stored as, in store order (as
    :meth:`CheckpointEncoding.hashes`)."""
    return _in_store_order(fetch(leaf, limit=INDEX_BYTES), leaf, moments)


def checkpoint_limits(like: dict[str, torch.Tensor]) -> tuple[int, int]:
    """The most bytes a checkpoint's (weights, moments) of a model with tensors ``like`` can
    take (the two step counts fit the header's room)."""
    return state_bound(like), state_bound(like, copies=2)


def fetch_checkpoint(
    fetch: Fetch, leaf: bytes, moments: bool = True, like: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Checkpoint ``leaf`` decoded (without ``moments``: only its steps and parameters; with
    ``like``, the model's tensors, each object no larger than it can be and its header
    bounded); raises what ``fetch`` raises, and :class:`CodecError` for objects that are not a
    checkpoint's parts."""
    weights_hash, moments_hash = index_objects(fetch(leaf, limit=INDEX_BYTES))
    weights_limit, moments_limit = checkpoint_limits(like) if like is not None else (None, None)
    weights = decode_state(fetch(weights_hash, limit=weights_limit), like)
    if any(_is_moment(k) for k in weights):
        raise CodecError("a checkpoint's weights hold moments")
    if not moments:
        return weights
    rest = decode_state(fetch(moments_hash, limit=moments_limit), like)
    if not all(_is_moment(k) for k in rest):
        raise CodecError("a checkpoint's moments hold other tensors")
    return {**weights, **rest}
