"""``dilochain devnet up``: the whole network on one machine, in one command.

Starts a devnet chain on CometBFT (one validator, or ``--validators N`` peered on loopback),
funds keys, creates a run (overlapped rounds of the ``demo`` preset, its inner steps sized to
fill this machine's windows: :mod:`dilochain.cli.devnet_sizing`), starts three honest hosts, one
dishonest host and two verifiers as separate processes (each talking to a validator in turn),
serves the dashboard and shows live progress. Hosts and verifiers claim their rewards
themselves as epochs close (auto-claim); once the run is over the devnet claims what is left,
and prints a summary: the loss curve to the final state (also a PNG), the cheater caught and
slashed, every claim paid and by whom, each host's share of wall-clock in inner steps. With
``--churn`` a fifth host joins mid-run, one host is killed and restarted and one leaves
(:mod:`dilochain.cli.devnet_churn`); the summary lists them by round. ``--keep`` leaves the
chain and the dashboard up afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from dilochain.chain.home import genesis_path
from dilochain.chain.testnet import init_testnet
from dilochain.chain_view import eval_curve
from dilochain.cli.chain_cmd import block_time_flag
from dilochain.cli.common import (
    CliError,
    add_log_format,
    dlc,
    folded,
    parse_duration,
    wide_console,
)
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
from dilochain.cli.devnet_sizing import (
    SEGMENTS,
    Utilisation,
    binomial_quantile,
    shared_step_seconds,
    size_rounds,
    usable_cores,
)
from dilochain.cli.status_cmd import progress_lines, render, tables, view
from dilochain.client import ChainUnreachable, TxRefused, connect, submit
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
from dilochain.protocol.schedule import round_window

CHAIN_ID = "dilochain-devnet"
RUN_ID = "devnet-run"
PASSWORD = "devnet"
HOST_COLLATERAL = 10_000_000
STOP_SECONDS = 30  # a stopping host or verifier is killed after this (Ctrl-C, the run over)
# Overlapped rounds: the last round is verified (34 blocks) while this one trains in its commit
# window; the other 8 blocks are a host's lead, which absorbs the variation of its steps.
ROUND_BLOCKS = 42
# --churn: rounds one after another (a commit window, then its verification), so a host killed
# while training round r has nothing of an earlier round left to serve to verifiers. (In an
# overlapped run round r-1 is verified while r trains: a crash then costs the host round r-1.)
# 18 blocks: 32 steps of 4 hosts on 2 cores took 2.0-2.4 s; 15 blocks (3 s) left too little.
CHURN_ROUND_BLOCKS = 18
# Hosts are started (and wait for the run) and verifiers registered before the run is created;
# this covers a host's loading the run's model and registering.
START_DELAY_SECONDS = 4
# Each (host, segment) is replayed with this chance: enough to show replays every round or two;
# 0.1 drew up to 4 of 12 segments, whose replay on these cores bounded the rounds' steps.
SAMPLING_RATE = 0.05
PROOF_WORK = 0.25  # a host's checkpoint hashing and writing, per second of steps (2 cores)
SCREEN_BLOCKS = 10  # fewer: a fetch that retries made whole rounds' screens miss (8 tried)
# A verifier replays a round's sampled segments in these (3 of 12 segments drawn: 1 round in
# 200 draws more; the rounds' steps are bounded so they fit).
VERDICT_BLOCKS = 18
# A replayed step's seconds over a step alone: both verifiers replay at once beside the chain,
# and each segment's checkpoints are fetched, decoded and hashed (measured 1.8).
REPLAY_SLOWDOWN = 1.8
REPLAY_TAIL = 0.005  # the chance a round draws more segments than the verdict window is sized for
HOST_NICENESS = 19
VERIFIERS_PER_CHALLENGE = 2
# The devnet's cheater skips the work it is paid for: the cheat that pays, and one that leaves the
# machine's cores to the honest hosts (their pace is what rounds are sized to).
CHEAT = "no-training"
ROLES = [
    ("host-0", "honest"), ("host-1", "honest"), ("host-2", "honest"), ("host-3", CHEAT),
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
    busy: float | None = None  # a host's share of wall-clock in inner steps (round 1 to last)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``devnet`` command group."""
    devnet = sub.add_parser("devnet", help="run a whole local network").add_subparsers(
        dest="devnet_cmd", required=True, metavar="{up}"
    )
    up = devnet.add_parser("up", help="chain, 4 hosts (one dishonest), 2 verifiers, rewards")
    up.add_argument("--dir", type=Path, default=None, help="keep everything here (default: temp)")
    up.add_argument("--rounds", type=int, default=10)
    up.add_argument("--block-time", default="200ms", help="CometBFT's timeout_commit")
    up.add_argument("--validators", type=int, default=1, help="CometBFT validators (1-7)")
    up.add_argument("--json", type=Path, default=None, help="also write the summary here")
    up.add_argument("--inner-steps", type=int, default=0,
                    help="inner steps a round (default: as many as fill a round's window on "
                         "this machine)")  # fmt: skip
    up.add_argument(
        "--keep",
        action="store_true",
        help="leave the chain and dashboard running after the run (Ctrl-C stops)",
    )
    up.add_argument("--churn", action="store_true",
                    help=f"hosts come and go: {JOINER} joins after round {JOIN_AT}, {CRASHER} is "
                         f"killed (SIGKILL) in round {CRASH_IN} and restarted, {LEAVER} leaves "
                         f"after round {LEAVE_AFTER}")  # fmt: skip
    up.add_argument("--store", choices=["blob", "s3"], default="blob",
                    help="where hosts publish artifacts: their blob services (default), or a "
                         "local S3 server (versitygw) as hosts behind NAT would")  # fmt: skip
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
        # A cheater's failed screen has its segments replayed whatever the draw; honest
        # hosts' replays share the hosts' cores here (on a real network, verifiers' own).
        "sampling_rate": str(SAMPLING_RATE),
        "beacon_reveal_blocks": SCREEN_BLOCKS,  # each commit's committee screens it in these
        "reveal_window_blocks": 3,
        "verdict_window_blocks": VERDICT_BLOCKS,
        "verdict_open_blocks": 3,
        "verifiers_per_challenge": VERIFIERS_PER_CHALLENGE,
        "quorum": 2,
        "min_verifier_collateral": HOST_COLLATERAL,  # a withheld beacon secret costs a host's slash
        "unbonding_period_seconds": 10,  # a leaving host's collateral is back within the demo
        "max_round_blocks": ROUND_BLOCKS,
    }
    poc["unbonding_blocks"] = PocParams(**poc).slashable_blocks
    return {
        "poc": poc,
        "rewards": {"epoch_blocks": 2 * ROUND_BLOCKS, "reward_per_epoch": 1_000_000_000,
                    "vesting_epochs": 2},
    }  # fmt: skip


