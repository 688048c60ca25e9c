"""What a host keeps on disk to resume a run after a restart: its round, the hash of its global
state and the checkpoint hashes of the rounds it may still have to reveal (tensors live in the
artifact store, addressed by these hashes; its error-feedback residual is found from its last
commit on the chain)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dilochain.node.errors import NodeError


@dataclass
class ResumeState:
    """The resume record of one host in one run."""

    round: int
    global_hash: bytes
    attempted: int  # the last round the host trained (committed or not)
    # Per round it trained (the last few): its checkpoint hashes, for its reveals.
    checkpoint_hashes: dict[int, list[bytes]] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write atomically (a crash leaves the old record or the new one)."""
        record = asdict(self)
        record["global_hash"] = self.global_hash.hex()
        record["checkpoint_hashes"] = {
            str(r): [h.hex() for h in hashes] for r, hashes in self.checkpoint_hashes.items()
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ResumeState | None:
        """The record at ``path`` (None if there is none); an unreadable one is a NodeError. A
        record written before hashes were kept per round holds the attempted round's."""
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
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise NodeError(f"{path} is unreadable ({err!r}); move it away to resync") from None
