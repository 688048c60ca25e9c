"""Protocol traffic of one run at network scale, without training: ``--hosts`` simulated hosts
and ``--verifiers`` simulated verifiers take a run through ``--rounds`` rounds on one chain.

Each member has its own key and account and sends the protocol's real txs, signed by cosmpy and
broadcast to CometBFT (``broadcast_tx_sync``): a host deposits collateral, registers, commits
every round (a Merkle root over random checkpoint hashes, the final leaf opened) and reveals
every segment the chain challenges; a verifier deposits, registers, commits and opens its
beacon secret, screens the commits whose committee it is on, and seals and opens a vote on
every challenge it is a primary of (every screen passes and every vote agrees: the honest
network's traffic). Members follow the chain by CometBFT's ``NewBlockHeader`` events, not by
polling: at each new block they do what the round's schedule calls for.

Printed per round: the txs (and messages) the chain included, by kind, and txs per member;
the busiest block (txs, bytes, against CometBFT's ``max_bytes``); block intervals; and whether
every window held: every host committed, every beacon opened, every commit screened passing,
every challenge revealed and passed, nobody slashed.

    .venv/bin/python -m bench.protocol_traffic [--hosts 1000] [--verifiers 50] [--rounds 3]
        [--block-time 1s] [--round-blocks 10]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import os
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.wallet import LocalWallet
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from bench.chain_ceiling import _seconds
from dilochain.client import network_config
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as beacon_encoding
from dilochain.protocol import committee, schedule
from dilochain.protocol import verdict as sealing
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.merkle import merkle_proof, merkle_root
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitBeacon,
    MsgCommitRound,
    MsgCreateRun,
    MsgDepositCollateral,
    MsgOpenVerdict,
    MsgRegisterHost,
    MsgRegisterVerifier,
    MsgRevealBeacon,
    MsgRevealCheckpoints,
    MsgSubmitScreen,
    MsgSubmitVerdict,
    ScreenVote,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, ChallengeStatus, Run
from dilochain.testutil import CHAIN_ID, FAKE_DATA, signed_tx, wallet
from dilochain.training.run_config import make_run_config
from dilochain.verifier.round_duties import MSGS_PER_TX, VOTES_PER_SCREEN_MSG

RUN_ID = "traffic"
HOST_COLLATERAL = 1_000_000
VERIFIER_COLLATERAL = 10_000_000
GAS_PER_MSG = 200_000
GAS_PER_VOTE = 25_000  # a screen vote (measured ~15,000: reads of the commit and screen, a write)
SEGMENTS = 4
KINDS = ("register", "commit", "beacon commit", "beacon reveal", "screen", "reveal", "vote",
         "vote opening")  # fmt: skip


def _gas(msg: Message) -> int:
    """A message's gas limit: a screen message's grows with its votes."""
    return GAS_PER_MSG + GAS_PER_VOTE * len(msg.votes if isinstance(msg, MsgSubmitScreen) else ())


@dataclass
class Member:
    """One simulated host or verifier: its key, account number and next sequence."""

    key: LocalWallet
    number: int = 0
    sequence: int = 0

    @property
    def address(self) -> str:
        return str(self.key.address())


@dataclass
class Sent:
    """A tx CheckTx admitted: the round it serves, its kind and its messages."""

    round: int
    kind: str
    msgs: int


class Broadcaster:
    """Signs each member's txs in sequence and posts them to CometBFT's ``broadcast_tx_sync``,
    at most ``streams`` at a time; keeps what was admitted (by tx hash) and what was refused."""

    def __init__(self, session: aiohttp.ClientSession, rpc: str, streams: int = 64):
        self.session, self.url = session, f"http://{rpc}"
        self.slots = asyncio.Semaphore(streams)
        self.locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.sent: dict[bytes, Sent] = {}
        self.refused: list[tuple[int, str, str]] = []  # (round, kind, CheckTx's log)

    async def send(self, member: Member, round_: int, kind: str, msgs: list[Message]) -> None:
        """``msgs`` from ``member``, ``MSGS_PER_TX`` to a tx, in order."""
        async with self.locks[member.address]:
            for first in range(0, len(msgs), MSGS_PER_TX):
                batch = msgs[first : first + MSGS_PER_TX]
                raw = signed_tx(member.key, batch, sequence=member.sequence,
                                account_number=member.number, gas_limit=sum(map(_gas, batch)),
                                chain_id=CHAIN_ID)  # fmt: skip
                body = {"jsonrpc": "2.0", "id": 1, "method": "broadcast_tx_sync",
                        "params": {"tx": base64.b64encode(raw).decode()}}  # fmt: skip
                async with self.slots, self.session.post(self.url, json=body) as reply:
                    answer = (await reply.json()).get("result", {"code": -1, "log": "no result"})
                if answer["code"] == 0:
                    member.sequence += 1
                    self.sent[tx_hash(raw)] = Sent(round_, kind, len(batch))
                else:
                    self.refused.append((round_, kind, answer.get("log", "")))


class Heights:
    """The latest committed height, from CometBFT's ``NewBlockHeader`` events."""

    def __init__(self, session: aiohttp.ClientSession, rpc: str):
        self.session, self.url = session, f"ws://{rpc}/websocket"
        self.latest = 0
        self.changed = asyncio.Event()
        self.seen: dict[int, float] = {}  # height: when announced

    async def follow(self) -> None:
        async with self.session.ws_connect(self.url, max_msg_size=0) as ws:
            await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                                "params": {"query": "tm.event='NewBlockHeader'"}})  # fmt: skip
            async for message in ws:
                data = message.json().get("result", {}).get("data")
                if data:
                    self.latest = int(data["value"]["header"]["height"])
                    self.seen[self.latest] = time.time()
                    self.changed.set()

    async def next(self, after: int) -> int:
        """The latest height once it is above ``after``."""
        while self.latest <= after:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 60)  # the chain stopped
        return self.latest


