"""Merkle roots and proofs."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from dilochain.protocol.merkle import merkle_proof, merkle_root, verify_merkle_proof

LEAVES = st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40)


@given(LEAVES, st.data())
def test_every_proof_verifies(leaves, data):
    root = merkle_root(leaves)
    index = data.draw(st.integers(0, len(leaves) - 1))
    proof = merkle_proof(leaves, index)
    assert verify_merkle_proof(root, leaves[index], index, len(leaves), proof)


@given(LEAVES, st.data())
def test_wrong_leaf_index_or_proof_fails(leaves, data):
    root = merkle_root(leaves)
    index = data.draw(st.integers(0, len(leaves) - 1))
    proof = merkle_proof(leaves, index)
    other = hashlib.sha256(leaves[index]).digest()
    assert not verify_merkle_proof(root, other, index, len(leaves), proof)
    if len(leaves) > 1:
        wrong = (index + 1) % len(leaves)
        if leaves[wrong] != leaves[index]:
            assert not verify_merkle_proof(root, leaves[index], wrong, len(leaves), proof)
        assert not verify_merkle_proof(root, leaves[index], index, len(leaves), proof[:-1])
    assert not verify_merkle_proof(root, leaves[index], len(leaves), len(leaves), proof)


def test_known_shape():
    a, b, c = (bytes([i]) * 32 for i in range(3))
    leaf = lambda x: hashlib.sha256(b"\x00" + x).digest()  # noqa: E731
    inner = lambda x, y: hashlib.sha256(b"\x01" + x + y).digest()  # noqa: E731
    assert merkle_root([a, b, c]) == inner(inner(leaf(a), leaf(b)), leaf(c))
    assert merkle_root([a]) == leaf(a)
