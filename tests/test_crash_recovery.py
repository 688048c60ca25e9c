"""kill -9 of the app or of CometBFT during a stream of txs: after a restart (CometBFT's
handshake replays what the app misses) every committed tx and app hash is intact."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc

from dilochain.chain.home import db_path
from dilochain.chain.state_tree import StateTree
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, signed_tx, wallet

pytestmark = [pytest.mark.integration, pytest.mark.wall_clock]


def _wait_gone(pid: int, patience: float = 60.0) -> None:
    deadline = time.monotonic() + patience
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline, f"CometBFT {pid} outlived its parent by {patience}s"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "Z"


@pytest.mark.parametrize("victim", ["app", "cometbft"])
def test_kill_9_loses_no_committed_tx(tmp_path, victim):
    sender, receiver = wallet(7), wallet(8)
    init_localnet(tmp_path, CHAIN_ID, {str(sender.address()): {DENOM: 10**12}})
    send = MsgSend(
        from_address=str(sender.address()),
        to_address=str(receiver.address()),
        amount=[Coin(denom=DENOM, amount="1")],
    )
    txs = [signed_tx(sender, [send], sequence=i, account_number=0) for i in range(400)]

    first = ChainProcess(tmp_path, block_time="100ms")
    channel = grpc.insecure_channel(first.start())
    txs_stub, tm_stub = tx_grpc.ServiceStub(channel), tm_grpc.ServiceStub(channel)
    sent: list[bytes] = []
    stop = threading.Event()

    def stream() -> None:
        for raw in txs:
            if stop.is_set():
                return
            try:
                request = tx_s.BroadcastTxRequest(tx_bytes=raw, mode=tx_s.BROADCAST_MODE_SYNC)
                if txs_stub.BroadcastTx(request, timeout=5).tx_response.code == 0:
                    sent.append(raw)
            except grpc.RpcError:
                return
            time.sleep(0.002)

    streamer = threading.Thread(target=stream)
    streamer.start()
    committed: dict[bytes, int] = {}
    app_hashes: dict[int, bytes] = {}
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        for raw in list(sent):
            digest = tx_hash(raw)
            if digest in committed:
                continue
            try:
                got = txs_stub.GetTx(tx_s.GetTxRequest(hash=digest.hex()), timeout=5)
            except grpc.RpcError:
                continue
            committed[digest] = got.tx_response.height
        header = tm_stub.GetLatestBlock(tm_q.GetLatestBlockRequest(), timeout=5).block.header
        app_hashes[header.height] = header.app_hash
    left: list[Path] = []  # the killed app's ABCI socket folder, which it could not remove
    if victim == "app":
        comet = first.cometbft_pid()
        first.kill()  # SIGKILL mid-stream; CometBFT follows its parent (PDEATHSIG)
        _wait_gone(comet)  # a loaded machine may take a while to stop it: its ports are held
        assert first.proc is not None
        left = list(Path(tempfile.gettempdir()).glob(f"dilochain-abci-{first.proc.pid}-*"))
        assert len(left) == 1
    else:
        os.kill(first.cometbft_pid(), signal.SIGKILL)
        assert first.proc is not None
        assert first.proc.wait(timeout=30) == 1  # the node stops, with an error, without it
    stop.set()
    streamer.join()
    channel.close()
    assert len(committed) > 20, "the stream should have committed txs before the crash"

    with ChainProcess(tmp_path, block_time="100ms") as second:
        assert not any(folder.exists() for folder in left)  # the next node removed it
        channel = grpc.insecure_channel(second.address)
        txs_stub, tm_stub = tx_grpc.ServiceStub(channel), tm_grpc.ServiceStub(channel)
        for digest, height in committed.items():
            got = txs_stub.GetTx(tx_s.GetTxRequest(hash=digest.hex()), timeout=5)
            assert got.tx_response.height == height
            assert got.tx_response.code == 0
        for height, app_hash in app_hashes.items():
            block = tm_stub.GetBlockByHeight(tm_q.GetBlockByHeightRequest(height=height))
            assert block.block.header.app_hash == app_hash
        latest = tm_stub.GetLatestBlock(tm_q.GetLatestBlockRequest()).block.header.height
        assert latest >= max(app_hashes)
        channel.close()


def _tamper(db: Path, key: bytes, value: bytes, consistent: bool) -> None:
    """Change one state value of a stopped node; ``consistent``: also set the app hash it
    committed to the new state's root (a node whose state is whole but not the network's)."""
    with sqlite3.connect(db) as con:
        con.execute("UPDATE state SET value = ? WHERE key = ?", (value, key))
        if consistent:
            rows = con.execute("SELECT key, value FROM state").fetchall()
            root = StateTree(rows).root
            con.execute("UPDATE meta SET value = ? WHERE key = 'app_hash'", (root,))


def _refused(home: Path) -> str:
    """Start the node; the error line it exits with."""
    cmd = [sys.executable, "-m", "dilochain.cli.main", "chain", "start", "--home", str(home),
           "--grpc-address", "127.0.0.1:0", "--rest-address", "127.0.0.1:0",
           "--block-time", "100ms"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert done.returncode == 1 and len(errors) == 1 and "Traceback" not in done.stderr, (
        done.stderr[-2000:]
    )
    return errors[0]


def test_a_damaged_store_is_refused_and_a_divergent_one_stops(tmp_path):
    """A flipped byte in a stopped node's supply: refused at start with one line naming the
    file. The same change with the app hash made to match it (a store that is whole but not
    the chain's): CometBFT's handshake finds it, and the node stops saying so."""
    init_localnet(tmp_path, CHAIN_ID, {str(wallet(7).address()): {DENOM: 10**12}})
    chain = ChainProcess(tmp_path, block_time="100ms")
    chain.start()
    chain.wait_for_height(3)
    assert chain.stop() == 0
    db = db_path(tmp_path)
    key = b"supply/" + DENOM.encode()
    _tamper(db, key, b"1000000000007", consistent=False)
    line = _refused(tmp_path)
    assert str(db) in line and "does not match the app hash" in line, line
    _tamper(db, key, b"1000000000007", consistent=True)
    line = _refused(tmp_path)
    assert "differs from the network's" in line and "AppHash" in line, line
