"""A chain home, laid out as CometBFT's: ``config/`` (genesis, keys, ``config.toml``) and ``data/``.

CometBFT reads ``config/config.toml``, ``config/genesis.json``, ``config/node_key.json``,
``config/priv_validator_key.json`` and ``data/priv_validator_state.json``; the application keeps
its state in ``data/chain.db`` beside CometBFT's databases.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Annotated

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from dilochain.chain.cometbft import strip_scheme
from dilochain.genesis.document import (
    GenesisDoc,
    GenesisValidator,
    PubKey,
    load_genesis,
    parse_genesis,
    save_genesis,
)
from dilochain.protocol.endpoint import endpoint_problem

VALIDATOR_POWER = 10


class HomeError(Exception):
    """A chain home that is missing or unusable."""


def _listen_address(text: str) -> str:
    problem = endpoint_problem(text)
    if problem is not None:
        raise ValueError(f"{text[:64]!r}: {problem}")
    return text


ListenAddress = Annotated[str, AfterValidator(_listen_address)]
OptionalListenAddress = Annotated[str, AfterValidator(lambda t: t and _listen_address(t))]


class NodeConfig(BaseModel):
    """The settings of ``config.toml`` that dilochain manages (CometBFT defaults the rest)."""

    model_config = ConfigDict(extra="forbid")

    moniker: str = "dilochain"
    rpc_address: ListenAddress = "127.0.0.1:26657"
    p2p_address: ListenAddress = "127.0.0.1:26656"
    # CometBFT's own Prometheus metrics (consensus rounds, peers, mempool); empty: off.
    cometbft_metrics_address: OptionalListenAddress = "127.0.0.1:26660"
    persistent_peers: list[str] = []
    block_time: str = "1s"  # consensus.timeout_commit
    timeout_propose: str = "1s"
    mempool_size: int = Field(default=100_000, gt=0)
    # Whether txs sent to this node are gossiped to its peers (CometBFT's mempool.broadcast;
    # off on a validator whose txs only reach it through its own sentries).
    mempool_broadcast: bool = True
    log_level: str = "info"
    # State sync: restore a snapshot from peers, trusting the block of `trust_height` (with
    # `trust_hash`, as the RPC servers below gave it when the home was made), instead of
    # replaying every block. Empty: block sync from genesis.
    state_sync_rpc: list[ListenAddress] = []
    trust_height: int = Field(default=0, ge=0)
    trust_hash: str = Field(default="", pattern=r"^([0-9A-F]{64})?$")


def genesis_path(home: Path) -> Path:
    """Where the home's genesis document lives."""
    return home / "config" / "genesis.json"


def db_path(home: Path) -> Path:
    """Where the home's application database lives."""
    return home / "data" / "chain.db"


def snapshots_path(home: Path) -> Path:
    """Where the application keeps the state-sync snapshots it serves."""
    return home / "data" / "snapshots"


def config_path(home: Path) -> Path:
    """CometBFT's ``config.toml``."""
    return home / "config" / "config.toml"


def _validator_key_path(home: Path) -> Path:
    return home / "config" / "priv_validator_key.json"


def _node_key_path(home: Path) -> Path:
    return home / "config" / "node_key.json"


def _private_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    os.chmod(path, 0o600)


def _ed25519_json(key: Ed25519PrivateKey) -> tuple[str, str]:
    """(private, public) in CometBFT's JSON: base64 of seed‖public and of public."""
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(seed + public).decode(), base64.b64encode(public).decode()


def _write_keys(home: Path) -> None:
    private, public = _ed25519_json(Ed25519PrivateKey.generate())
    pub_key = PubKey(value=public)
    _private_json(
        _validator_key_path(home),
        {
            "address": pub_key.address(),
            "pub_key": pub_key.model_dump(),
            "priv_key": {"type": "tendermint/PrivKeyEd25519", "value": private},
        },
    )
    state = {"height": "0", "round": 0, "step": 0}
    _private_json(home / "data" / "priv_validator_state.json", state)
    node_private, _ = _ed25519_json(Ed25519PrivateKey.generate())
    node_key = {"priv_key": {"type": "tendermint/PrivKeyEd25519", "value": node_private}}
    _private_json(_node_key_path(home), node_key)


def _read_key(path: Path, *fields: str) -> str:
    try:
        data = json.loads(path.read_text())
        for name in fields:
            data = data[name]
        return data
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HomeError(f"{path}: unreadable key file ({err})") from None


