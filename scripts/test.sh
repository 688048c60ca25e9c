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
.venv/bin/python -m pytest --durations=15 "$@"
