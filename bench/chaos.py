"""Fault injection against a whole network (``dilochain.chaos``): a four-validator chain, honest
hosts, a cheating host and three verifiers train a run while validators, hosts and verifiers are
killed (-9) and started again, paused and cut off the network at seeded random moments, and one
validator's application database is wiped, while the validator drill brings a node in by state
sync, jails it for downtime and unjails it, and has a validator's twin double-sign (see
``dilochain.validator_drill``); then every guarantee is checked and printed. Exit code 1 if one
failed.

    .venv/bin/python -m bench.chaos [--seed 1] [--rounds 3] [--faults 6] [--no-validator-drill]
                                    [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.chaos import Chaos, ChaosConfig, ChaosReport


def print_report(console: Console, report: ChaosReport, seed: int) -> None:
    """The run's faults, each round's commits, the slashes and every check, as tables."""
    faults = Table("at (s)", "fault", "target", "lasting (s)", title=f"faults (seed {seed})")
    for f in report.faults:
        faults.add_row(f"{f.done_at}", f.kind, f.target, f"{f.seconds}" if f.seconds else "-")
    console.print(faults)
    rounds = Table("round", "commits (outcome)", title="commits")
    for r, found in report.outcomes.items():
        rounds.add_row(str(r), ", ".join(f"{name}: {o}" for name, o in sorted(found.items())))
    console.print(rounds)
    slashes = Table("who", "why", title="slashes")
    for who, why in report.slashes:
        slashes.add_row(who, why)
    console.print(slashes)
    checks = Table("check", "held", "detail", title=f"after {report.seconds:.0f} s")
    for name, (ok, detail) in report.checks.items():
        checks.add_row(name, "yes" if ok else "[red]NO[/]", detail)
    console.print(checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = ChaosConfig()
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--faults", type=int, default=defaults.faults)
    parser.add_argument("--honest-hosts", type=int, default=defaults.honest_hosts)
    parser.add_argument("--no-validator-drill", dest="validator_drill", action="store_false",
                        help="a closed genesis validator set, no drill")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="work directory (kept)")
    args = parser.parse_args()
    config = ChaosConfig(seed=args.seed, rounds=args.rounds, faults=args.faults,
                         honest_hosts=args.honest_hosts,
                         validator_drill=args.validator_drill)  # fmt: skip
    console = Console()
    with tempfile.TemporaryDirectory(prefix="dilochain-chaos-") as tmp:
        root = args.dir or Path(tmp)
        report = Chaos(config, root, lambda line: console.print(line, highlight=False)).run()
    print_report(console, report, args.seed)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
