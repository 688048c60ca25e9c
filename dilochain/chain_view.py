"""What ``dilochain status`` and the dashboard show, read from the chain once: the chain and its
epoch, each run's round, loss curve, hosts (collateral, slashes), the current round's
challenges and verdicts, and recent epochs' rewards and claims. Plain JSON-ready data."""

from __future__ import annotations

import statistics

from cosmpy.aerial.client import LedgerClient

from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.types_pb2 import ChallengeStatus, EpochInfo, Run, Slash

RECENT_EPOCHS = 8  # epochs whose rewards and claims a view lists


def eval_curve(poc: PocClient, run_id: str, rounds: int) -> list[tuple[int, float]]:
    """(round, median committed eval loss of the round's base state) for rounds with commits."""
    curve = []
    for r in range(rounds):
        commits = poc.commits(run_id=run_id, round=r)
        losses = [c.eval_loss for c in commits if c.eval_loss]
        if losses:
            curve.append((r, statistics.median(losses)))
    return curve


def _phase(info, height: int) -> str:
    if info.finished:
        return "finished"
    if height + 1 < info.window_start:
        return "waiting"
    return "commit" if height + 1 <= info.window_end else "challenge"


def _status_name(status: int) -> str:
    return ChallengeStatus.Name(status).removeprefix("CHALLENGE_STATUS_").lower()


def run_view(poc: PocClient, run: Run, height: int, slashes: list[Slash]) -> dict:
    """One run: round and phase, loss curve, hosts (with those slashed out of it), and the
    challenges of the round being verified (the current one; in an overlapped run the one
    before, verified while the current one trains)."""
    info = poc.round_info(run_id=run.run_id)
    curve = eval_curve(poc, run.run_id, min(info.round + 1, run.config.total_rounds))
    slashed: dict[str, int] = {}
    for s in slashes:
        if s.run_id == run.run_id:
            slashed[s.address] = slashed.get(s.address, 0) + int(s.amount)
    listed = {h.address: h for h in poc.hosts(run_id=run.run_id)}  # members, and leavers
    verified = info.round - 1 if run.config.overlap and info.round else info.round
    hosts = [
        {"address": a, "endpoint": listed[a].endpoint if a in listed else "",
         "registered": a in listed and not listed[a].left_height,
         "collateral": int(poc.collateral(address=a).bonded), "slashed": slashed.get(a, 0)}
        for a in [*listed, *(a for a in slashed if a not in listed)]
    ]  # fmt: skip
    challenges = [
        {"round": c.round, "host": c.host, "segment": c.segment, "revealed": c.revealed,
         "status": _status_name(c.status), "votes": len(c.votes), "verifiers": len(c.verifiers)}
        for c in poc.challenges(run.run_id, min(verified, run.config.total_rounds - 1))
    ]  # fmt: skip
    return {
        "run_id": run.run_id, "round": info.round, "total_rounds": run.config.total_rounds,
        "phase": _phase(info, height), "loss_curve": [[r, loss] for r, loss in curve],
        "hosts": hosts, "challenges": challenges,
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


def chain_view(client: LedgerClient, poc: PocClient, only: str | None = None) -> dict:
    """Everything the status command and the dashboard show (``only``: one run)."""
    height = client.query_height()
    slashes = list(poc.slashes())
    runs = [run_view(poc, run, height, slashes) for run in poc.runs()
            if only is None or run.run_id == only]  # fmt: skip
    addresses = sorted({h["address"] for r in runs for h in r["hosts"]}
                       | {v.address for v in poc.verifiers()})  # fmt: skip
    epoch = poc.epoch()
    return {
        "chain_id": client.network_config.chain_id, "height": height,
        "epoch": {"epoch": epoch.epoch, "start_height": epoch.start_height,
                  "end_height": epoch.end_height},
        "runs": runs,
        "slashes": [{"address": s.address, "run_id": s.run_id, "round": s.round,
                     "amount": int(s.amount), "reason": s.reason, "height": s.height}
                    for s in slashes],
        "epochs": epochs_view(poc, addresses, epoch),
    }  # fmt: skip