class Network:
    """The simulated members' duties, block by block."""

    def __init__(
        self, poc: PocClient, run: Run, hosts: list[Member], verifiers: list[Member],
        out: Broadcaster,
    ):  # fmt: skip
        self.poc, self.run, self.out = poc, run, out
        self.params = poc.params()
        self.hosts = {m.address: m for m in hosts}
        self.verifiers = {m.address: m for m in verifiers}
        self.done: set[tuple[int, str]] = set()  # (round, action) of everyone
        self.voted: set[tuple[str, int, str, int]] = set()  # (verifier, round, host, segment)
        self.openings: dict[tuple[str, int], list[MsgOpenVerdict]] = defaultdict(list)
        self.leaves: dict[tuple[str, int], list[bytes]] = {}
        self.fingerprint = os.urandom(sealing.EXACT_BYTES)  # every replay reaches one state

    async def block(self, next_block: int) -> bool:
        """The duties of ``next_block`` in every round in flight; whether the run is over."""
        windows = [w for w in schedule.in_flight(self.run, self.params, next_block)
                   if w.round < self.run.config.total_rounds]  # fmt: skip
        for w in windows:
            await self._round(w, next_block)
        last = schedule.round_window(self.run, self.params, self.run.config.total_rounds - 1)
        return next_block > last.resolution

    async def _once(self, round_: int, action: str, sends: Callable[[], list]) -> None:
        """Everyone's ``action`` of the round (``sends`` makes their sends), once."""
        if (round_, action) not in self.done:
            self.done.add((round_, action))
            await asyncio.gather(*sends())

    async def _round(self, w: schedule.Window, next_block: int) -> None:
        r = w.round
        if w.start <= next_block <= w.end:
            roster = await asyncio.to_thread(self.poc.roster, RUN_ID, r)
            if roster is not None:
                await self._once(
                    r, "commit", lambda: [self._commit(self.hosts[h], r) for h in roster]
                )
            await self._once(r, "beacon commit", lambda: [
                self.out.send(v, r, "beacon commit", [MsgCommitBeacon(
                    verifier=v.address, run_id=RUN_ID, round=r,
                    commitment=beacon_encoding.commitment(self._secret(v, r), v.address))])
                for v in self.verifiers.values()])  # fmt: skip
        elif w.end < next_block <= w.selection:
            await self._once(r, "beacon reveal", lambda: [
                self.out.send(v, r, "beacon reveal", [MsgRevealBeacon(
                    verifier=v.address, run_id=RUN_ID, round=r, secret=self._secret(v, r))])
                for v in self.verifiers.values()])  # fmt: skip
            if (r, "screen") not in self.done:
                found = await asyncio.to_thread(self.poc.beacon, RUN_ID, r)
                if found.anchor:
                    screens = await self._screens(w, found.anchor)
                    await self._once(r, "screen", lambda: screens)
        elif next_block < w.opening:
            challenges = await asyncio.to_thread(self.poc.challenges, RUN_ID, r)
            await self._once(r, "reveal", lambda: self._reveals(r, challenges))
            await asyncio.gather(*self._votes(r, challenges))
        else:
            await self._once(r, "vote opening", lambda: [
                self.out.send(self.verifiers[v], r, "vote opening", msgs)
                for (v, round_), msgs in self.openings.items() if round_ == r])  # fmt: skip

    def _secret(self, verifier: Member, round_: int) -> bytes:
        return (verifier.address + f"/{round_}").encode().ljust(32, b"\0")[-32:]

    async def _commit(self, host: Member, round_: int) -> None:
        leaves = [os.urandom(32) for _ in range(SEGMENTS + 1)]
        self.leaves[host.address, round_] = leaves
        cfg = self.run.config
        await self.out.send(host, round_, "commit", [MsgCommitRound(
            host=host.address, run_id=RUN_ID, round=round_, ckpt_root=merkle_root(leaves),
            final_hash=leaves[-1], final_proof=merkle_proof(leaves, SEGMENTS),
            pseudo_grad_hash=os.urandom(32), base_hash=b"\x02" * 32, residual_hash=os.urandom(32),
            tokens=cfg.inner_steps * cfg.batch_size * cfg.seq_len, loss=3.0, eval_loss=3.1,
            data_seed=schedule.derive_data_seed(cfg.seed, host.address, round_),
        )])  # fmt: skip

    async def _screens(self, w: schedule.Window, anchor: bytes) -> list:
        commits = await asyncio.to_thread(self.poc.commits, RUN_ID, w.round)
        registered = await asyncio.to_thread(self.poc.verifiers)
        candidates = committee.eligible(registered, w.start)
        votes: dict[str, list[ScreenVote]] = defaultdict(list)
        for c in commits:
            for v in committee.screen_committee(anchor, RUN_ID, w.round, c.host, candidates,
                                                self.params.screeners_per_commit):  # fmt: skip
                votes[v].append(ScreenVote(host=c.host, passed=True, evidence_hash=b"\x05" * 32))
        return [self.out.send(self.verifiers[v], w.round, "screen", [
                    MsgSubmitScreen(verifier=v, run_id=RUN_ID, round=w.round,
                                    votes=mine[i : i + VOTES_PER_SCREEN_MSG])
                    for i in range(0, len(mine), VOTES_PER_SCREEN_MSG)])
                for v, mine in votes.items()]  # fmt: skip

    def _reveals(self, round_: int, challenges: list[Challenge]) -> list:
        owed: dict[str, list[Message]] = defaultdict(list)
        for c in challenges:
            leaves = self.leaves[c.host, round_]
            owed[c.host].append(MsgRevealCheckpoints(
                host=c.host, run_id=RUN_ID, round=round_, segment=c.segment,
                start_hash=leaves[c.segment], end_hash=leaves[c.segment + 1],
                final_hash=leaves[-1], start_proof=merkle_proof(leaves, c.segment),
                end_proof=merkle_proof(leaves, c.segment + 1),
                final_proof=merkle_proof(leaves, SEGMENTS),
            ))  # fmt: skip
        return [self.out.send(self.hosts[h], round_, "reveal", msgs) for h, msgs in owed.items()]

    def _votes(self, round_: int, challenges: list[Challenge]) -> list:
        """A sealed vote from each primary of each revealed challenge, once."""
        sealed: dict[str, list[Message]] = defaultdict(list)
        for c in challenges:
            for v in c.verifiers[: c.primaries] if c.revealed else ():
                if (v, round_, c.host, c.segment) in self.voted:
                    continue
                self.voted.add((v, round_, c.host, c.segment))
                salt = os.urandom(sealing.SALT_BYTES)
                fields = {"verifier": v, "run_id": RUN_ID, "round": round_, "host": c.host,
                          "segment": c.segment}  # fmt: skip
                sealed[v].append(
                    MsgSubmitVerdict(
                        **fields,
                        commitment=sealing.commitment(
                            v, RUN_ID, round_, c.host, c.segment, True, self.fingerprint, salt
                        ),
                    )
                )
                self.openings[v, round_].append(MsgOpenVerdict(
                    **fields, passed=True, fingerprint=self.fingerprint, salt=salt,
                    evidence_hash=b"\x06" * 32))  # fmt: skip
        return [self.out.send(self.verifiers[v], round_, "vote", msgs)
                for v, msgs in sealed.items()]  # fmt: skip