def _interrupted(signum: int, frame) -> None:
    """SIGTERM (``kill``, ``timeout``, a CI job cancelled) stops the devnet as Ctrl-C does:
    Python's default ends the process at once, leaving the chain, hosts and verifiers running."""
    raise KeyboardInterrupt


def _up(args: argparse.Namespace) -> int:
    if not 1 <= args.rounds <= 100:
        raise CliError("--rounds must be between 1 and 100")
    if not 1 <= args.validators <= 7:
        raise CliError("--validators must be between 1 and 7")
    if args.inner_steps and (args.inner_steps < 2 * SEGMENTS or args.inner_steps % SEGMENTS):
        raise CliError(f"--inner-steps must be a multiple of {SEGMENTS}, at least {2 * SEGMENTS}")
    if args.churn and args.rounds < MIN_ROUNDS:
        raise CliError(f"--churn needs --rounds {MIN_ROUNDS} or more")
    if args.dir is not None and args.dir.is_dir() and any(args.dir.iterdir()):
        raise CliError(f"--dir {args.dir} is not empty (a devnet's earlier folder?): give a new "
                       "or empty folder")  # fmt: skip
    block_time = parse_duration(block_time_flag(args.block_time))
    console = wide_console()
    signal.signal(signal.SIGTERM, _interrupted)  # stopped as by Ctrl-C: every process with it
    with tempfile.TemporaryDirectory(prefix="dilochain-devnet-") as tmp:
        root = (args.dir or Path(tmp)).resolve()
        # The plot outlives a temporary work directory: it then goes to the current directory.
        png = (args.dir.resolve() if args.dir else Path.cwd()) / "devnet_loss_curve.png"
        try:
            summary = _run(console, root, args, block_time, png)
        except CliError as err:
            hint = "" if args.dir else " (rerun with --dir DIR to keep the logs)"
            raise CliError(f"{err}{hint}") from None
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    return 0


