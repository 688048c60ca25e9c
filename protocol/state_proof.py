"""Checking the chain's ICS-23 state proofs (``abci_query`` with ``prove=true``) against an app
hash, as any Cosmos light client does: the rules of ICS-23 for its ``SmtSpec``, the sparse
Merkle tree the chain's state lives in (``dilochain.chain.state_tree``).

A query answered at height h is proven against the app hash in the header of block h + 1.
"""

from __future__ import annotations

import hashlib

from cosmpy.protos.cosmos.ics23.v1 import proofs_pb2 as ics23

PROOF_TYPE = "ics23:smt"  # ProofOp.type of a state proof
CHILD = 32
SMT_SPEC = ics23.ProofSpec(
    leaf_spec=ics23.LeafOp(hash=ics23.SHA256, prehash_key=ics23.SHA256,
                           prehash_value=ics23.SHA256, length=ics23.NO_PREFIX, prefix=b"\x00"),
    inner_spec=ics23.InnerSpec(child_order=[0, 1], child_size=CHILD, min_prefix_length=1,
                               max_prefix_length=1, empty_child=bytes(CHILD), hash=ics23.SHA256),
    max_depth=256,
    prehash_key_before_comparison=True,
)  # fmt: skip


class ProofError(ValueError):
    """A proof that does not prove what it is offered for."""


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _check_spec(proof: ics23.ExistenceProof) -> None:
    leaf, spec = proof.leaf, SMT_SPEC
    if leaf != spec.leaf_spec:
        raise ProofError("the leaf operation is not the SMT spec's")
    if len(proof.path) > spec.max_depth:
        raise ProofError(f"the path is deeper than {spec.max_depth}")
    inner = spec.inner_spec
    most = inner.max_prefix_length + (len(inner.child_order) - 1) * inner.child_size
    for op in proof.path:
        if op.hash != inner.hash:
            raise ProofError("an inner operation's hash is not the spec's")
        if op.prefix.startswith(spec.leaf_spec.prefix):
            raise ProofError("an inner operation's prefix is a leaf's")
        if not inner.min_prefix_length <= len(op.prefix) <= most:
            raise ProofError("an inner operation's prefix is not the spec's length")
        if len(op.suffix) % inner.child_size:
            raise ProofError("an inner operation's suffix is not whole children")


def calculate(proof: ics23.ExistenceProof) -> bytes:
    """The root an existence proof leads to (checked against the spec first)."""
    _check_spec(proof)
    if not proof.key or not proof.value:
        raise ProofError("a leaf needs a key and a value")
    node = _sha(proof.leaf.prefix + _sha(proof.key) + _sha(proof.value))
    for op in proof.path:
        node = _sha(op.prefix + node + op.suffix)
    return node


def verify_membership(proof: ics23.CommitmentProof, root: bytes, key: bytes, value: bytes) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows ``key`` holds ``value`` under ``root``."""
    if proof.WhichOneof("proof") != "exist":
        raise ProofError("not an existence proof")
    exist = proof.exist
    if exist.key != key or exist.value != value:
        raise ProofError("the proof is for another key or value")
    if calculate(exist) != root:
        raise ProofError("the proof does not lead to the root")


def verify_non_membership(proof: ics23.CommitmentProof, root: bytes, key: bytes) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows ``key`` is absent under ``root``: the
    keys on either side of where it would sit are neighbours in the tree."""
    if proof.WhichOneof("proof") != "nonexist":
        raise ProofError("not a non-existence proof")
    absent = proof.nonexist
    left = absent.left if absent.HasField("left") else None
    right = absent.right if absent.HasField("right") else None
    if left is None and right is None:
        raise ProofError("both neighbours are missing")
    for side in (left, right):
        if side is not None and calculate(side) != root:
            raise ProofError("a neighbour's proof does not lead to the root")
    where = _sha(key)
    if right is not None and not where < _sha(right.key):
        raise ProofError("the key is not left of the right neighbour")
    if left is not None and not _sha(left.key) < where:
        raise ProofError("the key is not right of the left neighbour")
    if left is None:
        ok = _leftmost(right.path)
    elif right is None:
        ok = _rightmost(left.path)
    else:
        ok = _neighbours(list(left.path), list(right.path))
    if not ok:
        raise ProofError("the neighbours are not next to each other in the tree")


def _padding(branch: int) -> tuple[int, int, int]:
    """(min prefix, max prefix, suffix) lengths of an inner operation whose child is the
    ``branch``-th."""
    inner = SMT_SPEC.inner_spec
    position = list(inner.child_order).index(branch)
    before = position * inner.child_size
    after = (len(inner.child_order) - 1 - position) * inner.child_size
    return before + inner.min_prefix_length, before + inner.max_prefix_length, after


def _has_padding(op: ics23.InnerOp, branch: int) -> bool:
    low, high, suffix = _padding(branch)
    return low <= len(op.prefix) <= high and len(op.suffix) == suffix


def _branch(op: ics23.InnerOp) -> int | None:
    return next((b for b in SMT_SPEC.inner_spec.child_order if _has_padding(op, b)), None)


def _left_empty(op: ics23.InnerOp) -> bool:
    """A right child whose left sibling is the empty subtree (a placeholder on a leftmost path)."""
    return _branch(op) == 1 and op.prefix[-CHILD:] == SMT_SPEC.inner_spec.empty_child


def _right_empty(op: ics23.InnerOp) -> bool:
    return _branch(op) == 0 and op.suffix == SMT_SPEC.inner_spec.empty_child


def _leftmost(path) -> bool:
    return all(_has_padding(op, 0) or _left_empty(op) for op in path)


def _rightmost(path) -> bool:
    return all(_has_padding(op, 1) or _right_empty(op) for op in path)


def _neighbours(left: list, right: list) -> bool:
    """Whether the leaf at the end of ``right`` (paths leaf to root) comes right after the one
    of ``left``: below their last common node one goes left, the other right, and from there
    the left path keeps to the right and the right one to the left."""
    while left and right and left[-1] == right[-1]:
        left.pop()
        right.pop()
    if not left or not right:
        return False
    top_left, top_right = left.pop(), right.pop()
    if _branch(top_left) != 0 or _branch(top_right) != 1:
        return False
    return _rightmost(left) and _leftmost(right)
