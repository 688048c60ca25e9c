"""``dilochain chain``: init a home, add genesis accounts, start a node (app + CometBFT)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from bech32 import bech32_decode
from pydantic import TypeAdapter, ValidationError

from dilochain.chain.home import NodeConfig, genesis_path, init_home
from dilochain.cli.common import (
    CliError,
    add_log_format,
    add_output_flag,
    default_home,
    keyring,
    parse_duration,
    print_result,
)
from dilochain.genesis.coins import parse_coins
from dilochain.genesis.document import GenesisError, load_genesis, save_genesis
from dilochain.keyring import KeyringError
from dilochain.localnet import LISTENING, REST_LISTENING, RPC_LISTENING
from dilochain.metrics_http import METRICS_LISTENING, MetricsAddress, serve_metrics
from dilochain.protocol.address import decode_address
from dilochain.protocol.params import ValidatorSetParams


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``chain`` command group."""
    chain = sub.add_parser("chain", help="run a chain node").add_subparsers(
        dest="chain_cmd", required=True, metavar="{init,add-genesis-account,start}"
    )
    init = chain.add_parser(
        "init", help="create a chain home: genesis, validator and node keys, CometBFT config"
    )
    init.add_argument("--chain-id", required=True)
    init.add_argument("--overwrite", action="store_true")
    init.add_argument("--moniker", help="node name (default: the home's folder name)")
    init.add_argument("--rpc-address", default="127.0.0.1:26657", help="CometBFT RPC")
    init.add_argument("--p2p-address", default="127.0.0.1:26656", help="CometBFT P2P")
    init.add_argument("--cometbft-metrics-address", default="127.0.0.1:26660",
                      help="CometBFT's own Prometheus metrics (empty: off)")  # fmt: skip
    init.add_argument("--block-time", default="1s", help="CometBFT's timeout_commit")
    init.add_argument(
        "--operator",
        default="",
        metavar="ADDRESS_OR_KEY",
        help="stake this node's genesis validator: the account behind it (with --self-bond). "
        "Without it the genesis set is closed: a development network nobody else can join "
        "as a validator",
    )
    init.add_argument(
        "--self-bond",
        type=int,
        default=0,
        metavar="UDLC",
        help="collateral created bonded for the operator at genesis as the validator's stake "
        "(power = self-bond / 1,000,000)",
    )
    init.add_argument(
        "--persistent-peers",
        default="",
        metavar="ID@HOST:PORT,...",
        help="peers to keep connected to (a network's seed validators)",
    )
    init.add_argument(
        "--state-sync",
        default="",
        metavar="HOST:PORT[,HOST:PORT]",
        help="join a running network by restoring a snapshot from peers instead "
        "of replaying every block: CometBFT RPC servers of the network, asked now "
        "for the block to trust (give the network's genesis.json after init)",
    )
    acct = chain.add_parser("add-genesis-account", help="fund an account in genesis")
    acct.add_argument("address", help="bech32 address, or the name of a key in the keyring")
    acct.add_argument("amount", help="coins, e.g. 1000000000udlc")
    for command in (init, acct):
        add_output_flag(command)
    start = chain.add_parser("start", help="run the node: the application and CometBFT")
    start.add_argument("--grpc-address", default="127.0.0.1:9090")
    start.add_argument("--rest-address", default="127.0.0.1:1317", type=_listen_address,
                       help="the REST (LCD) server wallets and explorers use: every gRPC "
                            "service in the Cosmos SDK's JSON mapping (empty: off)")  # fmt: skip
    start.add_argument("--block-time", help="override config.toml's timeout_commit")
    start.add_argument(
        "--snapshot-interval",
        type=int,
        default=500,
        metavar="BLOCKS",
        help="take a state-sync snapshot every this many blocks, for new nodes "
        "to join from (0: none; default 500)",
    )
    start.add_argument(
        "--min-retain-blocks",
        type=int,
        default=0,
        metavar="BLOCKS",
        help="let CometBFT prune blocks older than this many (never those evidence or a kept "
        "snapshot may need; 0: keep every block, the default)",
    )
    start.add_argument(
        "--snapshot-keep",
        type=int,
        default=2,
        metavar="N",
        help="snapshots kept on disk (default 2)",
    )
    start.add_argument(
        "--metrics-address",
        default="",
        type=_listen_address,
        help="serve the application's Prometheus metrics here, e.g. 127.0.0.1:9466 (CometBFT "
        "serves its own on 26660)",
    )
    add_log_format(start)
    for p in (init, acct, start):
        p.add_argument("--home", type=Path, default=default_home())
    init.set_defaults(func=_init)
    acct.set_defaults(func=_add_genesis_account)
    start.set_defaults(func=_start)


def _listen_address(text: str) -> str:
    try:
        return TypeAdapter(MetricsAddress).validate_python(text)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(err.errors()[0]["msg"]) from None


def block_time_flag(text: str) -> str:
    """A ``--block-time`` value checked for range, kept in Go's duration syntax."""
    if not 0.05 <= parse_duration(text) <= 60:
        raise CliError("--block-time must be between 50ms and 60s")
    return text


