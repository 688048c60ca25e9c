"""What state sync saves a node joining a running network: seconds until a fresh node has caught
up with a chain at height N, by replaying every block (block sync) and by restoring a snapshot
(state sync), side by side against the same validator (real CometBFT and app processes on
loopback; the state holds ``--accounts`` funded accounts).

    .venv/bin/python -m bench.state_sync [--height 1000] [--block-time 50ms] [--accounts 2000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.chain.home import (
    NodeConfig,
    genesis_path,
    init_home,
    node_id,
    read_config,
)
from dilochain.chain.testnet import free_ports, init_testnet
from dilochain.localnet import ChainProcess, rpc_call, state_sync_settings
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, wallet


def _joiner(root: Path, name: str, validator: ChainProcess, state_sync: bool) -> ChainProcess:
    """A fresh home peered with ``validator``, with its genesis; state sync from its RPC."""
    home = root / name
    rpc, p2p = free_ports(2)
    trust = state_sync_settings([validator.rpc_address]) if state_sync else {}
    laddr = read_config(validator.home)["p2p"]["laddr"].removeprefix("tcp://")
    peer = f"{node_id(validator.home)}@{laddr}"
    config = NodeConfig(moniker=name, rpc_address=f"127.0.0.1:{rpc}",
                        p2p_address=f"127.0.0.1:{p2p}", cometbft_metrics_address="",
                        persistent_peers=[peer], **trust)  # fmt: skip
    init_home(home, CHAIN_ID, config=config)
    shutil.copy(genesis_path(validator.home), genesis_path(home))
    return ChainProcess(home)


def _join_seconds(node: ChainProcess, target: int) -> float:
    """Seconds from start until ``node`` has committed ``target``."""
    started = time.perf_counter()
    node.start(timeout=600, first_block=False)  # a loaded machine: joining is what is timed
    node.wait_for_height(target, timeout=1800)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--height", type=int, default=1000, help="the chain's height N")
    parser.add_argument("--block-time", default="50ms")
    parser.add_argument("--accounts", type=int, default=2000, help="funded accounts in state")
    args = parser.parse_args()
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="bench-state-sync-"))
    funded = {str(wallet(10_000 + i).address()): {DENOM: 1_000_000} for i in range(args.accounts)}
    (home,) = init_testnet(root, 1, CHAIN_ID, funded, block_time=args.block_time)
    interval = max(10, args.height // 2)
    validator = ChainProcess(home, args.block_time,
                             options=("--snapshot-interval", str(interval)))  # fmt: skip
    rows = []
    try:
        validator.start()
        with console.status(f"the validator makes {args.height} blocks"):
            validator.wait_for_height(args.height, timeout=3600)
        for name, state_sync in (("block sync", False), ("state sync", True)):
            node = _joiner(root, name.replace(" ", "-"), validator, state_sync)
            try:
                with console.status(f"{name}: joining"):
                    seconds = _join_seconds(node, validator.height())
                earliest = rpc_call(node.rpc_address, "status")["sync_info"]
                rows.append((name, seconds, int(earliest["earliest_block_height"])))
            finally:
                node.kill()
    finally:
        validator.kill()
        shutil.rmtree(root, ignore_errors=True)
    table = Table("join by", "seconds to catch up", "first block it holds",
                  title=f"a node joining at height ~{args.height} ({args.accounts} accounts, "
                        f"{args.block_time} blocks, snapshots every {interval})")  # fmt: skip
    for name, seconds, earliest in rows:
        table.add_row(name, f"{seconds:.1f}", str(earliest))
    console.print(table)
    console.print(f"state sync / block sync: {rows[1][1] / rows[0][1]:.2f}")


if __name__ == "__main__":
    main()
