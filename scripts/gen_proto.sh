#!/usr/bin/env bash
# Regenerates the checked-in Python code for proto/ (run after editing a .proto file).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. \
    proto/dilochain/poc/v1/*.proto proto/dilochain/node/v1/*.proto
