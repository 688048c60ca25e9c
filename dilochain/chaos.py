"""A fault-injection run, in the spirit of CometBFT's e2e perturbations: a four-validator network
with honest hosts, a cheating host and three verifiers trains a run while, at seeded random
moments, validators, hosts and verifiers are killed (-9) and started again, paused
(SIGSTOP/SIGCONT) or cut off from the network, and one validator's application database is
wiped. Afterwards it checks what must hold whatever happened: every commit and challenge
decided, no honest host slashed, every cheater caught and paid nothing, no undecided or failed
commit in any global state (each global state recomputed from the accepted pseudo-gradients),
and every validator's app hash equal; and one check of progress, not safety: every round
trained. Meanwhile, unless turned off, the validator drill (:mod:`dilochain.validator_drill`)
brings a validator in by state sync, keeps it down until jailed and has another double-sign:
the random faults leave the drill's genesis validator alone.

Hosts and verifiers reach the validators through TCP proxies of their own (one per validator,
their own validator's first), so cutting a member off the network is closing its proxies.
Members that die are started again by a :class:`~dilochain.supervisor.Supervisor`, as
``devnet up`` does. ``python -m bench.chaos`` is the command; ``tests/test_chaos.py`` runs a
short fixed-seed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dilochain.chain.home import db_path
from dilochain.chain.testnet import init_testnet
from dilochain.client import connect, submit
from dilochain.keyring import Keyring
from dilochain.localnet import LocalNetwork, rpc_call, spawn_node, spawn_verifier, wait_until_ready
from dilochain.poc_client import PocClient
from dilochain.protocol import schedule
from dilochain.protocol.params import DENOM, PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.protocol.pb.poc.v1.types_pb2 import ChallengeStatus, CommitOutcome, RunConfig
from dilochain.supervisor import Supervisor
from dilochain.testutil import CHAIN_ID, wallet
from dilochain.validator_drill import SNAPSHOTS, VALIDATOR_SET, ValidatorDrill

PASSWORD = "chaos"
RUN_ID = "chaos"
CHEAT = "random-pg"
COLLATERAL = 10_000_000
KINDS = {  # what can happen to whom
    "validator": ("kill", "pause", "wipe"),
    "host": ("kill", "pause", "disconnect"),
    "verifier": ("kill", "pause", "disconnect"),
}
PENDING = CommitOutcome.COMMIT_OUTCOME_PENDING
# The one check of progress, not safety: on an overloaded machine a round's hosts may all miss
# its commit window, which no guarantee forbids.
LIVENESS = "every round trained"
START_SECONDS = 12  # from the run's creation to round 0's start


@dataclass(frozen=True)
class ChaosConfig:
    """The network, the run, and how much goes wrong."""

    seed: int = 1
    rounds: int = 3
    honest_hosts: int = 2
    validators: int = 4
    verifiers: int = 3
    faults: int = 6
    block_time: str = "250ms"
    round_blocks: int = 40
    # Blocks of the beacon, reveal, verdict and verdict-opening windows: long enough for a
    # member started again mid-round (several seconds on two loaded cores) to do its part, and
    # for backups to replay in the second half of a verdict window.
    windows: tuple[int, int, int, int] = (16, 40, 48, 24)
    validator_drill: bool = True


@dataclass
class Fault:
    """``kind`` done to ``target`` about ``at`` seconds into the run, lasting ``seconds``."""

    at: float
    kind: str
    target: str
    seconds: float
    done_at: float | None = None  # when it happened (a host kill waits for a safe moment)


@dataclass
class ChaosReport:
    """What happened, and what held."""

    config: ChaosConfig
    faults: list[Fault] = field(default_factory=list)
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    outcomes: dict[int, dict[str, str]] = field(default_factory=dict)  # round -> member -> outcome
    slashes: list[tuple[str, str]] = field(default_factory=list)  # (member, reason)
    events: list[str] = field(default_factory=list)  # what the supervisor said
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return bool(self.checks) and all(ok for ok, _ in self.checks.values())


def genesis_params(config: ChaosConfig) -> dict:
    """The config's windows; two verifiers a challenge, so one of three can be down."""
    beacon, reveal, verdict, opening = config.windows
    poc = {
        "sampling_rate": "0.5", "beacon_reveal_blocks": beacon, "reveal_window_blocks": reveal,
        "verdict_window_blocks": verdict, "verdict_open_blocks": opening,
        "verifiers_per_challenge": 2, "quorum": 2, "min_verifier_collateral": COLLATERAL,
        "unbonding_period_seconds": 10, "max_round_blocks": config.round_blocks,
    }  # fmt: skip
    poc["unbonding_blocks"] = PocParams(**poc).slashable_blocks
    params = {"poc": poc, "rewards": {"epoch_blocks": 200, "vesting_epochs": 1}}
    return {**params, "validator_set": VALIDATOR_SET} if config.validator_drill else params