def _run(
    console: Console, root: Path, args: argparse.Namespace, block_time: float, png: Path
) -> dict:
    from dilochain.training.dataset import Dataset
    from dilochain.training.prepare import default_dataset, pins_of
    from dilochain.training.run_config import make_run_config
    from dilochain.training.train_step import seconds_per_step

    rounds, validators, churn = args.rounds, args.validators, args.churn
    members = []
    roles = [*ROLES, (JOINER, "honest")] if churn else ROLES
    for name, behavior in [("creator", "creator"), *roles]:
        home = root / name
        info, _ = Keyring(home / "keyring").add("k", PASSWORD)
        members.append(Member(name, behavior, info.address, str(home)))
    funded = {m.address: {DENOM: 10**12} for m in members}
    homes = init_testnet(root / "chain", validators, CHAIN_ID, funded, args.block_time,
                         **_genesis_params())  # fmt: skip
    genesis = load_genesis(genesis_path(homes[0]))
    data = default_dataset(root)  # prepared once; every host and verifier reads it (--data)
    cfg = make_run_config(
        pins_of(data),
        "demo",
        round_blocks=CHURN_ROUND_BLOCKS if churn else ROUND_BLOCKS,
        total_rounds=rounds,
        overlap=not churn,
        start_delay_blocks=int(START_DELAY_SECONDS / block_time),
        min_collateral=str(HOST_COLLATERAL),
    )
    training = sum(name.startswith("host") and b != CHEAT for name, b in ROLES)
    step = 0.0
    if not args.inner_steps:
        with console.status("timing an inner step on this machine"):
            corpus = Dataset(data, cfg.data_manifest_hash, cfg.tokenizer_hash)
            step = seconds_per_step(cfg, corpus, steps=30, warmup=5)
    wallets = {m.name: Keyring(Path(m.home) / "keyring").wallet("k", PASSWORD) for m in members}
    with LocalNetwork(homes, metrics_address="127.0.0.1:0") as network, ExitStack() as stack:
        addresses = [node.address for node in network.nodes]
        console.print(f"[bold]devnet[/] {CHAIN_ID} on {validators} CometBFT validator(s): gRPC "
                      f"(--chain) {', '.join(addresses)}; CometBFT RPC "
                      f"{', '.join(n.rpc_address for n in network.nodes)}; work dir {root}; "
                      f"keyring password {PASSWORD!r}", soft_wrap=True)  # fmt: skip
        client = connect(addresses, CHAIN_ID)
        started = (time.monotonic(), client.query_height())
        dashboard = Dashboard(addresses, args.dashboard)
        console.print(f"[bold]dashboard[/] at http://{dashboard.start()}/")
        stack.callback(dashboard.stop)
        hosts = [m for m in members if m.name.startswith("host")]
        verifiers = [m for m in members if m.name.startswith("verifier")]
        metrics = ["--metrics-address", "127.0.0.1:0"]
        store_flags, store_env = _object_store(console, stack, root, args.store)
        # Each host and verifier talks to its own validator first and fails over to the others.
        validator_of = {m.name: _nodes_from(addresses, i) for i, m in enumerate(hosts)}

        def spawn_host(name: str, env: dict[str, str]):
            m = next(m for m in hosts if m.name == name)
            proc = spawn_node(Path(m.home), RUN_ID, "k", validator_of[name], PASSWORD,
                              "--behavior", m.behavior, "--wait-for-run", "--data", str(data),
                              *metrics, *store_flags, env={**store_env, **env})  # fmt: skip
            # Hosts train all the time; the chain's and the verifiers' work comes in bursts
            # that have windows of a few blocks: those go first (set before the node starts
            # a thread, which inherits it).
            os.setpriority(os.PRIO_PROCESS, proc.pid, HOST_NICENESS)
            return proc

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
            if args.inner_steps:
                cfg.inner_steps = args.inner_steps
                cfg.checkpoint_interval = args.inner_steps // SEGMENTS
            else:  # seconds a block while hosts and verifiers started: the pace under load
                blocks = client.query_height() - started[1]
                block_seconds = max(block_time, (time.monotonic() - started[0]) / max(1, blocks))
                with console.status(f"timing inner steps with {training} hosts stepping at once"):
                    pace = shared_step_seconds(cfg, data, training, niceness=HOST_NICENESS)
                _size(console, cfg, (step, pace), block_seconds, training, len(verifiers))
            submit(client, wallets["creator"], MsgCreateRun(creator=members[0].address,
                                                            run_id=RUN_ID, config=cfg))  # fmt: skip
            busy = _utilisation(PocClient(addresses), hosts, node_procs)
            shown: list[str] = []
            outage = False
            with Live(console=console, refresh_per_second=1) as live:
                while (any(p.poll() is None for p in node_procs.values())
                       or (scenario is not None and scenario.pending())):  # fmt: skip
                    supervisor.check()  # first: the chain may be what stopped
                    try:
                        now = view(addresses, RUN_ID)
                        busy.tick(client.query_height())
                        if scenario is not None:
                            scenario.step(node_procs)
                    except (ChainUnreachable, grpc.RpcError) as err:  # its validator restarts
                        if not outage:
                            console.print(f"[yellow]chain unreachable ({_reason(err)}); "
                                          "waiting for it to come back[/]")  # fmt: skip
                        outage = True
                        time.sleep(1)
                        continue
                    if outage:
                        console.print("[green]chain reachable again[/]")
                        outage = False
                    live.update(Group(*render(now)))
                    if not console.is_terminal and (lines := progress_lines(now)) != shown:
                        console.print(*lines, sep="\n")  # a log file sees progress too
                        shown = lines
                    time.sleep(1)
                live.update(Group(*tables(addresses, RUN_ID)))
            _await_auto_claims(console, PocClient(addresses), verifiers)
            for m in hosts:
                m.busy = busy.shares().get(m.name)
        finally:  # done, failed or interrupted (Ctrl-C): every host and verifier stops
            verifier_procs = [supervisor.children[m.name].proc or p
                              for p, m in zip(verifier_procs, verifiers, strict=True)]  # fmt: skip
            _stop([*verifier_procs, *node_procs.values()])
        failed = [name for name, p in node_procs.items() if p.returncode]
        if failed:
            raise CliError(f"hosts {failed} stopped with an error; see their node.log in {root}")
        poc = PocClient(addresses)
        claimed_here = _claim_all(console, client, poc, members[1:], wallets)
        for member in members[1:]:
            member.claims = _claims_of(poc, member.address, claimed_here)
        events = scenario.summary(rounds) if scenario is not None else []
        final = _final_loss(console, poc, data, Path(hosts[0].home) / "artifacts")
        summary = _summary(console, homes[0], poc, members, genesis, png, events, final)
        _next_steps(console, network, root, args.keep)
        if args.keep:
            _keep_running(console, network)
        return summary


