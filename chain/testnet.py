"""Homes for a network of validators on this machine: one genesis, peers on loopback ports."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from dilochain.chain.home import (
    NodeConfig,
    genesis_path,
    init_home,
    listen_addresses,
    node_id,
    validator_of,
    write_config,
)
from dilochain.genesis.document import GenesisDoc, load_genesis, parse_genesis, save_genesis


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out as a connection's source port (Linux; else the
    IANA default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


_RANDOM = random.SystemRandom()
_ISSUED: set[int] = set()  # every port free_port returned in this process


def free_port() -> int:
    """A loopback TCP port that is free now, below the kernel's ephemeral range, and not one
    this process handed out before: a port written into a config is bound only later, so
    neither a connection's source port nor another config drawn meanwhile (two nodes of one
    testnet) may take it (found as "bind: address already in use" when a testnet node started
    after its peers)."""
    low = _ephemeral_low()
    # Not the global generator: a test that seeds it would make every call draw the same ports.
    candidates = [_RANDOM.randrange(max(1024, low - 20000), low) for _ in range(200)]
    for port in [*candidates, 0]:  # 0 last: all taken, any free one
        if port in _ISSUED:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = probe.getsockname()[1]
        _ISSUED.add(port)
        return port
    raise OSError("no free loopback port")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (:func:`free_port`)."""
    return [free_port() for _ in range(count)]


def loopback_config(moniker: str, block_time: str) -> NodeConfig:
    """A node's config with its RPC, P2P and CometBFT metrics on free loopback ports."""
    rpc, p2p, metrics = free_ports(3)
    return NodeConfig(
        moniker=moniker,
        rpc_address=f"127.0.0.1:{rpc}",
        p2p_address=f"127.0.0.1:{p2p}",
        cometbft_metrics_address=f"127.0.0.1:{metrics}",
        block_time=block_time,
    )


def node_homes(directory: Path) -> list[Path]:
    """The validator homes ``init_testnet`` wrote under ``directory``, in order."""
    homes = sorted(
        (p for p in directory.glob("node*") if genesis_path(p).exists()),
        key=lambda p: int(p.name.removeprefix("node") or 0),
    )
    return homes


def with_funds_and_params(
    doc: GenesisDoc, accounts: dict[str, dict[str, int]], overrides: dict[str, dict]
) -> GenesisDoc:
    """``doc`` with ``accounts`` funded and app params patched section by section."""
    for address, coins in accounts.items():
        doc = doc.with_account(address, coins)
    if overrides:
        data = doc.model_dump(mode="json")
        for section, values in overrides.items():
            data["app_state"]["params"][section].update(values)
        doc = parse_genesis(data, "genesis")
    return doc


def init_testnet(
    directory: Path,
    validators: int,
    chain_id: str,
    accounts: dict[str, dict[str, int]] | None = None,
    block_time: str = "1s",
    stakes: list[tuple[str, int]] | None = None,
    **param_overrides: dict,
) -> list[Path]:
    """Write ``validators`` homes ``directory/node0…`` sharing one genesis, each peering with
    all others on free loopback ports; returns the homes. With ``stakes`` (an operator and a
    self-bond per validator) the validator set is open, else closed."""
    if validators < 1:
        raise ValueError("a network needs at least one validator")
    homes, configs = [], []
    for index in range(validators):
        home = directory / f"node{index}"
        config = loopback_config(home.name, block_time)
        init_home(home, chain_id, overwrite=True, config=config)
        homes.append(home)
        configs.append(config)
    genesis = load_genesis(genesis_path(homes[0]))
    genesis = with_funds_and_params(genesis.with_validators([]), accounts or {}, param_overrides)
    reduction = genesis.params.validator_set.power_reduction
    staked = stakes or [("", 0)] * len(homes)
    members = zip(homes, staked, strict=True)
    genesis = genesis.with_validators([validator_of(h, h.name, operator, bond, reduction)
                                       for h, (operator, bond) in members])  # fmt: skip
    for home, config in zip(homes, configs, strict=True):
        save_genesis(genesis, genesis_path(home))
        config.persistent_peers = [
            f"{node_id(peer)}@{peer_config.p2p_address}"
            for peer, peer_config in zip(homes, configs, strict=True)
            if peer != home
        ]
        write_config(home, config)
    return homes


def rpc_address(home: Path) -> str:
    """The CometBFT RPC address of a home (``host:port``)."""
    return listen_addresses(home)[0]
