"""The pinned CometBFT binary: where it is, and how a chain node runs it."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

COMETBFT_VERSION = "v0.38.26"  # the v0.38 line is the one Cosmos SDK v0.50 runs on
_PR_SET_PDEATHSIG = 1


class CometMissing(Exception):
    """No cometbft binary could be found."""


def cometbft_binary() -> Path:
    """``$DILOCHAIN_COMETBFT``, else the one ``scripts/bootstrap.sh`` put beside this Python,
    else ``cometbft`` on PATH."""
    explicit = os.environ.get("DILOCHAIN_COMETBFT")
    if explicit:
        if not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
            raise CometMissing(f"DILOCHAIN_COMETBFT={explicit} is not an executable file")
        return Path(explicit)
    candidates = [Path(sys.prefix) / "bin" / "cometbft"]
    found = shutil.which("cometbft")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise CometMissing(
        f"the cometbft binary was not found: run ./scripts/bootstrap.sh (it installs CometBFT "
        f"{COMETBFT_VERSION}) or set DILOCHAIN_COMETBFT"
    )


def die_with_parent() -> None:
    """In a child process: be killed (SIGKILL) when the parent dies, even by ``kill -9``
    (Linux). Not SIGTERM: CometBFT stopping gracefully while its application is gone can hang
    for good in the middle of a block's commit (seen: a CI run left one holding its ports), and
    it is crash-safe anyway (its WAL, and ``kill -9`` of it is a tested fault)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def port_free(address: str) -> bool:
    """Whether ``host:port`` can be listened on now (with SO_REUSEADDR, as Go listens, so
    connections still in TIME_WAIT do not count)."""
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError:
            return False
    return True


def strip_scheme(laddr: str) -> str:
    """``tcp://127.0.0.1:26657`` -> ``127.0.0.1:26657``."""
    return laddr.split("://", 1)[-1]
