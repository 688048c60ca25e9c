"""The host's pace: seconds per block from observed heights, and whether a round fits in what
is left of its window."""

from __future__ import annotations

import pytest

from dilochain.node.pace import Pace


def paced(block: float, heights: range) -> Pace:
    pace = Pace(keep=8)
    for h in heights:
        pace.observe(h, now=100 + h * block)
        pace.observe(h, now=100 + h * block + 0.05)  # seen again a poll later: ignored
    return pace


def test_block_seconds_come_from_the_latest_heights_seen():
    assert Pace().block_seconds() is None
    assert paced(0.2, range(10, 11)).block_seconds() is None
    assert paced(0.2, range(10, 30)).block_seconds() == pytest.approx(0.2)
    pace = paced(0.2, range(10, 30))
    for h in range(30, 38):  # the chain slowed down: the last 8 heights say so
        pace.observe(h, now=100 + 29 * 0.2 + (h - 29) * 0.5)
    assert pace.block_seconds() == pytest.approx(0.5)


def test_a_round_fits_with_a_block_to_spare_for_its_commit():
    pace = paced(0.25, range(0, 20))
    assert pace.fits(100, 101)  # no round measured yet: try
    pace.round_seconds = 12.5  # 50 blocks
    assert pace.fits(100, 151)
    assert not pace.fits(100, 150)
    pace.round_seconds = 12.5625  # 50.25 blocks
    assert not pace.fits(100, 151)


def test_a_late_host_skips_a_round_but_a_slow_one_does_not():
    pace = paced(0.25, range(0, 20))
    pace.round_seconds = 12.5  # 50 blocks
    assert not pace.skip(100, 90, 151)  # it fits from now
    assert pace.skip(120, 90, 151)  # late: it would have fitted from its roster's block
    assert not pace.skip(120, 110, 151)  # slow: it fits no window; train and see
    # ... but not once the window has closed: a host slowed by a long aggregation trained a
    # round from block 877 whose window had closed at 873 (a fault probe), and missed it
    assert pace.skip(151, 110, 151) and pace.skip(877, 860, 873)
    assert Pace().skip(151, 100, 151) and not Pace().skip(150, 100, 151)  # pace unknown yet
