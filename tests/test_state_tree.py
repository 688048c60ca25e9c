"""The state's sparse Merkle tree: its root is a function of the state alone (whatever the order
and batching of writes), agrees with a plain recursive definition, changes with any value, and
its ICS-23 proofs (existence and absence) verify under ICS-23's SmtSpec rules, and fail when
tampered with."""

from __future__ import annotations

import hashlib
import random

import pytest
from cosmpy.protos.cosmos.ics23.v1 import proofs_pb2 as ics23
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.chain.state_tree import EMPTY, StateTree, leaf_hash
from dilochain.protocol.state_proof import (
    ProofError,
    verify_membership,
    verify_non_membership,
)

keys = st.binary(min_size=1, max_size=12)
values = st.binary(min_size=1, max_size=8)
states = st.dictionaries(keys, values, max_size=40)


def reference_root(state: dict[bytes, bytes]) -> bytes:
    """The same tree by its definition: split the paths bit by bit, no caches, no positions."""

    def sha(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    leaves = sorted((int.from_bytes(sha(k), "big"), leaf_hash(k, v)) for k, v in state.items())

    def subtree(items, depth):
        if not items:
            return EMPTY
        if len(items) == 1:
            return items[0][1]
        bit = 255 - depth
        left = [i for i in items if not i[0] >> bit & 1]
        right = [i for i in items if i[0] >> bit & 1]
        return sha(b"\x01" + subtree(left, depth + 1) + subtree(right, depth + 1))

    return subtree(leaves, 0)


def _absent(tree: StateTree, state: dict[bytes, bytes], key: bytes) -> ics23.CommitmentProof:
    left, right = tree.neighbours(key)
    proof = ics23.NonExistenceProof(key=key)
    if left is not None:
        proof.left.CopyFrom(tree.existence(left, state[left]))
    if right is not None:
        proof.right.CopyFrom(tree.existence(right, state[right]))
    return ics23.CommitmentProof(nonexist=proof)


@given(states, st.lists(st.tuples(keys, st.one_of(st.none(), values)), max_size=40),
       st.integers(1, 7))  # fmt: skip
def test_the_root_depends_on_the_state_alone(start, writes, batch):
    tree = StateTree(start.items())
    state = dict(start)
    for first in range(0, len(writes), batch):
        chunk = dict(writes[first : first + batch])
        tree.update(chunk)
        for key, value in chunk.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    assert tree.root == StateTree(state.items()).root == reference_root(state)
    assert len(tree) == len(state)


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32))
def test_a_large_tree_updated_in_blocks_keeps_the_defined_root_and_proves(seed):
    """Thousands of paths (the sorted path list spans several of its internal sublists),
    inserted, changed and deleted over several blocks: the root is the definition's, and
    proofs of members and of absent keys still verify."""
    rng = random.Random(seed)
    state = {rng.randbytes(8): rng.randbytes(4) for _ in range(3000)}
    tree = StateTree(state.items())
    for _ in range(4):
        gone = rng.sample(sorted(state), 400)
        writes = {k: None for k in gone} | {rng.randbytes(8): b"new" for _ in range(600)}
        writes |= {k: b"changed" for k in rng.sample(sorted(state), 100)}
        tree.update(writes)
        state = {k: v for k, v in (state | writes).items() if v is not None}
        assert tree.root == reference_root(state) and len(tree) == len(state)
    for key in rng.sample(sorted(state), 20):
        verify_membership(ics23.CommitmentProof(exist=tree.existence(key, state[key])),
                          tree.root, key, state[key])  # fmt: skip
        absent = key + b"?"
        verify_non_membership(_absent(tree, state, absent), tree.root, absent)


@given(states.filter(bool), values)
def test_any_changed_value_changes_the_root(state, other):
    root = StateTree(state.items()).root
    for key, value in state.items():
        if value != other:
            assert StateTree({**state, key: other}.items()).root != root
    assert StateTree({**state, b"\xff" * 13: other}.items()).root != root


@settings(max_examples=60)
@given(states.filter(bool), st.lists(keys, max_size=10))
def test_existence_and_absence_proofs_verify(state, probes):
    tree = StateTree(state.items())
    root = tree.root
    for key, value in state.items():
        proof = ics23.CommitmentProof(exist=tree.existence(key, value))
        verify_membership(proof, root, key, value)
        with pytest.raises(ProofError):
            verify_membership(proof, root, key, value + b"x")
        with pytest.raises(ProofError):
            verify_non_membership(_absent(tree, state, key), root, key)  # it is there
    for key in probes:
        if key not in state:
            verify_non_membership(_absent(tree, state, key), root, key)


@given(states.filter(lambda s: len(s) >= 3), st.data())
def test_tampered_proofs_fail(state, data):
    tree = StateTree(state.items())
    key = data.draw(st.sampled_from(sorted(state)))
    proof = ics23.CommitmentProof(exist=tree.existence(key, state[key]))
    step = data.draw(st.integers(0, len(proof.exist.path) - 1))
    op = proof.exist.path[step]
    if op.suffix:
        op.suffix = bytes([op.suffix[0] ^ 1]) + op.suffix[1:]
    else:
        op.prefix = op.prefix[:1] + bytes([op.prefix[1] ^ 1]) + op.prefix[2:]
    with pytest.raises(ProofError):
        verify_membership(proof, tree.root, key, state[key])
    # A neighbour pair that is not adjacent (one leaf skipped) proves no absence.
    ordered = sorted(state, key=lambda k: hashlib.sha256(k).digest())
    gap = ics23.NonExistenceProof(key=b"?")
    gap.left.CopyFrom(tree.existence(ordered[0], state[ordered[0]]))
    gap.right.CopyFrom(tree.existence(ordered[2], state[ordered[2]]))
    between = [k for k in [b"?" * n for n in range(1, 200)]
               if hashlib.sha256(ordered[0]).digest() < hashlib.sha256(k).digest()
               < hashlib.sha256(ordered[2]).digest()]  # fmt: skip
    if between:
        gap.key = between[0]
        with pytest.raises(ProofError, match="not next to each other"):
            verify_non_membership(ics23.CommitmentProof(nonexist=gap), tree.root, between[0])


def test_an_empty_tree_and_one_leaf():
    assert StateTree().root == EMPTY
    tree = StateTree([(b"k", b"v")])
    assert tree.root == leaf_hash(b"k", b"v")
    proof = tree.existence(b"k", b"v")
    assert list(proof.path) == []
    verify_membership(ics23.CommitmentProof(exist=proof), tree.root, b"k", b"v")
    assert tree.update({b"k": None}) == EMPTY
