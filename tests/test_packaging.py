"""The distribution installs one import name, ``dilochain``, and works outside the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def test_wheel_installs_only_the_dilochain_namespace(tmp_path):
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the work tree
    skip = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "tests")
    shutil.copytree(ROOT, source, ignore=skip)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("dilochain-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "dilochain",
        wheel.name.split("-py")[0] + ".dist-info",
    }
    modules = ["chain/app.py", "node/host.py", "training/model.py", "artifacts/store.py",
               "verifier/replay.py", "genesis/document.py",
               "protocol/merkle.py", "protocol/pb/poc/v1/tx_pb2.py", "cli/main.py",
               "dashboard/server.py", "dashboard/static/index.html",
               "dashboard/static/dashboard.js", "dashboard/static/dashboard.css"]  # fmt: skip
    for module in modules:
        assert f"dilochain/{module}" in names, module

    # A fresh venv with only the wheel; its dependencies come from this venv's site-packages
    # (PYTHONPATH does not run .pth files, so the editable install here is not seen).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run(
        [python, "-c", purelib], check=True, capture_output=True, text=True
    ).stdout.strip()
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import dilochain.chain.app, dilochain.training.model, dilochain.verifier.replay, "
             "dilochain.cli.main; print(dilochain.chain.app.__file__)")  # fmt: skip
    found = subprocess.run(
        [python, "-c", probe],
        check=True, capture_output=True, text=True, cwd=tmp_path,
        env={"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"},
    ).stdout.strip()  # fmt: skip
    assert found.startswith(site), found
