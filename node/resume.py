"""What a host keeps on disk to resume a run after a restart: its round, the hash of its global
state and the checkpoint hashes of the rounds it may still have to reveal (tensors live in the
artifact store, addressed by these hashes; its error-feedback residual is found from its last
commit on the chain), and the commit it made but has not seen decided."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from dilochain.artifacts.store import write_atomically
from dilochain.node.errors import NodeError
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitRound
from dilochain.protocol.pb.poc.v1.types_pb2 import Run


def state_file(state_dir: Path) -> Path:
    """Where a node keeps its resume record (:class:`ResumeState`)."""
    return state_dir / "state.json"


def _save_json(path: Path, record: dict) -> None:
    """Write ``record`` to ``path`` atomically and durably (a crash or a power loss leaves the
    old record or the new one)."""
    write_atomically(path, lambda out: out.write(json.dumps(record).encode()), sync=True)


class RecordDamaged(NodeError):
    """A resume record that does not read as one."""


@dataclass
class ResumeState:
    """The resume record of one host in one run."""

    round: int
    global_hash: bytes
    attempted: int  # the last round the host trained (committed or not)
    # Per round it trained (the last few): its checkpoint hashes, for its reveals.
    checkpoint_hashes: dict[int, list[bytes]] = field(default_factory=dict)
    # Which run this is a record of (:func:`run_instance`; empty in records written before).
    run: str = ""

    def save(self, path: Path) -> None:
        """Write atomically (a crash leaves the old record or the new one)."""
        record = asdict(self)
        record["global_hash"] = self.global_hash.hex()
        record["checkpoint_hashes"] = {
            str(r): [h.hex() for h in hashes] for r, hashes in self.checkpoint_hashes.items()
        }
        _save_json(path, record)

    @classmethod
    def load(cls, path: Path) -> ResumeState | None:
        """The record at ``path`` (None if there is none); raises :class:`RecordDamaged` for
        an unreadable one. A record written before hashes were kept per round holds the
        attempted round's."""
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            attempted, hashes = int(record["attempted"]), record["checkpoint_hashes"]
            if isinstance(hashes, list):
                hashes = {str(attempted): hashes} if hashes else {}
            return cls(
                round=int(record["round"]),
                global_hash=bytes.fromhex(record["global_hash"]),
                attempted=attempted,
                checkpoint_hashes={
                    int(r): [bytes.fromhex(h) for h in found] for r, found in hashes.items()
                },
                run=str(record.get("run", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise RecordDamaged(f"{path} is unreadable ({err!r})") from None


def run_instance(chain_id: str, run: Run) -> str:
    """What tells a run from another of the same id (a chain reset, or another chain of the same
    name): its chain's id, its creator and the height it was created at."""
    return f"{chain_id}/{run.run_id}@{run.created_height}/{run.creator}"


@dataclass
class PendingCommit:
    """A round's commit the committer made and has not yet seen decided: what a host restarted
    before sending it sends then (training the round again could not make the same bytes
    everywhere, and its reveals name these). ``named``: the objects published with it;
    ``stored``: the round's checkpoint objects, made durable before it is kept; ``previous``:
    what the round started from of the host's round before (empty: nothing)."""

    msg: MsgCommitRound
    named: list[bytes]
    stored: list[bytes]
    previous: list[bytes]

    def save(self, path: Path) -> None:
        """Write atomically."""
        record = {"msg": base64.b64encode(self.msg.SerializeToString()).decode(),
                  **{k: [h.hex() for h in getattr(self, k)]
                     for k in ("named", "stored", "previous")}}  # fmt: skip
        _save_json(path, record)

    @classmethod
    def load(cls, path: Path) -> PendingCommit | None:
        """The pending commit at ``path`` (None if none, or unreadable: a commit not resent
        is a round that did not count, not a reason to stay down)."""
        try:
            record = json.loads(path.read_text())
            return cls(MsgCommitRound.FromString(base64.b64decode(record["msg"])),
                       *([bytes.fromhex(h) for h in record[k]]
                         for k in ("named", "stored", "previous")))  # fmt: skip
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError, DecodeError):
            return None