async def _rpc(session: aiohttp.ClientSession, rpc: str, method: str, **params) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with session.post(f"http://{rpc}", json=body) as reply:
        return (await reply.json())["result"]


@dataclass
class Report:
    """What the chain included, per round and kind, and per block."""

    txs: dict[int, Counter]  # round: kind: txs included
    msgs: dict[int, Counter]  # round: kind: messages included
    blocks: list[tuple[int, int, int]]  # (height, txs, bytes) of every block of the run
    durations: list[tuple[float, int]]  # (seconds, height): the next block's header time - its
    failed: int  # included txs whose messages failed in FinalizeBlock
    max_bytes: int
    slowest: list[tuple[float, int, str]] = field(default_factory=list)  # and where in the run


async def _report(session, rpc: str, out: Broadcaster, heights: range) -> Report:
    txs: dict[int, Counter] = defaultdict(Counter)
    msgs: dict[int, Counter] = defaultdict(Counter)
    blocks, times, failed = [], [], 0
    for height in heights:
        block = (await _rpc(session, rpc, "block", height=str(height)))["block"]
        raws = [base64.b64decode(t) for t in block["data"]["txs"] or []]
        results = await _rpc(session, rpc, "block_results", height=str(height))
        failed += sum(r["code"] != 0 for r in results.get("txs_results") or [])
        for raw in raws:
            sent = out.sent.get(tx_hash(raw))
            if sent is not None:
                txs[sent.round][sent.kind] += 1
                msgs[sent.round][sent.kind] += sent.msgs
        blocks.append((height, len(raws), sum(map(len, raws))))
        times.append(_seconds(block["header"]["time"]))
    params = await _rpc(session, rpc, "consensus_params")
    durations = [
        (b - a, h) for (h, a), (_, b) in itertools.pairwise(zip(heights, times, strict=True))
    ]
    return Report(txs, msgs, blocks, durations, failed,
                  int(params["consensus_params"]["block"]["max_bytes"]))  # fmt: skip


