"""A writer killed mid-write (``kill -9``) leaves its temporary file; the next store opened on
the folder removes it once nothing has written to it for ``LEFTOVER_SECONDS``, and leaves alone
the file of a write still in progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dilochain.artifacts import store as store_module
from dilochain.artifacts.store import LocalArtifactStore, remove_leftovers

WRITER = """
import sys, time
from pathlib import Path
from dilochain.artifacts.store import LocalArtifactStore

store = LocalArtifactStore(Path(sys.argv[1]))

def fill(out):
    out.write(b"x" * 1_000_000)
    out.flush()
    print("writing", flush=True)
    time.sleep(600)  # killed here, mid-write

store.put_stream(bytes(32), fill, sync=False)
"""


def _killed_mid_write(root: Path) -> Path:
    """The temporary file a writer process left when it was killed with SIGKILL mid-write."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == b"writing\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    (left,) = root.glob("??/.*.part")
    return left


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_killed_writer_s_temporary_file_is_removed_when_a_store_opens(tmp_path):
    root = tmp_path / "artifacts"
    left = _killed_mid_write(root)
    assert left.stat().st_size == 1_000_000
    LocalArtifactStore(root)  # too recent: it may be a write in progress in another process
    assert left.exists()
    older = left.with_name(".tmp-abc123")  # an earlier version's put, killed the same way
    older.write_bytes(b"x" * 10)
    for path in (left, older):
        _age(path, store_module.LEFTOVER_SECONDS + 60)
    store = LocalArtifactStore(root)
    assert not left.exists() and not older.exists() and not store.has(bytes(32))
    assert store.total_bytes() == 0


def test_only_untouched_temporary_files_go(tmp_path):
    (tmp_path / ".a.json.x1.part").write_bytes(b"old")
    (tmp_path / ".b.json.x2.part").write_bytes(b"live")
    (tmp_path / "kept.json").write_bytes(b"data")
    _age(tmp_path / ".a.json.x1.part", store_module.LEFTOVER_SECONDS + 1)
    _age(tmp_path / "kept.json", store_module.LEFTOVER_SECONDS + 1)
    assert remove_leftovers(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.x2.part", "kept.json"]