def _object_store(
    console: Console, stack: ExitStack, root: Path, store: str
) -> tuple[list[str], dict[str, str]]:
    """For ``--store s3``: a local S3 server (stopped with ``stack``), and the flags and
    environment that make a host publish there; else nothing."""
    if store != "s3":
        return [], {}
    from dilochain.local_s3 import LocalS3, S3Missing

    try:
        s3 = stack.enter_context(LocalS3(root / "s3"))
    except S3Missing as err:
        raise CliError(str(err)) from None
    console.print(f"[bold]object store[/] versitygw at {s3.endpoint} ({root / 's3'}): hosts "
                  f"publish to {s3.url}, public-read; access key {s3.access_key}, secret "
                  f"{s3.secret_key}", soft_wrap=True)  # fmt: skip
    return ["--object-store", s3.url, "--object-store-endpoint", s3.endpoint], s3.env


def _size(
    console: Console, cfg, steps: tuple[float, float], block_seconds: float, training: int,
    verifiers: int,
) -> None:  # fmt: skip
    """Set ``cfg``'s inner steps to fill a window at the ``training`` honest hosts' pace, with
    their proof work beside them, and few enough that each verifier replays its share of a
    round's drawn segments within the verdict window (hosts yield the cores to it), and say
    so. ``steps``: seconds of a step alone, and with the training hosts stepping at once."""
    alone, pace = steps
    # Segments replayed by each verifier in a round: all but 1 round in 200 draw no more.
    drawn = binomial_quantile(training * SEGMENTS, SAMPLING_RATE, 1 - REPLAY_TAIL)
    replays = VERIFIERS_PER_CHALLENGE * drawn / SEGMENTS / verifiers  # per step a host trains
    replay = (VERDICT_BLOCKS * block_seconds, replays)
    window = cfg.round_blocks * block_seconds
    # Beside each host's steps, on the same cores: its proof work (hashing and writing
    # checkpoints) and the replays of its sampled segments.
    sampled = VERIFIERS_PER_CHALLENGE * SAMPLING_RATE
    sizing = size_rounds(alone * REPLAY_SLOWDOWN, pace * (1 + PROOF_WORK + sampled), window, replay)
    cfg.inner_steps = sizing.inner_steps
    cfg.checkpoint_interval = sizing.checkpoint_interval
    console.print(f"[bold]rounds[/] sized to this machine: "
                  f"{sizing.describe(training, usable_cores())}", soft_wrap=True)  # fmt: skip


