"""``dilochain devnet up``: the whole network on one machine, in one command.

Starts a devnet chain on CometBFT (one validator, or ``--validators N`` peered on loopback),
funds keys, creates a run, starts three honest hosts, one dishonest host and two verifiers as
separate processes (each talking to a validator in turn), serves the dashboard and shows live
progress. Hosts and verifiers claim their rewards themselves as epochs close (auto-claim); once
the run is over the devnet claims what is left, and prints a summary: the loss curve (also a
PNG), the cheater caught and slashed, every claim paid and by whom. With ``--churn`` a fifth
host joins mid-run, one host is killed and restarted and one leaves
(:mod:`dilochain.cli.devnet_churn`); the summary lists them by round.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from dilochain.chain.home import genesis_path
from dilochain.chain.testnet import init_testnet
from dilochain.chain_view import eval_curve
from dilochain.cli.chain_cmd import block_time_flag
from dilochain.cli.common import CliError, add_log_format, parse_duration
from dilochain.cli.devnet_churn import (
    CRASH_IN,
    CRASHER,
    JOIN_AT,
    JOINER,
    LEAVE_AFTER,
    LEAVER,
    MIN_ROUNDS,
    Churn,
    ChurnEvent,
)
from dilochain.cli.status_cmd import tables
from dilochain.client import TxRefused, connect, submit
from dilochain.dashboard.server import Dashboard
from dilochain.genesis.document import load_genesis
from dilochain.keyring import Keyring
from dilochain.localnet import (
    NODE_WAITING,
    VERIFIER_READY,
    LocalNetwork,
    metrics_url_in,
    spawn_node,
    spawn_verifier,
    wait_for_logs,
)
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM, PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward, MsgCreateRun
from dilochain.protocol.schedule import round_period

CHAIN_ID = "dilochain-devnet"
RUN_ID = "devnet-run"
PASSWORD = "devnet"
HOST_COLLATERAL = 10_000_000
ROUND_BLOCKS = 15
# Hosts are started (and wait for the run) and verifiers registered before the run is created;
# this covers a host's loading the run's model and registering.
START_DELAY_SECONDS = 10
ROLES = [
    ("host-0", "honest"), ("host-1", "honest"), ("host-2", "honest"), ("host-3", "random-pg"),
    ("verifier-0", "verifier"), ("verifier-1", "verifier"),
]  # fmt: skip


@dataclass
class Member:
    """One participant of the devnet and what happened to it."""

    name: str
    behavior: str
    address: str
    home: str
    slashed: int = 0
    collateral: int = 0
    claims: list[dict] = field(default_factory=list)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``devnet`` command group."""
    devnet = sub.add_parser("devnet", help="run a whole local network").add_subparsers(
        dest="devnet_cmd", required=True, metavar="{up}"
    )
    up = devnet.add_parser("up", help="chain, 4 hosts (one dishonest), 2 verifiers, rewards")
    up.add_argument("--dir", type=Path, default=None, help="keep everything here (default: temp)")
    up.add_argument("--rounds", type=int, default=6)
    up.add_argument("--block-time", default="200ms", help="CometBFT's timeout_commit")
    up.add_argument("--validators", type=int, default=1, help="CometBFT validators (1-7)")
    up.add_argument("--json", type=Path, default=None, help="also write the summary here")
    up.add_argument("--churn", action="store_true",
                    help=f"hosts come and go: {JOINER} joins in round {JOIN_AT}, {CRASHER} is "
                         f"killed (SIGKILL) in round {CRASH_IN} and restarted, {LEAVER} leaves "
                         f"after round {LEAVE_AFTER}")  # fmt: skip
    up.add_argument(
        "--dashboard",
        default="127.0.0.1:0",
        help="where to serve the dashboard while the network runs (port 0: any)",
    )
    add_log_format(up)
    up.set_defaults(func=_up)


def _nodes_from(addresses: list[str], first: int) -> str:
    """``--chain`` for a member: every validator's gRPC address, ``addresses[first]`` first."""
    first %= len(addresses)
    return ",".join(addresses[first:] + addresses[:first])


def _genesis_params() -> dict:
    poc = {
        "sampling_rate": "0.5",
        "beacon_reveal_blocks": 8,
        "reveal_window_blocks": 4,
        "verdict_window_blocks": 8,
        "verdict_open_blocks": 6,
        "verifiers_per_challenge": 2,
        "quorum": 2,
        "min_verifier_collateral": HOST_COLLATERAL,  # a withheld beacon secret costs a host's slash
        "unbonding_period_seconds": 10,  # a leaving host's collateral is back within the demo
        "max_round_blocks": ROUND_BLOCKS,
    }
    poc["unbonding_blocks"] = PocParams(**poc).slashable_blocks
    period = round_period(ROUND_BLOCKS, PocParams(**poc))
    return {
        "poc": poc,
        "rewards": {"epoch_blocks": 2 * period, "reward_per_epoch": 1_000_000_000,
                    "vesting_epochs": 2},
    }  # fmt: skip