def validator_of(
    home: Path, name: str = "", operator: str = "", self_bond: int = 0, power_reduction: int = 1
) -> GenesisValidator:
    """The genesis-set entry of this home's validator key: staked by ``operator`` with
    ``self_bond`` (power = self_bond / power_reduction), or a closed set's member."""
    path = _validator_key_path(home)
    try:
        pub_key = PubKey(value=_read_key(path, "pub_key", "value"))
        power = self_bond // power_reduction if self_bond else VALIDATOR_POWER
        return GenesisValidator(address=pub_key.address(), pub_key=pub_key, power=power,
                                name=name, operator=operator, self_bond=self_bond)  # fmt: skip
    except ValidationError as err:
        raise HomeError(f"{path}: {err.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def consensus_private_key(home: Path) -> Ed25519PrivateKey:
    """This home's validator (consensus) key."""
    path = _validator_key_path(home)
    try:
        raw = base64.b64decode(_read_key(path, "priv_key", "value"), validate=True)
        return Ed25519PrivateKey.from_private_bytes(raw[:32])
    except ValueError as err:
        raise HomeError(f"{path}: unreadable key file ({err})") from None


def node_id(home: Path) -> str:
    """CometBFT's node id: hex of sha256(node public key)[:20]."""
    private = base64.b64decode(_read_key(_node_key_path(home), "priv_key", "value"))
    return hashlib.sha256(private[32:]).digest()[:20].hex()


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def _two_at_least(servers: list[str]) -> list[str]:
    """CometBFT's state sync wants two RPC servers to cross-check: one given serves as both."""
    return servers * 2 if len(servers) == 1 else servers


# A request body CometBFT's RPC takes: a tx goes to it base64-encoded in JSON, so its default
# (1 MB) refused txs of 740 kB to 1 MiB that the app takes (`max_tx_bytes`, 1 MiB, which is
# also CometBFT's mempool's own limit); a 1 MiB tx's body is ~1.4 MB.
RPC_MAX_BODY_BYTES = 3 << 20


def write_config(home: Path, config: NodeConfig) -> None:
    """Write ``config.toml`` (loopback-friendly p2p, kv tx index, fast blocks)."""
    sections: dict[str, dict[str, object]] = {
        "": {
            "moniker": config.moniker,
            "db_backend": "goleveldb",
            "log_level": config.log_level,
            "proxy_app": "tcp://127.0.0.1:26658",  # replaced at start by the app's own address
        },
        "rpc": {
            "laddr": f"tcp://{config.rpc_address}",
            "max_subscription_clients": 100,
            "max_body_bytes": RPC_MAX_BODY_BYTES,
        },
        "p2p": {
            "laddr": f"tcp://{config.p2p_address}",
            "persistent_peers": ",".join(config.persistent_peers),
            "addr_book_strict": False,  # peers on loopback addresses are fine
            "allow_duplicate_ip": True,
            "flush_throttle_timeout": "10ms",
        },
        "mempool": {
            "size": config.mempool_size,
            "cache_size": config.mempool_size,
            "broadcast": config.mempool_broadcast,
        },
        "consensus": {
            "timeout_propose": config.timeout_propose,
            "timeout_commit": config.block_time,
            "create_empty_blocks": True,
            "peer_gossip_sleep_duration": "10ms",
        },
        "statesync": {
            "enable": bool(config.state_sync_rpc),
            "rpc_servers": ",".join(f"http://{a}" for a in _two_at_least(config.state_sync_rpc)),
            "trust_height": config.trust_height,
            "trust_hash": config.trust_hash,
            # Under the time a departed validator's bond stays slashable (release_seconds,
            # 48 h by default), as light clients need: a key whose bond is gone could sign a
            # fork for nothing.
            "trust_period": "32h0m0s",
            "discovery_time": "5s",
        },
        "tx_index": {"indexer": "kv"},
        "instrumentation": {
            "prometheus": bool(config.cometbft_metrics_address),
            "prometheus_listen_addr": config.cometbft_metrics_address,
        },
    }
    lines = ["# Written by dilochain; CometBFT's defaults apply to every key not listed."]
    for section, values in sections.items():
        if section:
            lines.append(f"\n[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def read_config(home: Path) -> dict:
    """``config.toml`` as a dict (for the addresses a start needs)."""
    try:
        return tomllib.loads(config_path(home).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise HomeError(f"{config_path(home)}: unreadable ({err})") from None


def listen_addresses(home: Path) -> tuple[str, str]:
    """CometBFT's RPC and P2P listen addresses (``host:port``) from ``config.toml``."""
    config, defaults = read_config(home), NodeConfig()
    found = []
    for section, default in (("rpc", defaults.rpc_address), ("p2p", defaults.p2p_address)):
        address = strip_scheme(str(config.get(section, {}).get("laddr", default)))
        problem = endpoint_problem(address)
        if problem is not None:
            raise HomeError(f"{config_path(home)}: [{section}] laddr {address[:64]!r}: {problem}")
        found.append(address)
    return found[0], found[1]


def init_home(
    home: Path, chain_id: str, overwrite: bool = False, config: NodeConfig | None = None,
    operator: str = "", self_bond: int = 0,
) -> GenesisDoc:  # fmt: skip
    """Create a home: keys, ``config.toml`` and a genesis whose one validator is this node
    (staked by ``operator`` with ``self_bond``: an open validator set; else a closed one)."""
    if genesis_path(home).exists() and not overwrite:
        raise HomeError(f"{home} already holds a chain (genesis.json exists); pass --overwrite")
    shutil.rmtree(home / "data", ignore_errors=True)  # blocks and state of the chain replaced
    _write_keys(home)
    write_config(home, config or NodeConfig(moniker=home.name or "dilochain"))
    doc = parse_genesis({"chain_id": chain_id}, "chain id")
    reduction = doc.params.validator_set.power_reduction
    doc = doc.with_validators([validator_of(home, home.name, operator, self_bond, reduction)])
    save_genesis(doc, genesis_path(home))
    return doc


def load_home(home: Path) -> GenesisDoc:
    """The genesis of an initialised home (its keys checked readable)."""
    if not genesis_path(home).exists():
        raise HomeError(f"no chain home at {home} (run `dilochain chain init --home {home}` first)")
    validator_of(home)
    return load_genesis(genesis_path(home))
