"""Four validators on CometBFT over loopback: blocks, txs to any validator, a validator killed
and restarted, and every application agreeing on the app hash."""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cosmpy.aerial.client import LedgerClient

from dilochain.chain.home import genesis_path, node_id, read_config
from dilochain.chain.server import ChainStartError
from dilochain.chain.testnet import (
    free_port,
    init_testnet,
    loopback_config,
    node_homes,
    rpc_address,
)
from dilochain.client import connect, network_config
from dilochain.genesis.document import load_genesis
from dilochain.localnet import ChainProcess, LocalNetwork, rpc_call
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, wallet

pytestmark = pytest.mark.integration
POLL = 0.1


def _header_app_hash(rpc_address: str, height: int) -> str:
    return rpc_call(rpc_address, "block", height=str(height))["block"]["header"]["app_hash"]


def _app_agrees(node, reference) -> None:
    """The node's application's last app hash is the one the network put in the next header."""
    info = rpc_call(node.rpc_address, "abci_info")["response"]
    height = int(info["last_block_height"])
    app_hash = base64.b64decode(info.get("last_block_app_hash", "")).hex().upper()
    reference.wait_for_height(height + 1)
    assert _header_app_hash(reference.rpc_address, height + 1) == app_hash, node.home.name


def test_a_nodes_ports_differ_and_do_not_follow_the_global_random_seed():
    configs = []
    for _ in range(2):
        random.seed(7)  # as pytest-randomly does before each test
        configs.append(loopback_config("n", "200ms"))
    ports = [c.rpc_address for c in configs] + [c.p2p_address for c in configs]
    ports += [c.cometbft_metrics_address for c in configs]
    assert len(set(ports)) == 6


def test_four_validators_survive_one_down_and_agree(tmp_path):
    senders = [wallet(300 + i) for i in range(4)]
    funded = {str(w.address()): {DENOM: 10**12} for w in senders}
    homes = init_testnet(tmp_path, 4, CHAIN_ID, funded, block_time="200ms")
    network = LocalNetwork(homes)
    try:
        addresses = network.start()
        nodes = network.nodes
        clients = [LedgerClient(network_config(CHAIN_ID, a)) for a in addresses]
        receiver = wallet(399).address()
        # A tx sent through each validator is committed, and every validator sees it.
        for client, sender in zip(clients, senders, strict=True):
            tx = client.send_tokens(receiver, 5, DENOM, sender).wait_to_complete(poll_period=POLL)
            assert tx.response.code == 0
        top = max(node.height() for node in nodes) + 1
        for node, client in zip(nodes, clients, strict=True):
            node.wait_for_height(top)
            assert client.query_bank_balance(receiver, DENOM) == 20, node.home.name

        # One validator down: the other three hold 3/4 > 2/3 of the power and keep committing.
        down = nodes[3]
        down.kill()
        stalled_at = nodes[0].height()
        tx = (
            clients[1]
            .send_tokens(receiver, 7, DENOM, senders[1])
            .wait_to_complete(poll_period=POLL)
        )
        assert tx.response.code == 0
        nodes[0].wait_for_height(stalled_at + 5)

        # Restarted, it catches up (CometBFT's block sync, replayed into the app).
        down.start(first_block=False)
        target = nodes[0].height()
        down.wait_for_height(target, timeout=120)
        # Its gRPC answers UNAVAILABLE until it is no longer catching up (a failover client,
        # as connect() gives, waits that out).
        restarted = connect(down.address, CHAIN_ID)
        assert restarted.query_bank_balance(receiver, DENOM) == 27

        # Every application's app hash is the one consensus recorded, at every height checked.
        for node in nodes:
            _app_agrees(node, nodes[0])
        for height in range(1, target + 1):
            hashes = {_header_app_hash(node.rpc_address, height) for node in nodes}
            assert len(hashes) == 1, f"validators disagree at height {height}: {hashes}"
    finally:
        network.stop()


def test_testnet_commands(tmp_path):
    directory = tmp_path / "net"
    base = [sys.executable, "-m", "dilochain.cli.main", "testnet"]
    init = subprocess.run([*base, "init", "--validators", "2", "--dir", str(directory),
                           "--block-time", "200ms"], capture_output=True, text=True)  # fmt: skip
    assert init.returncode == 0, init.stderr
    homes = node_homes(directory)
    assert [h.name for h in homes] == ["node0", "node1"]
    genesis = [load_genesis(genesis_path(h)) for h in homes]
    assert genesis[0] == genesis[1] and len(genesis[0].validators) == 2
    peers = read_config(homes[0])["p2p"]["persistent_peers"]
    assert peers == f"{node_id(homes[1])}@{read_config(homes[1])['p2p']['laddr'][6:]}"
    again = subprocess.run([*base, "init", "--dir", str(directory)], capture_output=True, text=True)
    assert (
        again.returncode == 1 and again.stderr.startswith("error: ") and "already" in again.stderr
    )

    up = subprocess.Popen([*base, "up", "--dir", str(directory)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lines = [up.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("node0: gRPC 127.0.0.1:"), (lines, lines[0] or up.stderr.read())
        assert "2 validators committing blocks" in lines[2], lines
        assert _height(homes[1]) >= 1
        # One validator killed: `up` says so, starts it again, and keeps the other running.
        os.kill(_chain_pid(homes[1]), signal.SIGKILL)
        said = [up.stdout.readline() for _ in range(2)]
        assert said[0].startswith("node1 stopped (killed by SIGKILL); starting it again"), said
        assert said[1].strip() == "node1 started again", said
        before = _height(homes[0])  # it started at once; its RPC comes up shortly
        deadline = time.monotonic() + 60
        while _height(homes[1]) <= before + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _height(homes[1]) > before + 2 and up.poll() is None
    finally:
        up.send_signal(signal.SIGINT)
        _, err = up.communicate(timeout=60)
    assert up.returncode == 0, err
    assert "Traceback" not in err


def _height(home: Path) -> int:
    """The node's latest height (0 while its RPC does not answer)."""
    try:
        return int(rpc_call(rpc_address(home), "status")["sync_info"]["latest_block_height"])
    except OSError:
        return 0


def _chain_pid(home: Path) -> int:
    """The pid of the ``chain start`` process serving ``home``."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"start" in cmdline and str(home).encode() in cmdline and b"chain" in cmdline:
                return int(proc.name)
    raise AssertionError(f"no chain process for {home}")


def test_free_ports_are_below_the_ephemeral_range_and_bindable():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in {free_port() for _ in range(20)}:
        assert 1024 <= port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))


def test_ports_drawn_before_any_is_bound_are_all_different():
    # Configs are written before their nodes bind: without a memory of what it handed out,
    # 400 draws from 20,000 ports repeat one (two testnet nodes on one port) 98 times in 100.
    drawn = [free_port() for _ in range(400)]
    assert len(set(drawn)) == len(drawn)


def test_a_node_that_exits_while_awaited_is_reported_with_its_error_at_once(tmp_path):
    # Not after the start timeout (a testnet once waited 120 s on a node long gone).
    node = ChainProcess(tmp_path / "no-home", log_path=tmp_path / "chain.log")
    with pytest.raises(ChainStartError) as raised:
        node.start(timeout=600)
    assert str(raised.value) == (
        f"no-home exited with code 1: error: no chain home at {tmp_path / 'no-home'} (run "
        f"`dilochain chain init --home {tmp_path / 'no-home'}` first) (log: {tmp_path}/chain.log)"
    )