def _held(poc: PocClient, round_: int, hosts: int, verifiers: int) -> list[str]:
    """What did not hold in a round (empty: every window held)."""
    problems = []
    commits = poc.commits(RUN_ID, round_)
    if len(commits) != hosts:
        problems.append(f"{len(commits)}/{hosts} commits")
    opened = [e for e in poc.beacon(RUN_ID, round_).entries if e.secret]
    if len(opened) != verifiers:
        problems.append(f"{len(opened)}/{verifiers} beacons opened")
    passed = sum(s.passed for s in poc.screens(RUN_ID, round_))
    if passed != len(commits):
        problems.append(f"{passed}/{len(commits)} screens passed")
    challenges = poc.challenges(RUN_ID, round_)
    ok = sum(c.status == ChallengeStatus.CHALLENGE_STATUS_PASSED for c in challenges)
    if ok != len(challenges):
        problems.append(f"{ok}/{len(challenges)} challenges passed")
    return problems


async def simulate(args: argparse.Namespace, root: Path, console: Console) -> None:
    """Run the simulation and print its tables."""
    creator = Member(wallet(900_000))
    hosts = [Member(wallet(100_000 + i)) for i in range(args.hosts)]
    verifiers = [Member(wallet(200_000 + i)) for i in range(args.verifiers)]
    everyone = [creator, *hosts, *verifiers]
    init_localnet(root, CHAIN_ID, {m.address: {DENOM: 10**13} for m in everyone})
    with ChainProcess(root, args.block_time) as chain:
        ledger = LedgerClient(network_config(CHAIN_ID, chain.address))
        for m in everyone:
            m.number = ledger.query_account(m.address).number
        poc = PocClient(chain.address)
        # CometBFT closes a connection idle for 10 s (its ReadTimeout); aiohttp keeps one 15 s.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=5)
        async with aiohttp.ClientSession(connector=connector) as session:
            out = Broadcaster(session, chain.rpc_address)
            heights = Heights(session, chain.rpc_address)
            follower = asyncio.ensure_future(heights.follow())
            run = await _register(args, poc, out, heights, creator, hosts, verifiers, console)
            network = Network(poc, run, hosts, verifiers, out)
            height = heights.latest
            while not await network.block(height + 1):
                height = await heights.next(height)
            follower.cancel()
            report = await _report(session, chain.rpc_address, out,
                                   range(run.start_height, height + 1))  # fmt: skip
        report.slowest = [(took, h, _place(run, network.params, h))
                          for took, h in sorted(report.durations, reverse=True)[:3]]  # fmt: skip
        held = {r: _held(poc, r, args.hosts, args.verifiers) for r in range(args.rounds)}
        slashed = len(poc.slashes())
    _print(console, args, report, held, slashed, out.refused)