def _up(args: argparse.Namespace) -> int:
    if not 1 <= args.rounds <= 100:
        raise CliError("--rounds must be between 1 and 100")
    if not 1 <= args.validators <= 7:
        raise CliError("--validators must be between 1 and 7")
    if args.churn and args.rounds < MIN_ROUNDS:
        raise CliError(f"--churn needs --rounds {MIN_ROUNDS} or more")
    block_time = parse_duration(block_time_flag(args.block_time))
    console = Console()
    with tempfile.TemporaryDirectory(prefix="dilochain-devnet-") as tmp:
        root = (args.dir or Path(tmp)).resolve()
        # The plot outlives a temporary work directory: it then goes to the current directory.
        png = (args.dir.resolve() if args.dir else Path.cwd()) / "devnet_loss_curve.png"
        try:
            summary = _run(console, root, args.rounds, args.validators, args.block_time,
                           block_time, png, args.dashboard, args.churn)  # fmt: skip
        except CliError as err:
            hint = "" if args.dir else " (rerun with --dir DIR to keep the logs)"
            raise CliError(f"{err}{hint}") from None
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    return 0


def _run(
    console: Console,
    root: Path,
    rounds: int,
    validators: int,
    block_time_text: str,
    block_time: float,
    png: Path,
    dashboard_address: str,
    churn: bool = False,
) -> dict:
    from dilochain.training.prepare import default_dataset, pins_of
    from dilochain.training.run_config import make_run_config

    members = []
    roles = [*ROLES, (JOINER, "honest")] if churn else ROLES
    for name, behavior in [("creator", "creator"), *roles]:
        home = root / name
        info, _ = Keyring(home / "keyring").add("k", PASSWORD)
        members.append(Member(name, behavior, info.address, str(home)))
    funded = {m.address: {DENOM: 10**12} for m in members}
    homes = init_testnet(root / "chain", validators, CHAIN_ID, funded, block_time_text,
                         **_genesis_params())  # fmt: skip
    genesis = load_genesis(genesis_path(homes[0]))
    data = default_dataset(root)  # prepared once; every host and verifier reads it (--data)
    cfg = make_run_config(
        pins_of(data),
        "tiny",
        round_blocks=ROUND_BLOCKS,
        total_rounds=rounds,
        start_delay_blocks=int(START_DELAY_SECONDS / block_time),
        min_collateral=str(HOST_COLLATERAL),
    )
    wallets = {m.name: Keyring(Path(m.home) / "keyring").wallet("k", PASSWORD) for m in members}
    with LocalNetwork(homes, metrics_address="127.0.0.1:0") as network:
        addresses = [node.address for node in network.nodes]
        console.print(f"[bold]devnet[/] {CHAIN_ID} on {validators} CometBFT validator(s), gRPC "
                      f"{', '.join(addresses)}; work dir {root}")  # fmt: skip
        client = connect(addresses, CHAIN_ID)
        dashboard = Dashboard(addresses, dashboard_address)
        console.print(f"[bold]dashboard[/] at http://{dashboard.start()}/")
        hosts = [m for m in members if m.name.startswith("host")]
        verifiers = [m for m in members if m.name.startswith("verifier")]
        metrics = ["--metrics-address", "127.0.0.1:0"]
        # Each host and verifier talks to its own validator first and fails over to the others.
        validator_of = {m.name: _nodes_from(addresses, i) for i, m in enumerate(hosts)}

        def spawn_host(name: str, env: dict[str, str]):
            m = next(m for m in hosts if m.name == name)
            return spawn_node(Path(m.home), RUN_ID, "k", validator_of[name], PASSWORD,
                              "--behavior", m.behavior, "--wait-for-run", "--data", str(data),
                              *metrics, env=env)  # fmt: skip

        def leave_args(name: str):
            home = Path(next(m.home for m in hosts if m.name == name))
            args = ["node", "leave", "--home", str(home), "--run", RUN_ID, "--key", "k",
                    "--chain", validator_of[name]]  # fmt: skip
            return args, home / "node.log", {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}

        scenario = (Churn(PocClient(addresses), RUN_ID, {m.name: m.address for m in hosts},
                          spawn_host, leave_args) if churn else None)  # fmt: skip
        node_procs = {m.name: spawn_host(m.name, Churn.env(m.name) if churn else {})
                      for m in hosts if not (churn and m.name == JOINER)}  # fmt: skip

        def spawn_verifier_of(i: int, m: Member):
            return spawn_verifier(Path(m.home), "k", _nodes_from(addresses, -1 - i), PASSWORD,
                                  "--data", str(data), *metrics)  # fmt: skip

        verifier_procs = [spawn_verifier_of(i, m) for i, m in enumerate(verifiers)]
        # Validators and verifiers that stop are started again, the rest going on.
        supervisor = network.supervisor(lambda line: console.print(f"[yellow]{line}[/]"))
        for i, (proc, m) in enumerate(zip(verifier_procs, verifiers, strict=True)):
            supervisor.watch(m.name, proc, lambda i=i, m=m: spawn_verifier_of(i, m),
                             Path(m.home) / "verifier.log")  # fmt: skip
        try:
            ready = [(node_procs[m.name], Path(m.home) / "node.log", NODE_WAITING)
                     for m in hosts if m.name in node_procs]  # fmt: skip
            ready += [(p, Path(m.home) / "verifier.log", VERIFIER_READY)
                      for p, m in zip(verifier_procs, verifiers, strict=True)]  # fmt: skip
            with console.status("starting hosts and verifiers"):
                try:
                    wait_for_logs(ready)
                except (RuntimeError, TimeoutError) as err:
                    raise CliError(str(err).splitlines()[0]) from None
            _print_metrics(console, network, [m for m in members[1:] if m.name in node_procs
                                              or m in verifiers])  # fmt: skip
            submit(client, wallets["creator"], MsgCreateRun(creator=members[0].address,
                                                            run_id=RUN_ID, config=cfg))  # fmt: skip
            with Live(console=console, refresh_per_second=1) as live:
                while (any(p.poll() is None for p in node_procs.values())
                       or (scenario is not None and scenario.pending())):  # fmt: skip
                    live.update(Group(*tables(addresses, RUN_ID)))
                    if scenario is not None:
                        scenario.step(node_procs)
                    supervisor.check()
                    time.sleep(1)
                live.update(Group(*tables(addresses, RUN_ID)))
            _await_auto_claims(console, PocClient(addresses), verifiers)
        finally:
            dashboard.stop()
            verifier_procs = [supervisor.children[m.name].proc or p
                              for p, m in zip(verifier_procs, verifiers, strict=True)]  # fmt: skip
            for proc in verifier_procs:
                proc.terminate()
            for proc in [*verifier_procs, *node_procs.values()]:
                proc.wait(30)
        failed = [name for name, p in node_procs.items() if p.returncode]
        if failed:
            raise CliError(f"hosts {failed} stopped with an error; see their node.log in {root}")
        poc = PocClient(addresses)
        claimed_here = _claim_all(console, client, poc, members[1:], wallets)
        for member in members[1:]:
            member.claims = _claims_of(poc, member.address, claimed_here)
        events = scenario.summary(rounds) if scenario is not None else []
        return _summary(console, homes[0], poc, members, genesis, rounds, png, events)


