#!/usr/bin/env bash
# Creates .venv (Python 3.11), installs dilochain with its dev extras into it, and builds the
# pinned CometBFT release and versitygw (the S3 server the tests start) into .venv/bin with Go,
# each skipped when that version is already there (the Go builds run beside pip), and cosmjs
# into tests/cosmjs with npm when npm is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# One version each, defined in chain/cometbft.py and dilochain/local_s3.py.
cometbft=$(sed -n 's/^COMETBFT_VERSION = "\(v[0-9.]*\)".*/\1/p' chain/cometbft.py)
versitygw=$(sed -n 's/^VERSITYGW_VERSION = "\(v[0-9.]*\)".*/\1/p' dilochain/local_s3.py)
mkdir -p .venv/bin
go_tool() {  # go_tool NAME VERSION MODULE: build MODULE@VERSION into .venv/bin unless there
    if ! command -v go >/dev/null; then
        echo "error: Go is needed to build $1 $2 (go install)" >&2
        return 1
    fi
    if [ "$(go version -m ".venv/bin/$1" 2>/dev/null | awk '$1 == "mod" {print $3}')" = "$2" ]; then
        return 0
    fi
    echo "building $1 $2 into .venv/bin (first run only)"
    GOBIN="$PWD/.venv/bin" go install "$3@$2"
}
go_tool cometbft "$cometbft" github.com/cometbft/cometbft/cmd/cometbft &
building_cometbft=$!
go_tool versitygw "$versitygw" github.com/versity/versitygw/cmd/versitygw &
building_versitygw=$!
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
# The dashboard's browser test drives Debian's Chromium through its chromedriver.
if ! command -v chromedriver >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing chromium and chromium-driver (the dashboard's browser test)"
    packages="chromium chromium-driver"
    apt-get install -y -qq --no-install-recommends $packages >/dev/null 2>&1 || {
        apt-get update -qq && apt-get install -y -qq --no-install-recommends $packages >/dev/null
    }
fi
# cosmjs for the test of Cosmos tools (tests/cosmjs), pinned by its lock file.
if command -v npm >/dev/null; then
    cosmjs=tests/cosmjs/node_modules/.installed-$(sha256sum tests/cosmjs/package-lock.json | cut -c1-16)
    if [ ! -f "$cosmjs" ]; then
        (cd tests/cosmjs && npm ci --no-audit --no-fund --loglevel=error)
        touch "$cosmjs"
    fi
fi
wait "$building_cometbft"
wait "$building_versitygw"