async def _register(
    args: argparse.Namespace, poc: PocClient, out: Broadcaster, heights: Heights,
    creator: Member, hosts: list[Member], verifiers: list[Member], console: Console,
) -> Run:  # fmt: skip
    """Create the run, with a start delay long enough for every member to register before
    round 0's roster is drawn, and register them all."""
    cfg = make_run_config(FAKE_DATA, "tiny", min_collateral=str(HOST_COLLATERAL), max_hosts=0,
                          round_blocks=args.round_blocks, total_rounds=args.rounds,
                          inner_steps=SEGMENTS * 4, checkpoint_interval=4,
                          start_delay_blocks=8 + (len(hosts) + len(verifiers)) // 200)  # fmt: skip
    height = await heights.next(0)
    await out.send(creator, -1, "register",
                   [MsgCreateRun(creator=creator.address, run_id=RUN_ID, config=cfg)])  # fmt: skip
    while poc.run(RUN_ID) is None:
        height = await heights.next(height)
    started = time.monotonic()
    await asyncio.gather(
        *(out.send(h, -1, "register", [
            MsgDepositCollateral(depositor=h.address, amount=str(HOST_COLLATERAL)),
            MsgRegisterHost(host=h.address, run_id=RUN_ID, endpoint="https://h.example:443")])
          for h in hosts),
        *(out.send(v, -1, "register", [
            MsgDepositCollateral(depositor=v.address, amount=str(VERIFIER_COLLATERAL)),
            MsgRegisterVerifier(verifier=v.address)])
          for v in verifiers),
    )  # fmt: skip
    console.print(f"{len(hosts) + len(verifiers)} registrations broadcast in "
                  f"{time.monotonic() - started:.1f} s")  # fmt: skip
    return poc.run(RUN_ID)


def _place(run: Run, params, height: int) -> str:
    """Where ``height`` is in the run's schedule."""
    places = []
    for w in schedule.in_flight(run, params, height):
        if height <= w.end:
            places.append(f"round {w.round} commit window")
        elif height == w.end + 1:
            places.append(f"round {w.round} anchor (screens start)")
        elif height <= w.selection:
            places.append(f"round {w.round} screens" + (", selection" * (height == w.selection)))
        elif height < w.opening:
            places.append(f"round {w.round} reveals and votes")
        else:
            places.append(f"round {w.round} openings" + (", resolution" * (height == w.resolution)))
    return "; ".join(places) or "before the run"


def _print(console: Console, args, report: Report, held: dict, slashed: int, refused) -> None:
    rounds = range(args.rounds)
    table = Table("txs (messages)", *(f"round {r}" for r in rounds),
                  title=f"Protocol txs included per round: {args.hosts} hosts, "
                        f"{args.verifiers} verifiers")  # fmt: skip
    for kind in KINDS[1:]:
        table.add_row(kind, *(f"{report.txs[r][kind]} ({report.msgs[r][kind]})" for r in rounds))
    totals = [sum(report.txs[r].values()) for r in rounds]
    table.add_row("all", *map(str, totals))
    table.add_row("per host + verifier", *(f"{t / (args.hosts + args.verifiers):.2f}"
                                           for t in totals))  # fmt: skip
    table.add_row("every window held", *("yes" if not held[r] else "NO: " + ", ".join(held[r])
                                         for r in rounds))  # fmt: skip
    console.print(table)
    busiest = max(report.blocks, key=lambda b: b[2])
    fill = Table("", "value", title="Blocks")
    fill.add_row("blocks of the rounds", str(len(report.blocks)))
    fill.add_row("busiest block (txs, bytes)", f"{busiest[1]} txs, {busiest[2]:,} B at height "
                 f"{busiest[0]}: {busiest[2] / report.max_bytes:.1%} of max_bytes "
                 f"{report.max_bytes:,}")  # fmt: skip
    seconds = [d for d, _ in report.durations]
    fill.add_row("block interval (mean, max)", f"{statistics.mean(seconds):.2f} s, "
                 f"{max(seconds):.2f} s (target {args.block_time})")  # fmt: skip
    for took, height, place in report.slowest:
        fill.add_row(f"slow: block {height}", f"{took:.2f} s, {place}")
    fill.add_row("included txs failed in FinalizeBlock", str(report.failed))
    fill.add_row("txs CheckTx refused", str(len(refused)))
    fill.add_row("slashes", str(slashed))
    console.print(fill)
    for round_, kind, log in refused[:5]:
        console.print(f"[yellow]refused[/] round {round_} {kind}: {log}")
    problems = [f"round {r}: {', '.join(found)}" for r, found in held.items() if found]
    problems += [f"{len(refused)} txs refused"] * bool(refused)
    problems += [f"{slashed} slashes"] * bool(slashed)
    console.print("held: every window of every round, nothing refused, nobody slashed"
                  if not problems else "[red]NOT HELD:[/] " + "; ".join(problems))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--verifiers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block-time", default="1s")
    parser.add_argument(
        "--round-blocks",
        type=int,
        default=10,
        help="commit window, in blocks (it must hold every host's commit)",
    )
    parser.add_argument("--dir", type=Path, help="keep the chain's home (and its logs) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(simulate(args, (args.dir or Path(tmp)) / "chain", Console()))


if __name__ == "__main__":
    main()