def _print_metrics(console: Console, network: LocalNetwork, started: list[Member]) -> None:
    """One line per process (validators, then the ``started`` members): where its Prometheus
    metrics are."""
    for i, node in enumerate(network.nodes):
        console.print(f"metrics of validator-{i} at {node.metrics_url}", soft_wrap=True)
    for m in started:
        log = Path(m.home) / ("node.log" if m.name.startswith("host") else "verifier.log")
        console.print(f"metrics of {m.name} at {metrics_url_in(log)}", soft_wrap=True)


def _await_auto_claims(console: Console, poc: PocClient, members: list[Member]) -> None:
    """Before stopping the verifiers: wait (a minute at most) until their auto-claimers have
    claimed every closed epoch they earned something in."""

    def unclaimed() -> list[str]:
        closed = [e for e in range(poc.epoch().epoch) if poc.epoch(epoch=e).closed]
        return [f"{m.name} epoch {e}" for m in members for e in closed
                if int((due := poc.claimable(address=m.address, epoch=e)).amount)
                and not due.claimed]  # fmt: skip

    deadline = time.monotonic() + 60
    with console.status("waiting for the verifiers' auto-claims"):
        while (left := unclaimed()) and time.monotonic() < deadline:
            time.sleep(0.5)
    if left:
        console.print(f"[yellow]not auto-claimed in a minute: {', '.join(left)}")