def _init(args: argparse.Namespace) -> int:
    try:
        config = NodeConfig(
            moniker=args.moniker or args.home.name or "dilochain",
            rpc_address=args.rpc_address,
            p2p_address=args.p2p_address,
            cometbft_metrics_address=args.cometbft_metrics_address,
            block_time=block_time_flag(args.block_time),
            persistent_peers=[p for p in args.persistent_peers.split(",") if p],
            **_trust_point(args.state_sync),
        )
    except ValidationError as err:
        first = err.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-")
        raise CliError(f"{flag}: {first['msg'].removeprefix('Value error, ')}") from None
    if bool(args.operator) != bool(args.self_bond):
        raise CliError("--operator and --self-bond go together (a staked genesis validator)")
    least = ValidatorSetParams().min_self_bond
    if args.self_bond and args.self_bond < least:
        raise CliError(f"--self-bond: at least {least} udlc, the genesis min_self_bond")
    operator = _address(args.home, args.operator) if args.operator else ""
    try:
        doc = init_home(args.home, args.chain_id, overwrite=args.overwrite, config=config,
                        operator=operator, self_bond=args.self_bond)  # fmt: skip
    except GenesisError as err:
        raise CliError(str(err)) from None
    text = f"initialised chain {doc.chain_id} in {args.home}"
    data: dict = {"chain_id": doc.chain_id, "home": str(args.home), "state_sync": None}
    if config.state_sync_rpc:
        servers = sorted(set(config.state_sync_rpc))
        alone = "" if len(servers) > 1 else "; one RPC server is also its own witness: give two"
        text += (f"\nstate sync trusts block {config.trust_height} {config.trust_hash} as "
                 f"{', '.join(servers)} gave it: check that hash with a source you trust (a "
                 f"block explorer, another operator){alone}")  # fmt: skip
        data["state_sync"] = {"rpc_servers": servers, "trust_height": config.trust_height,
                              "trust_hash": config.trust_hash}  # fmt: skip
    print_result(args, data, text)
    return 0


def _trust_point(servers: str) -> dict:
    """The state-sync settings for ``--state-sync`` (none when empty): the servers, and the
    latest block the first one knows (height and hash) as the block to trust."""
    from dilochain.localnet import state_sync_settings

    rpc = [s.strip().removeprefix("http://").removeprefix("tcp://") for s in servers.split(",")]
    rpc = [s for s in rpc if s]
    if not rpc:
        return {}
    try:
        return state_sync_settings(rpc)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CliError(f"--state-sync: no CometBFT RPC answers at {rpc[0]} ({err}); give a "
                       "network node's RPC address, host:port") from None  # fmt: skip


def genesis_account(home: Path, address_or_key: str, amount: str) -> tuple[str, dict[str, int]]:
    """The bech32 address (as given, or that of the key of that name in ``home``'s keyring) and
    the coins (``1000000udlc``) of an account to fund in genesis."""
    try:
        coins = parse_coins(amount)
    except ValueError as err:
        raise CliError(str(err)) from None
    if not all(coins.values()):
        raise CliError(f"{amount!r}: a genesis account's coins are positive, as the SDK's")
    return _address(home, address_or_key), coins


def _address(home: Path, address_or_key: str) -> str:
    """A bech32 address as given, or the address of that key in the home's keyring; what is
    wrong with an address (another chain's prefix, upper case) when it is one but no key."""
    try:
        decode_address(address_or_key)
    except ValueError as bad:
        try:
            return keyring(home).show(address_or_key).address
        except KeyringError:
            if bech32_decode(address_or_key.lower())[0] is not None:  # an address, not a name
                raise CliError(str(bad)) from None
            raise
    return address_or_key


def _add_genesis_account(args: argparse.Namespace) -> int:
    path = genesis_path(args.home)
    if not path.exists():
        raise CliError(f"no chain home at {args.home} (run `dilochain chain init` first)")
    address, coins = genesis_account(args.home, args.address, args.amount)
    save_genesis(load_genesis(path).with_account(address, coins), path)
    print_result(args, {"address": address, "amount": args.amount},
                 f"added {args.amount} to {address}")  # fmt: skip
    return 0


def _start(args: argparse.Namespace) -> int:
    from dilochain.chain.metrics import REGISTRY
    from dilochain.chain.server import ChainNode

    block_time = block_time_flag(args.block_time) if args.block_time else None
    if args.snapshot_interval < 0 or args.snapshot_keep < 1 or args.min_retain_blocks < 0:
        raise CliError("--snapshot-interval and --min-retain-blocks are 0 or more, "
                       "--snapshot-keep 1 or more")  # fmt: skip
    node = ChainNode(args.home, args.grpc_address, block_time, args.metrics_address,
                     args.rest_address, args.snapshot_interval, args.snapshot_keep,
                     args.min_retain_blocks)  # fmt: skip
    metrics = serve_metrics(args.metrics_address, REGISTRY)

    def ready(grpc_address: str, rpc_address: str) -> None:
        print(f"{RPC_LISTENING}{rpc_address}", flush=True)
        if metrics is not None:
            print(f"{METRICS_LISTENING}{metrics.address}/metrics", flush=True)
        if node.rest_listening:
            print(f"{REST_LISTENING}{node.rest_listening}", flush=True)
        print(f"{LISTENING}{grpc_address}", flush=True)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await node.serve(stop, ready)

    try:
        asyncio.run(serve())
    finally:
        if metrics is not None:
            metrics.close()
    if node.failure:
        raise CliError(f"{node.failure} (stopped at height {node.stopped_height})")
    with contextlib.suppress(BrokenPipeError):  # whoever started the node may be gone
        print(f"stopped at height {node.stopped_height}", flush=True)
    return 0
