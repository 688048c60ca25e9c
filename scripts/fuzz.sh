#!/usr/bin/env bash
# Fuzzes one target for longer, coverage-guided (atheris/libFuzzer): ./scripts/fuzz.sh TARGET [SECONDS]
# Targets: tx, msg, pseudo_gradient, checkpoint, genesis, node_config (tests/fuzz/targets.py).
# New interesting inputs go to a work corpus in a temp dir; a crash is saved as ./crash-* .
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: ./scripts/fuzz.sh TARGET [SECONDS]}
seconds=${2:-300}
work=$(mktemp -d)
exec .venv/bin/python -m tests.fuzz.run "$target" "$work" "tests/fuzz/corpus/$target" \
    -max_total_time="$seconds" -artifact_prefix=./