def plan(config: ChaosConfig, seconds: float, names: dict[str, list[str]]) -> list[Fault]:
    """``config.faults`` faults at seeded random moments of a run ``seconds`` long, one at a
    time: every kind of fault to every kind of member before any repeats, one of them the wipe
    of a validator's application database."""
    rng = random.Random(config.seed)
    menu = [(role, kind) for role, kinds in KINDS.items() for kind in kinds]
    rng.shuffle(menu)
    picks = [menu[i % len(menu)] for i in range(config.faults)]
    if ("validator", "wipe") not in picks:
        picks[rng.randrange(len(picks))] = ("validator", "wipe")
    slot = seconds / (len(picks) + 1)
    faults = []
    for i, (role, kind) in enumerate(picks):
        at = slot * (i + 0.5) + rng.uniform(0, slot / 2)
        length = 0.0 if kind in ("kill", "wipe") else rng.uniform(2.0, 5.0)
        faults.append(Fault(round(at, 1), kind, rng.choice(names[role]), round(length, 1)))
    return faults


class Proxies:
    """TCP proxies on loopback, by group, that can be cut for a while: open connections are
    closed and new ones refused until the cut ends."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxies",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._cut_until: dict[str, float] = {}
        self._open: dict[str, set[asyncio.StreamWriter]] = {}
        self._servers: list[asyncio.Server] = []

    def add(self, group: str, upstream: str) -> str:
        """A proxy to ``upstream`` in ``group``: its address."""
        return asyncio.run_coroutine_threadsafe(self._add(group, upstream), self._loop).result()

    async def _add(self, group: str, upstream: str) -> str:
        host, port = upstream.rsplit(":", 1)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if time.monotonic() < self._cut_until.get(group, 0.0):
                writer.close()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                writer.close()
                return
            ends = self._open.setdefault(group, set())
            ends.update((writer, up_writer))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            ends.difference_update((writer, up_writer))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self._servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def cut(self, group: str, seconds: float) -> None:
        """Close every connection of ``group`` and refuse new ones for ``seconds``."""
        self._cut_until[group] = time.monotonic() + seconds

        def close_all() -> None:
            for writer in self._open.pop(group, set()):
                writer.close()

        self._loop.call_soon_threadsafe(close_all)

    def close(self) -> None:
        """Stop every proxy."""
        for server in self._servers:
            self._loop.call_soon_threadsafe(server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@dataclass
class _Member:
    name: str
    role: str  # host, cheater or verifier
    home: Path
    address: str
    chain: str = ""  # --chain: its own proxies, its own validator's first

    @property
    def log(self) -> Path:
        return self.home / ("verifier.log" if self.role == "verifier" else "node.log")


def _signal_tree(pid: int, sig: int) -> None:
    """Signal ``pid`` and its children (a chain node and its CometBFT)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for target in (pid, *map(int, children)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)