def _claim_all(console, client, poc, members: list[Member], wallets) -> set[tuple[str, int]]:
    """Claim every epoch the members' processes left unclaimed (the last ones close after the
    run); returns the (address, epoch) pairs claimed here."""
    last = poc.epoch()
    with console.status(f"waiting for epoch {last.epoch} to close (block {last.end_height})"):
        while not poc.epoch(epoch=last.epoch).closed:
            time.sleep(0.3)
    claimed = set()
    for member in members:
        for epoch in range(last.epoch + 1):
            due = poc.claimable(address=member.address, epoch=epoch)
            if int(due.amount) == 0 or due.claimed:
                continue
            msg = MsgClaimReward(claimer=member.address, epoch=epoch)
            try:
                submit(client, wallets[member.name], msg)
            except TxRefused as err:
                console.print(f"[red]{member.name} epoch {epoch}: claim refused: {err}")
                continue
            claimed.add((member.address, epoch))
    return claimed


def _claims_of(poc, address: str, claimed_here: set[tuple[str, int]]) -> list[dict]:
    """``address``'s claimed epochs as the chain records them: amount, paid so far (the rest
    vests), and who claimed (its own process, or the devnet after the run)."""
    grants = {g.epoch: g for g in poc.vesting(address)}
    out = []
    for epoch in range(poc.epoch().epoch + 1):
        due = poc.claimable(address=address, epoch=epoch)
        if not due.claimed or int(due.amount) == 0:
            continue
        grant = grants.get(epoch)
        by = "devnet" if (address, epoch) in claimed_here else "auto-claim"
        out.append({"epoch": epoch, "amount": int(due.amount),
                    "paid": int(grant.paid) if grant else int(due.amount), "by": by})  # fmt: skip
    return out


def _summary(
    console,
    chain_home: Path,
    poc,
    members: list[Member],
    genesis,
    rounds: int,
    png: Path,
    events: list[ChurnEvent],
) -> dict:
    slashes = list(poc.slashes())
    for m in members:
        m.slashed = sum(int(s.amount) for s in slashes if s.address == m.address)
        m.collateral = int(poc.collateral(address=m.address).bonded)
    curve = eval_curve(poc, RUN_ID, rounds)
    _plot(curve, png)
    checkpoints = poc.global_checkpoints(run_id=RUN_ID)
    loss = Table("round", "eval loss (median of hosts' reports)", title="loss curve")
    for r, value in curve:
        loss.add_row(str(r), f"{value:.4f}")
    people = Table(
        "member",
        "behavior",
        "collateral",
        "slashed",
        "rewards claimed",
        "paid (vested)",
        "auto-claimed",
        title="summary",
    )
    for m in members[1:]:
        claimed = sum(c["amount"] for c in m.claims)
        paid = sum(c["paid"] for c in m.claims)
        people.add_row(m.name, m.behavior, f"{m.collateral}udlc",
                       f"[red]{m.slashed}udlc[/]" if m.slashed else "-",
                       f"{claimed}udlc in {len(m.claims)} claims" if m.claims else "-",
                       f"{paid}udlc" if m.claims else "-",
                       f"{sum(c['by'] == 'auto-claim' for c in m.claims)} of {len(m.claims)}",
                       )  # fmt: skip
    console.print(loss, people)
    if events:
        changes = Table("round", "member", "event", "detail", title="hosts that came and went")
        for e in events:
            changes.add_row(str(e.round), e.member, e.event, e.detail)
        console.print(changes)
    agreeing = all(g.agreeing == g.commits for g in checkpoints)
    agreement = "all hosts agreeing" if agreeing else "DISAGREEMENT"
    console.print(f"global checkpoints: {len(checkpoints)} rounds recorded, {agreement}; "
                  f"loss curve: {png}")  # fmt: skip
    cheaters = [m for m in members if m.behavior not in ("honest", "verifier", "creator")]
    for m in cheaters:
        verdict = "caught and slashed" if m.slashed else "NOT caught"
        console.print(f"dishonest {m.name} ({m.behavior}): {verdict}")
    return {
        "chain_home": str(chain_home), "chain_id": CHAIN_ID, "run_id": RUN_ID,
        "rounds": rounds, "png": str(png), "loss_curve": curve,
        "genesis_supply": sum(
            c.amount for a in genesis.accounts for c in a.coins if c.denom == DENOM
        ),
        "members": [asdict(m) for m in members], "churn": [asdict(e) for e in events],
    }  # fmt: skip


def _plot(curve: list[tuple[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r for r, _ in curve], [v for _, v in curve], marker="o")
    ax.set(xlabel="round", ylabel="held-out loss", title="dilochain devnet: global model")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
