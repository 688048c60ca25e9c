"""The chain node's ABCI socket folders: one left by a node killed before it could remove it
(SIGKILL, the OOM killer) is removed by the next node that starts on the machine; a live
node's never is."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from dilochain.chain import server


def test_a_killed_node_s_socket_folder_is_removed_and_a_live_one_s_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    names = {"killed": f"dilochain-abci-{gone}-k1x2", "live": f"dilochain-abci-{os.getpid()}-l3",
             "older": "dilochain-abci-0d9xcun", "other": f"someone-{gone}-else"}  # fmt: skip
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "abci.sock").touch()
    server._remove_stale_sockets()
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {names["live"], names["older"], names["other"]}