class Chaos:
    """One fault-injection run in ``root`` (see the module docstring); ``say`` hears progress."""

    def __init__(self, config: ChaosConfig, root: Path, say: Callable[[str], None] = print):
        self.config = config
        self.root = root
        self.say = say
        self.members: dict[str, _Member] = {}
        self.report = ChaosReport(config)

    def _note(self, line: str) -> None:
        self.report.events.append(line)
        self.say(line)

    def _keys(self) -> None:
        roles = ["host"] * self.config.honest_hosts + ["cheater"]
        roles += ["verifier"] * self.config.verifiers
        for role in roles:
            name = f"{role}-{sum(m.role == role for m in self.members.values())}"
            home = self.root / name
            address = Keyring(home / "keyring").add("k", PASSWORD)[0].address
            self.members[name] = _Member(name, role, home, address)

    def _spawn(self, member: _Member, data: Path) -> subprocess.Popen:
        if member.role == "verifier":
            return spawn_verifier(member.home, "k", member.chain, PASSWORD, "--data", str(data))
        behavior = CHEAT if member.role == "cheater" else "honest"
        return spawn_node(member.home, RUN_ID, "k", member.chain, PASSWORD, "--behavior",
                          behavior, "--wait-for-run", "--data", str(data),
                          "--keep-decided-rounds", str(self.config.rounds + 1))  # fmt: skip

    def run(self) -> ChaosReport:
        """Set up, run with faults, check; the report (``ok`` when every check held)."""
        from dilochain.training.prepare import default_dataset, pins_of
        from dilochain.training.run_config import make_run_config

        started = time.monotonic()
        self._keys()
        creator = wallet(7_000)
        accounts = [str(creator.address()), *(m.address for m in self.members.values())]
        drill = stakes = None
        if self.config.validator_drill:
            drill = ValidatorDrill(self.root / "drill", PASSWORD, self.config.block_time,
                                   self._note)  # fmt: skip
            stakes = drill.operators(self.config.validators)
            accounts += drill.accounts
        funded = {a: {DENOM: 10**12} for a in accounts}
        homes = init_testnet(self.root / "chain", self.config.validators, CHAIN_ID, funded,
                             self.config.block_time, stakes,
                             **genesis_params(self.config))  # fmt: skip
        data = default_dataset(self.root)
        network = LocalNetwork(homes, options=SNAPSHOTS if drill else ())
        proxies = Proxies()
        supervisor = Supervisor(self._note)
        try:
            addresses = network.start()
            for node in network.nodes:
                supervisor.watch(node.home.name, node.proc, lambda n=node: _restarted(n),
                                 node.log_path)  # fmt: skip
            for i, member in enumerate(self.members.values()):
                first = i % len(addresses)
                member.chain = ",".join(proxies.add(member.name, a)
                                        for a in addresses[first:] + addresses[:first])  # fmt: skip
                supervisor.watch(member.name, self._spawn(member, data),
                                 lambda m=member: self._spawn(m, data), member.log)  # fmt: skip
            hosts = [m for m in self.members.values() if m.role != "verifier"]
            verifiers = [m for m in self.members.values() if m.role == "verifier"]
            procs = supervisor.children
            wait_until_ready([procs[m.name].proc for m in hosts], [m.home for m in hosts],
                             [procs[m.name].proc for m in verifiers],
                             [m.home for m in verifiers])  # fmt: skip
            poc = PocClient(addresses)
            # Round 0's roster is the hosts registered by its start: hosts waiting for the run
            # see it, build the model and register, which can take seconds on loaded cores.
            start_delay = math.ceil(START_SECONDS / self._block_seconds())
            cfg = make_run_config(pins_of(data), "tiny", round_blocks=self.config.round_blocks,
                                  total_rounds=self.config.rounds, start_delay_blocks=start_delay,
                                  min_collateral=str(COLLATERAL))  # fmt: skip
            submit(connect(addresses), creator, MsgCreateRun(
                creator=str(creator.address()), run_id=RUN_ID, config=cfg))  # fmt: skip
            self.say(f"run {RUN_ID!r} created: {self.config.rounds} rounds")
            spared = ""
            if drill is not None:
                drill.start(network)
                spared = drill.spared
            names = {"validator": [n.home.name for n in network.nodes
                                   if n.home.name != spared],
                     "host": [m.name for m in hosts if m.role == "host"],
                     "verifier": [m.name for m in verifiers]}  # fmt: skip
            self.report.faults = plan(self.config, self._expected_seconds(poc), names)
            self._inject(network, proxies, supervisor, poc)
            self._finish(poc, supervisor, hosts, drill)
            self.say("run over; checking")
            self._check(network, poc, cfg, drill)
        finally:
            if drill is not None:
                drill.close()
            for child in supervisor.children.values():
                if child.proc is not None and child.proc.poll() is None:
                    child.proc.terminate()
            for child in supervisor.children.values():
                if child.proc is not None:
                    try:
                        child.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        child.proc.kill()
            network.stop()
            proxies.close()
        self.report.seconds = time.monotonic() - started
        return self.report

    # ---- faults -----------------------------------------------------------------------------
    def _block_seconds(self) -> float:
        return float(self.config.block_time.removesuffix("ms")) / 1000

    def _expected_seconds(self, poc: PocClient) -> float:
        """Seconds until the run's last round resolves, at the configured block time."""
        run, params = poc.run(RUN_ID), poc.params()
        last = schedule.round_window(run, params, self.config.rounds - 1).resolution
        block = self._block_seconds()
        return (last - poc.round_info(RUN_ID).height) * block * 1.2

    def _inject(self, network: LocalNetwork, proxies: Proxies, supervisor: Supervisor,
                poc: PocClient) -> None:  # fmt: skip
        """Each fault of the plan at its moment, the supervisor starting the dead meanwhile."""
        t0 = time.monotonic()
        for fault in self.report.faults:
            while time.monotonic() - t0 < fault.at:
                supervisor.check()
                time.sleep(0.3)
            member = self.members.get(fault.target)
            if member is not None:
                self._wait_out_reveals(poc, member, supervisor)
            fault.done_at = round(time.monotonic() - t0, 1)
            self.say(f"t={fault.done_at:6.1f}s  {fault.kind:10s} {fault.target}"
                     + (f" for {fault.seconds:.1f} s" if fault.seconds else ""))  # fmt: skip
            proc = supervisor.children[fault.target].proc
            if fault.kind == "disconnect":
                proxies.cut(fault.target, fault.seconds)
            elif proc is None or proc.poll() is not None:
                continue  # finished (a host at the end of its run) or already down
            elif fault.kind == "pause":
                _signal_tree(proc.pid, signal.SIGSTOP)
                time.sleep(fault.seconds)
                _signal_tree(proc.pid, signal.SIGCONT)
            else:  # kill, or wipe: a kill, then the application database removed
                _signal_tree(proc.pid, signal.SIGKILL)
                proc.wait()
                if fault.kind == "wipe":
                    home = network.nodes[int(fault.target.removeprefix("node"))].home
                    for path in db_path(home).parent.glob("chain.db*"):
                        path.unlink()

    def _wait_out_reveals(self, poc: PocClient, member: _Member,
                          supervisor: Supervisor, patience: float = 60) -> None:  # fmt: skip
        """Hold a host's kill while one of its commits is in (or about to enter) its reveal
        window: a host that stays down through the window is rightly slashed, and a restart
        takes several seconds here."""
        if member.role == "verifier":
            return
        run, params = poc.run(RUN_ID), poc.params()
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            height = poc.round_info(RUN_ID).height
            windows = [
                w
                for w in schedule.in_flight(run, params, height + 1)
                if w.selection - 4 <= height <= w.selection + params.reveal_window_blocks
            ]
            due = [
                w
                for w in windows
                if any(c.host == member.address for c in poc.commits(RUN_ID, w.round))
            ]
            if not due:
                return
            supervisor.check()
            time.sleep(0.5)

    def _finish(self, poc: PocClient, supervisor: Supervisor, hosts: list[_Member],
                drill: ValidatorDrill | None, patience: float = 600) -> None:  # fmt: skip
        """Until the run's last round has resolved, its hosts have ended and the drill is
        over."""
        run, params = poc.run(RUN_ID), poc.params()
        last = schedule.round_window(run, params, self.config.rounds - 1).resolution
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            supervisor.check()
            running = [m.name for m in hosts if m.name in supervisor.running]
            drilling = drill is not None and not drill.done
            if poc.round_info(RUN_ID).height > last and not running and not drilling:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the run did not end within {patience:.0f} s")

    # ---- checks -----------------------------------------------------------------------------
    def _check(self, network: LocalNetwork, poc: PocClient, cfg: RunConfig,
               drill: ValidatorDrill | None) -> None:  # fmt: skip
        report, rounds = self.report, range(self.config.rounds)
        by_address = {m.address: m.name for m in self.members.values()}
        by_address.update(drill.names if drill is not None else {})
        commits = {r: list(poc.commits(RUN_ID, r)) for r in rounds}
        challenges = [c for r in rounds for c in poc.challenges(RUN_ID, r)]
        report.outcomes = {r: {by_address.get(c.host, c.host): CommitOutcome.Name(c.outcome)
                               .removeprefix("COMMIT_OUTCOME_") for c in commits[r]}
                           for r in rounds}  # fmt: skip
        report.slashes = [(by_address.get(s.address, s.address), s.reason)
                          for s in poc.slashes()]  # fmt: skip
        open_ = [c for cs in commits.values() for c in cs if c.outcome == PENDING]
        undecided = [c for c in challenges if c.status == ChallengeStatus.CHALLENGE_STATUS_PENDING]
        report.checks["every commit and challenge decided"] = (
            not open_ and not undecided,
            f"{sum(map(len, commits.values()))} commits, {len(challenges)} challenges",
        )
        trained = [r for r in rounds if commits[r]]
        report.checks[LIVENESS] = (len(trained) == len(rounds),
                                   f"rounds with commits: {trained or 'none'}")  # fmt: skip
        honest = [m for m in self.members.values() if m.role == "host"]
        hit = [name for name, _ in report.slashes if name in {m.name for m in honest}]
        report.checks["no honest host slashed"] = (not hit, ", ".join(hit) or "none")
        report.checks["every cheater caught and paid nothing"] = self._cheaters_caught(poc)
        report.checks["no undecided or failed commit in a global state"] = _recompute(
            cfg, commits, {g.round: g.hash for g in poc.global_checkpoints(RUN_ID)},
            [m.home for m in self.members.values() if m.role != "verifier"],
            poc.params().fail_closed, poc.params().min_hosts_per_round,
        )  # fmt: skip
        joined = drill.joined if drill is not None else []
        report.checks["every validator's app hash equal"] = _app_hashes_agree(
            [*network.nodes, *joined]
        )
        if drill is not None:
            report.checks.update(drill.checks(poc))

    def _cheaters_caught(self, poc: PocClient) -> tuple[bool, str]:
        cheaters = [m for m in self.members.values() if m.role == "cheater"]
        current = poc.epoch().epoch
        notes = []
        for m in cheaters:
            slashed = bool(poc.slashes(m.address))
            paid = sum(int(poc.claimable(m.address, e).amount) for e in range(current + 1))
            paid += sum(int(g.total) for g in poc.vesting(m.address))
            notes.append((m.name, slashed, paid))
        ok = all(slashed and not paid for _, slashed, paid in notes)
        return ok, "; ".join(f"{n}: slashed {s}, paid {p}" for n, s, p in notes)


