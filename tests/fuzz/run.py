"""Run one fuzz target under atheris: ``python -m tests.fuzz.run TARGET [libFuzzer args]``."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["dilochain"]):
    from tests.fuzz.targets import TARGETS


def main() -> None:
    """Fuzz the target named on the command line; libFuzzer's own flags follow it."""
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m tests.fuzz.run {{{','.join(TARGETS)}}} [libFuzzer args]")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
