#!/usr/bin/env bash
# Installs everything (first run) and runs the main job on the embedded default devnet.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/dilochain devnet up "$@"
