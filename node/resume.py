"""What a host keeps on disk to resume a run after a restart: its round, the hash of its global
state and its last round's checkpoint hashes (tensors live in the artifact store, addressed by
these hashes; its error-feedback residual is found from its last commit on the chain)."""

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
    checkpoint_hashes: list[bytes] = field(default_factory=list)

    def save(self, path: Path) -> None:
        """Write atomically (a crash leaves the old record or the new one)."""
        record = asdict(self)
        record["global_hash"] = self.global_hash.hex()
        record["checkpoint_hashes"] = [h.hex() for h in self.checkpoint_hashes]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ResumeState | None:
        """The record at ``path`` (None if there is none); an unreadable one is a NodeError."""
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            return cls(
                round=int(record["round"]),
                global_hash=bytes.fromhex(record["global_hash"]),
                attempted=int(record["attempted"]),
                checkpoint_hashes=[bytes.fromhex(h) for h in record["checkpoint_hashes"]],
            )
        except (ValueError, KeyError, TypeError) as err:
            raise NodeError(f"{path} is unreadable ({err!r}); move it away to resync") from None
