#!/usr/bin/env bash
# Creates .venv (Python 3.11) and installs dilochain with its dev extras into it.
# torch is pinned to 2.13.0 so pip takes the local CPU wheel rather than a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[dev]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi
