"""Every fuzz target on its committed seed corpus, then briefly under atheris (coverage-guided);
and the amount parser against any text (hypothesis)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dilochain.chain.context import parse_uint
from tests.fuzz.targets import CORPUS, TARGETS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seed_corpus_replays_cleanly(name):
    seeds = sorted((CORPUS / name).iterdir())
    assert len(seeds) >= 3, f"{name}: seed corpus missing (python -m tests.fuzz.seeds)"
    for seed in seeds:
        TARGETS[name](seed.read_bytes())


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_short_coverage_guided_run_finds_no_crash(name, tmp_path):
    work = tmp_path / "corpus"
    work.mkdir()
    # libFuzzer's RSS is the process's peak, which Linux carries over from the forked pytest
    # process (gigabytes late in the suite): its default 2 GB limit would end a run that
    # itself holds ~1 GB (torch, transformers), so the limit is raised, not dropped.
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", name, str(work), str(CORPUS / name),
         "-runs=400", "-max_total_time=20", "-rss_limit_mb=8192",
         f"-artifact_prefix={tmp_path}/"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr or "DONE" in result.stderr, result.stderr[-1000:]


@given(st.text(max_size=100))
def test_amounts_parse_only_as_ascii_digits_within_256_bits(text):
    value = parse_uint(text)
    if value is None:
        ascii_digits = text.isascii() and text.isdigit() and len(text) <= 78
        assert not ascii_digits or int(text) >= 1 << 256
    else:
        assert text.isascii() and text.isdigit() and value == int(text) < 1 << 256
