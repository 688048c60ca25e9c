"""Helpers for tests and benchmarks (as the Cosmos SDK's testutil): deterministic wallets, txs
signed offline by cosmpy, and an in-process chain driven block by block."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cosmpy.aerial.wallet import LocalWallet
from cosmpy.crypto.keypairs import PrivateKey
from google.protobuf.message import Message

from dilochain.chain.app import Application
from dilochain.chain.store import ChainStore
from dilochain.chain.testing import InProcessChain
from dilochain.client import sign_offline
from dilochain.genesis.document import GenesisDoc
from dilochain.protocol.address import ADDRESS_PREFIX
from dilochain.protocol.params import DENOM
from dilochain.training.run_config import Pins

if TYPE_CHECKING:
    from dilochain.training.dataset import Dataset

CHAIN_ID = "dilochain-test"
# Pins of a dataset nobody prepared: for chain-side tests, which never read the data.
FAKE_DATA = Pins("ab" * 32, "cd" * 32, 2048)


def wallet(seed: int) -> LocalWallet:
    """A deterministic test wallet."""
    return LocalWallet(PrivateKey(seed.to_bytes(32, "big")), prefix=ADDRESS_PREFIX)


def safetensors_declaring(shape: tuple[int, ...], data: bytes = b"\x00" * 4) -> bytes:
    """Crafted safetensors bytes: one float32 tensor ``x`` that declares ``shape`` over
    ``data`` (hostile-input tests and fuzz seeds)."""
    entry = {"dtype": "F32", "shape": list(shape), "data_offsets": [0, len(data)]}
    header = json.dumps({"x": entry}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def signed_tx(signer: LocalWallet, msgs: list[Message], **kwargs) -> bytes:
    """Raw tx bytes signed offline by cosmpy, for the test chain id unless given another."""
    return sign_offline(signer, msgs, **{"chain_id": CHAIN_ID, **kwargs})


def local_chain(tmp_path: Path, funded: dict[str, int], **params) -> InProcessChain:
    """An in-process chain over a fresh store in ``tmp_path`` with ``funded`` udlc balances.
    Its runs may ask any collateral (``min_host_collateral`` 1 unless ``poc`` says): unit tests
    count collateral in small numbers."""
    params = {**params, "poc": {"min_host_collateral": 1, **params.get("poc", {})}}
    app_state = {
        "accounts": [
            {"address": a, "coins": [{"denom": DENOM, "amount": n}]} for a, n in funded.items()
        ],
        "params": params,
    }
    genesis = GenesisDoc.model_validate({"chain_id": CHAIN_ID, "app_state": app_state})
    app = Application(ChainStore(tmp_path / "chain.db"), genesis)
    app.init_chain()
    return InProcessChain(app)


@functools.cache
def shipped_data() -> tuple[Dataset, Pins]:
    """The shipped default dataset (what hosts use without ``--data``), prepared once per
    process in a temporary folder, and the pins a run on it carries."""
    from dilochain.training.dataset import Dataset
    from dilochain.training.prepare import default_dataset, pins_of

    root = Path(tempfile.mkdtemp(prefix="dilochain-data-"))
    atexit.register(shutil.rmtree, root, True)
    folder = default_dataset(root)
    pins = pins_of(folder)
    return Dataset(folder, pins.manifest_hash, pins.tokenizer_hash), pins


def until(condition: Callable[[], object], patience: float = 30.0) -> None:
    """Wait until ``condition()`` is true, failing (AssertionError) after ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while not condition():
        assert time.monotonic() < deadline, f"not so after {patience:g} s"
        time.sleep(0.05)


class NeverReads:
    """An HTTP/2 gRPC caller that grants no window, so no answer's bytes ever reach it (a caller
    that never reads), and still sees which calls were refused (a trailers-only answer: headers,
    which flow control does not hold). Built on ``h2``."""

    def __init__(self, address: str):
        import h2.config
        import h2.connection
        import h2.settings

        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.sock.sendall(self.conn.data_to_send())
        self.status: dict[int, str] = {}  # grpc-status by stream, of calls answered at all
        self.started: set[int] = set()  # streams whose answer began (headers came)
        self.gone = False  # the server closed the connection (its pings went unanswered)

    def ask(self, path: str, request: bytes, finished: bool = True) -> None:
        """Call ``path`` (``/package.Service/Method``) with ``request``'s encoding (not
        ``finished``: its first half, the request never ended)."""
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers"),
        ])  # fmt: skip
        sent = request if finished else request[: len(request) // 2]
        self.conn.send_data(stream, b"\0" + struct.pack(">I", len(request)) + sent,
                            end_stream=finished)  # fmt: skip
        self.sock.sendall(self.conn.data_to_send())

    def read(self, quiet: float = 0.5) -> None:
        """Take the frames that came, until none comes for ``quiet`` seconds (acknowledging
        settings and pings, granting no window), or the server closed the connection (it
        pings a quiet one and closes it when the ack is late: a caller read too seldom, as
        one of many read in turn on a busy machine, is a vanished one)."""
        import h2.events
        import h2.exceptions

        self.sock.settimeout(quiet)
        while not self.gone:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return
            except OSError:  # reset
                data = b""
            if not data:
                self.gone = True
                return
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:  # frames after the server's GOAWAY
                self.gone = True
                return
            for event in events:
                if isinstance(event, h2.events.ConnectionTerminated):
                    self.gone = True
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    self.started.add(event.stream_id)
                    headers = dict(event.headers)
                    if b"grpc-status" in headers:
                        self.status[event.stream_id] = headers[b"grpc-status"].decode()
            try:
                self.sock.sendall(self.conn.data_to_send())
            except OSError:
                self.gone = True

    def answered(self, count: int, patience: float = 60.0) -> None:
        """:meth:`read` until ``count`` calls have had their answers begun (or been refused), or
        ``patience`` seconds have passed."""
        deadline = time.monotonic() + patience
        while len(self.started) < count and not self.gone and time.monotonic() < deadline:
            self.read(quiet=0.2)

    def held(self) -> int:
        """Calls whose answer began and never ended (what the node holds for this caller;
        none once it closed the connection)."""
        return 0 if self.gone else len(self.started - self.status.keys())

    def refused(self) -> int:
        """Calls answered ``RESOURCE_EXHAUSTED`` so far (as :meth:`read` saw)."""
        return sum(code == "8" for code in self.status.values())

    def close(self) -> None:
        """Go away with every answer unread."""
        self.sock.close()
