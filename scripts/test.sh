#!/usr/bin/env bash
# Installs everything (first run) and runs the checks: ruff (lint and format), the generated
# protos against proto/, then the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
./scripts/gen_proto.sh
if [ -n "$(git status --porcelain -- protocol/pb)" ]; then
    git status --short -- protocol/pb
    echo "error: protocol/pb differs from what proto/ generates; run ./scripts/gen_proto.sh" >&2
    exit 1
fi
# Two pytest processes side by side (DILOCHAIN_TEST_HALF, tests/conftest.py: a -m of the
# caller's still applies to both): the tests that time themselves (marked wall_clock) and
# those that train with several processes (heavy), one after another, and the rest, whose
# output follows once both are done. The rest run at the lowest priority: they take the cores
# the heavy tests leave idle between their bursts of training, never the time a host needs to
# make its window.
rest_log=$(mktemp)
trap 'rm -f "$rest_log"' EXIT
DILOCHAIN_TEST_HALF=rest nice -n 19 .venv/bin/python -m pytest -o cache_dir=.pytest_cache/rest \
    --durations=10 "$@" > "$rest_log" 2>&1 &
rest=$!
trap 'kill -TERM "$rest" 2>/dev/null; exit 130' INT TERM  # a background job ignores SIGINT
heavy_status=0
DILOCHAIN_TEST_HALF=heavy .venv/bin/python -m pytest --durations=7 "$@" || heavy_status=$?
rest_status=0
wait "$rest" || rest_status=$?
cat "$rest_log"
# 5: no test selected (an argument that picks only heavy tests, or none of them)
for status in "$heavy_status" "$rest_status"; do
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then exit "$status"; fi
done
if [ "$heavy_status" -eq 5 ] && [ "$rest_status" -eq 5 ]; then exit 5; fi
