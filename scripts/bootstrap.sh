#!/usr/bin/env bash
# Creates .venv (Python 3.11), installs dilochain with its dev extras into it, and builds the
# pinned CometBFT release into .venv/bin (with Go; skipped when that version is already there).
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
# The dashboard's browser test drives Debian's Chromium through its chromedriver.
if ! command -v chromedriver >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing chromium and chromium-driver (the dashboard's browser test)"
    packages="chromium chromium-driver"
    apt-get install -y -qq --no-install-recommends $packages >/dev/null 2>&1 || {
        apt-get update -qq && apt-get install -y -qq --no-install-recommends $packages >/dev/null
    }
fi
# One version, defined in chain/cometbft.py.
version=$(sed -n 's/^COMETBFT_VERSION = "\(v[0-9.]*\)".*/\1/p' chain/cometbft.py)
if [ "$(.venv/bin/cometbft version 2>/dev/null)" != "${version#v}" ]; then
    if ! command -v go >/dev/null; then
        echo "error: Go is needed to build CometBFT $version (go install)" >&2
        exit 1
    fi
    echo "building CometBFT $version into .venv/bin (first run only)"
    GOBIN="$PWD/.venv/bin" go install "github.com/cometbft/cometbft/cmd/cometbft@$version"
fi
