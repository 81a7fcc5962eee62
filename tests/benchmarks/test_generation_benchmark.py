"""The generation benchmark's verdict: FAIL below 1.0x plain generate (no model is loaded here)."""

from __future__ import annotations

import pytest

from benchmarks.generation import paired_ratio, verdict


def test_paired_ratio_is_the_median_of_back_to_back_pairs():
    # load drifts between repeats: the ratio of medians says 12/20 = 0.6x, the pairs 0.5x, 1.2x, 1.2x
    assert paired_ratio([10.0, 30.0, 12.0], [20.0, 25.0, 10.0]) == pytest.approx(1.2)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_ratio([1.0], [])


def test_verdict_fails_below_plain_generate_and_passes_at_or_above():
    ok, goal = verdict({"paired_ratio": 0.99})
    assert not ok and "x0.990" in goal
    assert verdict({"paired_ratio": 1.0})[0] and verdict({"paired_ratio": 1.3})[0]
