#!/usr/bin/env bash
# Installs everything (first run) and runs the checks: ruff, then the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"
