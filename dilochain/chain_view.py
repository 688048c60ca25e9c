"""What ``dilochain status`` and the dashboard show, read from the chain once: the chain and its
epoch, each run's round and where it stands in it, loss curve, hosts (commits, throughput,
collateral, slashes, rewards), the challenges and verdicts of the round being verified, the
verifiers (collateral, slashes, when the chain last saw them, rewards), and recent epochs' rewards
and claims. Plain JSON-ready data; amounts in udlc."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

import grpc
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.types import Block

from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.query_pb2 import QueryRoundInfoResponse
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    ChallengeStatus,
    EpochInfo,
    Host,
    RoundCommit,
    Run,
    Slash,
    Verifier,
)

RECENT_EPOCHS = 8  # epochs whose rewards and claims a view lists
BlockTime = Callable[[int], float | None]  # a block's time (unix seconds) by height


def curve_of(commits: dict[int, list[RoundCommit]]) -> list[tuple[int, float]]:
    """(round, median committed eval loss of the round's base state) for rounds with commits,
    from each round's commits."""
    curve = []
    for r, found in sorted(commits.items()):
        losses = [c.eval_loss for c in found if c.eval_loss]
        if losses:
            curve.append((r, statistics.median(losses)))
    return curve


def eval_curve(poc: PocClient, run_id: str, rounds: int) -> list[tuple[int, float]]:
    """(round, median committed eval loss of the round's base state) for rounds with commits."""
    return curve_of({r: poc.commits(run_id=run_id, round=r) for r in range(rounds)})


def block_times(client: LedgerClient, latest: Block) -> BlockTime:
    """A block's time (unix seconds) by height, each asked of the chain at most once (None for
    a block the node does not have)."""
    known: dict[int, float | None] = {latest.height: latest.time.timestamp()}

    def time_of(height: int) -> float | None:
        if height not in known:
            try:
                known[height] = client.query_block(height).time.timestamp()
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                known[height] = None
        return known[height]

    return time_of


def _phase(info: QueryRoundInfoResponse, height: int) -> str:
    if info.finished:
        return "finished"
    if height + 1 < info.window_start:
        return "waiting"
    return "commit" if height + 1 <= info.window_end else "challenge"


def _verification_step(info: QueryRoundInfoResponse, at: int) -> str:
    if at <= info.selection_height:
        return "beacon"
    return "reveals and verdicts" if at < info.verdict_open_height else "verdicts opened"


def progress(info: QueryRoundInfoResponse, run: Run, height: int) -> dict:
    """Where the run stands, for a progress bar: the stage the next block belongs to, which of
    its blocks that is (from 1) of how many, and the block that resolves the round whose
    challenges the view shows (None once the run is over)."""
    at = height + 1
    if info.finished:
        return {"stage": "finished", "block": 0, "blocks": 0, "resolves_at": None}
    if at < info.window_start:
        stage = f"round {info.round} starts at block {info.window_start}"
        block, blocks = at - run.created_height, info.window_start - run.created_height
    elif at <= info.window_end:
        stage = "commit window"
        block, blocks = at - info.window_start + 1, info.window_end - info.window_start + 1
    else:
        stage = f"verification ({_verification_step(info, at)})"
        block, blocks = at - info.window_end, info.resolution_height - info.window_end
    behind = info.round - _verified_round(run, info)  # 1 in an overlapped run: one stride back
    resolves = info.resolution_height - behind * run.config.round_blocks
    return {"stage": stage, "block": block, "blocks": blocks, "resolves_at": resolves}


def _verified_round(run: Run, info: QueryRoundInfoResponse) -> int:
    """The round being verified: the current one, or in an overlapped run the one before,
    verified while the current one trains."""
    verified = info.round - 1 if run.config.overlap and info.round else info.round
    return min(verified, run.config.total_rounds - 1)


def _closed_round(run: Run, info: QueryRoundInfoResponse, height: int) -> int | None:
    """The newest round whose commit window had closed by ``height`` (None before round 0's)."""
    if info.finished:
        return run.config.total_rounds - 1
    if height >= info.window_end:
        return info.round
    return info.round - 1 if info.round else None


def round_seconds(
    run: Run, info: QueryRoundInfoResponse, round_: int, times: BlockTime
) -> float | None:
    """Seconds round ``round_`` took: one stride of the run's schedule (its whole period, or
    in an overlapped run its commit window) up to the last block of its commit window; None
    when the node lacks either block."""
    stride = (run.config.round_blocks if run.config.overlap
              else info.resolution_height - info.window_start + 1)  # fmt: skip
    end = info.window_end - (info.round - round_) * stride
    start, finish = times(max(1, end - stride)), times(end)
    if start is None or finish is None or finish <= start:
        return None
    return finish - start


def last_seen(host: Host | None, commits: Iterable[RoundCommit]) -> dict | None:
    """The latest block at which the chain recorded something of a host (a commit, its
    registration or its leaving) and what it was; None if it recorded nothing."""
    events = [(c.height, f"commit of round {c.round}") for c in commits]
    if host is not None:
        events.append((host.registered_height, "registered"))
        if host.left_height:
            events.append((host.left_height, "left the run"))
    if not events:
        return None
    height, what = max(events)
    return {"height": height, "what": what}


def _status_name(status: int) -> str:
    return ChallengeStatus.Name(status).removeprefix("CHALLENGE_STATUS_").lower()


def _slashed_in(slashes: list[Slash], run_id: str) -> dict[str, int]:
    slashed: dict[str, int] = {}
    for s in slashes:
        if s.run_id == run_id:
            slashed[s.address] = slashed.get(s.address, 0) + int(s.amount)
    return slashed


def _hosts(
    poc: PocClient, run_id: str, slashes: list[Slash], commits: dict[int, list[RoundCommit]],
    shown: int, rates: dict[str, float],
) -> list[dict]:  # fmt: skip
    """The run's hosts (members, leavers, and hosts slashed out of it, but not verifiers slashed
    in it): endpoint, membership, whether they committed round ``shown``, when the chain last
    saw them, tokens per second, collateral and slashes."""
    slashed = _slashed_in(slashes, run_id)
    listed = {h.address: h for h in poc.hosts(run_id=run_id)}  # members, and leavers
    own: dict[str, list[RoundCommit]] = {}
    for found in commits.values():
        for c in found:
            own.setdefault(c.host, []).append(c)
    committed = {c.host for c in commits.get(shown, [])}
    return [
        {"address": a, "endpoint": listed[a].endpoint if a in listed else "",
         "registered": a in listed and not listed[a].left_height,
         "committed": a in committed, "last_seen": last_seen(listed.get(a), own.get(a, [])),
         "tokens_per_second": rates.get(a),
         "collateral": int(poc.collateral(address=a).bonded), "slashed": slashed.get(a, 0)}
        for a in [*listed, *(a for a in slashed if a not in listed and a in own)]
    ]  # fmt: skip


def _rates(commits: list[RoundCommit], seconds: float | None) -> dict[str, float]:
    """Tokens per second of each host that committed a round that took ``seconds`` (commits
    excluded for a failed challenge do not count)."""
    if not seconds:
        return {}
    return {c.host: c.tokens / seconds for c in commits if not c.excluded}


def verifiers_seen(poc: PocClient, run_id: str, rounds: Iterable[int]) -> dict[str, dict]:
    """Per verifier, the latest of ``rounds`` of a run in which the chain recorded something of
    it (its beacon commitment, a screening vote, a sealed verdict) and what it was."""
    seen: dict[str, tuple[int, str]] = {}

    def saw(address: str, round_: int, what: str) -> None:
        if address not in seen or seen[address][0] < round_:
            seen[address] = (round_, what)

    for r in sorted(rounds):
        for c in poc.challenges(run_id, r):
            for v in c.votes:
                saw(v.verifier, r, "verdict")
        for screen in poc.screens(run_id, r):
            for v in screen.votes:
                saw(v.verifier, r, "screening vote")
        for entry in poc.beacon(run_id, r).entries:
            saw(entry.verifier, r, "beacon")
    return {a: {"run_id": run_id, "round": r, "what": what} for a, (r, what) in seen.items()}


def run_view(poc: PocClient, run: Run, height: int, slashes: list[Slash], times: BlockTime) -> dict:
    """One run: round, phase and progress through it, loss curve, hosts (with those slashed
    out of it), tokens per second, the challenges of the round being verified (the current one;
    in an overlapped run the one before, verified while the current one trains), and the
    verifiers it saw in its last two rounds."""
    info = poc.round_info(run_id=run.run_id)
    total = run.config.total_rounds
    shown = min(info.round, total - 1)  # the round whose commits the hosts show
    commits = {r: poc.commits(run_id=run.run_id, round=r) for r in range(shown + 1)}
    closed = _closed_round(run, info, height)
    seconds = None if closed is None else round_seconds(run, info, closed, times)
    rates = _rates(commits.get(closed, []), seconds)
    verified = _verified_round(run, info)
    challenges = [
        {"round": c.round, "host": c.host, "segment": c.segment, "revealed": c.revealed,
         "status": _status_name(c.status), "votes": len(c.votes), "verifiers": len(c.verifiers)}
        for c in poc.challenges(run.run_id, verified)
    ]  # fmt: skip
    phase = _phase(info, height)
    return {
        "run_id": run.run_id, "round": min(info.round, total), "total_rounds": total,
        "phase": phase, "progress": progress(info, run, height),
        "in_progress": phase not in ("finished", "waiting"),
        "loss_curve": [[r, loss] for r, loss in curve_of(commits)],
        "shown_round": shown, "rate_round": closed,
        "tokens_per_second": sum(rates.values()) if rates else None,
        "hosts": _hosts(poc, run.run_id, slashes, commits, shown, rates),
        "challenges_round": verified, "challenges": challenges,
        "verifiers_seen": verifiers_seen(poc, run.run_id, {max(0, shown - 1), shown}),
    }  # fmt: skip


def epochs_view(poc: PocClient, addresses: list[str], current: EpochInfo) -> list[dict]:
    """The last :data:`RECENT_EPOCHS` epochs up to ``current``: bounds, pool, and what each
    address earned and claimed."""
    out = []
    for epoch in range(max(0, current.epoch + 1 - RECENT_EPOCHS), current.epoch + 1):
        info = poc.epoch(epoch=epoch)
        earned = [poc.claimable(address=a, epoch=epoch) for a in addresses]
        out.append({
            "epoch": epoch, "start_height": info.start_height, "end_height": info.end_height,
            "closed": info.closed, "reward_pool": int(info.reward_pool),
            "claims": [{"address": c.address, "amount": int(c.amount), "claimed": c.claimed}
                       for c in earned if int(c.amount)],
        })  # fmt: skip
    return out


def rewards_of(epochs: list[dict]) -> dict[str, dict[str, int]]:
    """Per address, what it earned and what it claimed in ``epochs`` (:func:`epochs_view`)."""
    out: dict[str, dict[str, int]] = {}
    for epoch in epochs:
        for c in epoch["claims"]:
            mine = out.setdefault(c["address"], {"earned": 0, "claimed": 0})
            mine["earned"] += c["amount"]
            mine["claimed"] += c["amount"] if c["claimed"] else 0
    return out


def verifiers_view(
    poc: PocClient, verifiers: list[Verifier], runs: list[dict], slashes: list[Slash]
) -> list[dict]:
    """Each registered verifier (one leaving: the blocks it left at and is released after):
    the blob service it serves hosts from, collateral, slashes, the latest round in which a run
    saw it
    (preferring runs in progress), and ``up``: whether a run in progress saw it in one of its
    last two rounds (None while no run is in progress)."""
    live = [r for r in runs if r["in_progress"]]
    out = []
    for v in verifiers:
        saw = [r for r in runs if v.address in r["verifiers_seen"]]
        latest = max(saw, key=lambda r: (r["in_progress"], r["verifiers_seen"][v.address]["round"]),
                     default=None)  # fmt: skip
        out.append({
            "address": v.address, "registered_height": v.registered_height,
            "left_height": v.left_height, "release_height": v.release_height,
            "endpoint": v.endpoint,
            "collateral": int(poc.collateral(address=v.address).bonded),
            "slashed": sum(int(s.amount) for s in slashes if s.address == v.address),
            "last_seen": None if latest is None else latest["verifiers_seen"][v.address],
            "up": any(v.address in r["verifiers_seen"] for r in live) if live else None,
        })  # fmt: skip
    return out


def _with_rewards(rows: list[dict], rewards: dict[str, dict[str, int]]) -> None:
    for row in rows:
        row.update(rewards.get(row["address"], {"earned": 0, "claimed": 0}))


def chain_view(client: LedgerClient, poc: PocClient, only: str | None = None) -> dict:
    """Everything the status command and the dashboard show (``only``: one run)."""
    block = client.query_latest_block()
    height, times = block.height, block_times(client, block)
    slashes = list(poc.slashes())
    runs = [run_view(poc, run, height, slashes, times) for run in poc.runs()
            if only is None or run.run_id == only]  # fmt: skip
    verifiers = verifiers_view(poc, list(poc.verifiers()), runs, slashes)
    addresses = sorted({h["address"] for r in runs for h in r["hosts"]}
                       | {v["address"] for v in verifiers})  # fmt: skip
    epoch = poc.epoch()
    epochs = epochs_view(poc, addresses, epoch)
    rewards = rewards_of(epochs)
    for rows in [*(r["hosts"] for r in runs), verifiers]:
        _with_rewards(rows, rewards)
    return {
        "chain_id": block.chain_id, "height": height, "time": block.time.isoformat(),
        "epoch": {"epoch": epoch.epoch, "start_height": epoch.start_height,
                  "end_height": epoch.end_height},
        "runs": runs, "verifiers": verifiers,
        "slashes": [{"address": s.address, "run_id": s.run_id, "round": s.round,
                     "amount": int(s.amount), "reason": s.reason, "height": s.height}
                    for s in slashes],
        "epochs": epochs,
    }  # fmt: skip