def _restarted(node) -> subprocess.Popen:
    node.start(wait=False)  # replaying or syncing may take long: the harness goes on meanwhile
    return node.proc


def _recompute(cfg: RunConfig, commits: dict, recorded: dict[int, bytes], homes: list[Path],
               fail_closed: bool, min_hosts: int) -> tuple[bool, str]:  # fmt: skip
    """Every recorded global state, computed again from θ_0 and each round's aggregated
    pseudo-gradients (:func:`~dilochain.node.aggregation.aggregated`: on a fail-closed chain,
    ACCEPTED commits only): equal hashes show no other commit entered the model."""
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.node.aggregation import aggregated
    from dilochain.training.compress import decompress
    from dilochain.training.diloco import initial_global, outer_step
    from dilochain.training.model import build_model
    from dilochain.training.tensor_codec import state_hash

    stores = [LocalArtifactStore(h / "artifacts") for h in homes]
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    checked, left_out = 0, 0
    for r in sorted(commits):
        if r in recorded:
            if state_hash(state) != recorded[r]:
                return False, f"round {r}'s global state is not the accepted commits' outer step"
            checked += 1
        base = state_hash(state)
        taken = [c for c in commits[r] if aggregated(c, fail_closed) and c.base_hash == base]
        left_out += len(commits[r]) - len(taken)
        deltas = []
        for c in taken:
            store = next((s for s in stores if s.has(c.pseudo_grad_hash)), None)
            if store is None:
                return False, f"round {r}: an accepted pseudo-gradient is on no host"
            deltas.append(decompress(store.get(c.pseudo_grad_hash)))
        if len(deltas) >= min_hosts:
            state = outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)
    return checked > 0, f"{checked} global states recomputed, {left_out} commits left out"


def _app_hashes_agree(nodes: list) -> tuple[bool, str]:
    """Every node's header app hash at a sample of the heights all of them hold (a node that
    joined by state sync holds none before its snapshot)."""
    try:
        return _compare_app_hashes(nodes)
    except (OSError, ValueError) as err:  # a node that does not answer: the check fails
        return False, f"a node's RPC does not answer: {err}"


def _compare_app_hashes(nodes: list) -> tuple[bool, str]:
    synced = [rpc_call(n.rpc_address, "status")["sync_info"] for n in nodes]
    top = min(int(s["latest_block_height"]) for s in synced)
    low = max(int(s["earliest_block_height"]) for s in synced)
    heights = sorted({*range(low, top + 1, max(1, (top - low) // 12)), top})
    for h in heights:
        found = {rpc_call(n.rpc_address, "block", height=str(h))["block"]["header"]["app_hash"]
                 for n in nodes}  # fmt: skip
        if len(found) != 1:
            return False, f"at height {h}: {sorted(found)}"
    return True, f"{len(heights)} heights from {low} to {top} on {len(nodes)} nodes"