def _utilisation(poc: PocClient, hosts: list[Member], running: dict) -> Utilisation:
    """A meter of the ``running`` hosts' utilisation from round 1's start to the last round's."""
    run, params = poc.run(RUN_ID), poc.params()
    first, last = (round_window(run, params, r).start for r in (1, run.config.total_rounds - 1))
    urls = {m.name: metrics_url_in(Path(m.home) / "node.log") for m in hosts if m.name in running}
    return Utilisation(urls, first, last)


def _final_loss(console: Console, poc: PocClient, data: Path, artifacts: Path) -> float | None:
    """Held-out loss of the run's final global state (θ after its last round, which no host
    evaluates), computed from a host's artifacts as ``dilochain export`` does, on the held-out
    batches a host evaluates each round's base on."""
    from dilochain.artifacts.store import ArtifactError
    from dilochain.cli.export_cmd import state_at
    from dilochain.training.dataset import Dataset
    from dilochain.training.diloco import params_of
    from dilochain.training.model import load_params
    from dilochain.training.train_step import EVAL_BATCHES, eval_loss

    run = poc.run(RUN_ID)
    cfg = run.config
    try:
        model, view, _ = state_at(poc, run, cfg.total_rounds, artifacts)
    except (CliError, ArtifactError) as err:
        console.print(f"[yellow]no final state to evaluate: {err}")
        return None
    load_params(model, params_of(view.state))
    corpus = Dataset(data, cfg.data_manifest_hash, cfg.tokenizer_hash)
    return eval_loss(model, corpus.heldout_batches(EVAL_BATCHES, cfg.batch_size, cfg.seq_len))


def _reason(err: Exception) -> str:
    """A chain error in a few words."""
    if isinstance(err, grpc.RpcError):
        return err.code().name
    return str(err).splitlines()[0].split(" (")[0]


