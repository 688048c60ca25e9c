"""``abci_query`` of a raw state key, as the Cosmos SDK answers ``/store/<store>/key``: path
``/store/main/key``, data the key; the answer holds its value at the latest committed height
and, with ``prove``, an ICS-23 proof of it (or of its absence) in the state's Merkle tree, to
check against the app hash in the header of the next block
(:mod:`dilochain.protocol.state_proof`)."""

from __future__ import annotations

from cosmpy.protos.cosmos.ics23.v1 import proofs_pb2 as ics23
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from cosmpy.protos.tendermint.crypto.proof_pb2 import ProofOp

from dilochain.chain.app import Application
from dilochain.chain.errors import codes
from dilochain.chain.query_router import failure
from dilochain.protocol.state_proof import PROOF_TYPE

STORE_PATH = "/store/main/key"
MAX_KEY = 4096


def state_proof(app: Application, key: bytes) -> ics23.CommitmentProof:
    """The proof of ``key``'s committed value, or of its absence."""
    value = app.store.peek(key)
    if value is not None:
        return ics23.CommitmentProof(exist=app.tree.existence(key, value))
    absent = ics23.NonExistenceProof(key=key)
    left, right = app.tree.neighbours(key)
    if left is not None:
        absent.left.CopyFrom(app.tree.existence(left, app.store.peek(left)))
    if right is not None:
        absent.right.CopyFrom(app.tree.existence(right, app.store.peek(right)))
    return ics23.CommitmentProof(nonexist=absent)


def query_key(app: Application, key: bytes, prove: bool) -> abci.ResponseQuery:
    """The answer to an ``abci_query`` of ``key`` at the latest committed height."""
    height = app.height
    if not key or len(key) > MAX_KEY:
        return failure(codes.INVALID_REQUEST, f"a state key is 1 to {MAX_KEY} bytes", height)
    answer = abci.ResponseQuery(code=0, key=key, value=app.store.peek(key) or b"", height=height)
    if prove:
        if app.finalizing:  # the tree is a block ahead of the store for a moment
            return failure(codes.CONFLICT, "a block is being committed; ask again", height)
        if len(app.tree) == 0:
            return failure(codes.NOT_FOUND, "the state is empty: nothing to prove", height)
        proof = state_proof(app, key)
        answer.proof_ops.ops.append(
            ProofOp(type=PROOF_TYPE, key=key, data=proof.SerializeToString())
        )
    return answer