def _next_steps(console: Console, network: LocalNetwork, root: Path, keep: bool) -> None:
    """What to try next on the network (while it runs, with ``--keep``)."""
    if not keep:
        console.print("rerun with [bold]--keep[/] to explore the network afterwards "
                      "(status, dashboard, export to Hugging Face, rewards)")  # fmt: skip
        return
    chain = network.nodes[0].address
    host = root / "host-0"
    console.print(
        "[bold]next steps[/] (the network keeps running; Ctrl-C stops it):\n"
        f"  dilochain status --chain {chain}\n"
        f"  dilochain export --chain {chain} --run {RUN_ID} --home {host} --out ./devnet-model\n"
        f"  DILOCHAIN_KEYRING_PASSWORD={PASSWORD} dilochain rewards show --chain {chain} "
        f"--home {host} --key k\n"
        f"  curl http://{network.nodes[0].rpc_address}/status   # CometBFT RPC",
        soft_wrap=True,
    )


def _stop(procs: list[subprocess.Popen], grace: float = STOP_SECONDS) -> None:
    """Ask every process still running to stop, and kill those still running ``grace``
    seconds later (one waiting for a chain that is already gone)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _keep_running(console: Console, network: LocalNetwork) -> None:
    """Block until Ctrl-C, starting again validators that stop."""
    supervisor = network.supervisor(lambda line: console.print(f"[yellow]{line}[/]"))
    try:
        while True:
            supervisor.check()
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("stopping the devnet")


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
    png: Path,
    events: list[ChurnEvent],
    final: float | None,
) -> dict:
    slashes = list(poc.slashes())
    for m in members:
        m.slashed = sum(int(s.amount) for s in slashes if s.address == m.address)
        m.collateral = int(poc.collateral(address=m.address).bonded)
    rounds = poc.run(RUN_ID).config.total_rounds
    curve = eval_curve(poc, RUN_ID, rounds)
    if final is not None:  # the state the last round made, at x = total rounds
        curve.append((rounds, final))
    _plot(curve, png)
    checkpoints = poc.global_checkpoints(run_id=RUN_ID)
    loss = Table("round", "held-out loss of the global state it started from", title="loss curve")
    for r, value in curve:
        loss.add_row(str(r) if r < rounds else "final", f"{value:.4f}")
    people = Table(
        "member",
        "behavior",
        "collateral",
        "slashed",
        "rewards claimed",
        "paid (vested)",
        "auto-claimed",
        "in inner steps",
        title="summary",
    )
    for m in members[1:]:
        claimed = sum(c["amount"] for c in m.claims)
        paid = sum(c["paid"] for c in m.claims)
        people.add_row(m.name, m.behavior, dlc(m.collateral),
                       f"[red]{dlc(m.slashed)}[/]" if m.slashed else "-",
                       f"{dlc(claimed)} in {len(m.claims)} claims" if m.claims else "-",
                       dlc(paid) if m.claims else "-",
                       f"{sum(c['by'] == 'auto-claim' for c in m.claims)} of {len(m.claims)}",
                       "-" if m.busy is None else f"{m.busy:.1%}",
                       )  # fmt: skip
    console.print(*folded(loss, people))
    if events:
        changes = Table("round", "member", "event", "detail", title="hosts that came and went")
        for e in events:
            changes.add_row(str(e.round), e.member, e.event, e.detail)
        console.print(*folded(changes))
    agreeing = all(g.agreeing == g.commits for g in checkpoints)
    agreement = "all hosts agreeing" if agreeing else "DISAGREEMENT"
    console.print(f"global checkpoints: {len(checkpoints)} rounds recorded, {agreement}; "
                  f"loss curve: {png}")  # fmt: skip
    if len(curve) > 1:
        (_, first), (_, last) = curve[0], curve[-1]
        console.print(f"held-out loss {first:.3f} -> {last:.3f}: "
                      f"{100 * (1 - last / first):.1f}% lower")  # fmt: skip
    cheaters = [m for m in members if m.behavior not in ("honest", "verifier", "creator")]
    for m in cheaters:
        verdict = "caught and slashed" if m.slashed else "NOT caught"
        console.print(f"dishonest {m.name} ({m.behavior}): {verdict}")
    return {
        "chain_home": str(chain_home), "chain_id": CHAIN_ID, "run_id": RUN_ID,
        "rounds": rounds, "png": str(png), "loss_curve": curve, "final_loss": final,
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
