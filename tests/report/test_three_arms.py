"""The three-arm report: GRPO's effect is measured against the warm start, never against the base."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.metrics.reliability import compute_reliability
from rewardbox.report.three_arms import (
    GRPO_EFFECT,
    WARM_EFFECT,
    ThreeArms,
    render_three_arm_markdown,
    three_arm_rows,
    three_arm_verdict,
)
from tests.report.test_report import make_rows

TASKS = [f"t{i}" for i in range(12)]
SPLITS = {"in_distribution": ["retail"], "out_of_distribution": ["hotel"]}


def rows(passing: set[str]) -> pl.DataFrame:
    """Every task x 3 trials; tasks in ``passing`` pass all three, the others fail all three."""
    return make_rows(
        {
            uid: ("retail" if i < 8 else "hotel", [1, 1, 1] if uid in passing else [0, 0, 0])
            for i, uid in enumerate(TASKS)
        }
    )


BASE = rows({"t0"})
WARM = rows({"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t8"})  # the warm start solves 7 more
GRPO = rows({"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t8"})  # GRPO adds nothing on top


def arms(base=BASE, warm=WARM, tuned=GRPO) -> ThreeArms:
    def rel(a, b):
        return compute_reliability(a, b, 3, k_values=[1, 3], splits=SPLITS, resamples=500)

    return ThreeArms(warm=rel(base, warm), grpo=rel(warm, tuned))


def test_grpo_effect_is_against_the_warm_start_not_the_base():
    three = arms()
    assert three.grpo_change["difference"][0] == pytest.approx(0.0)
    assert three.grpo_change["verdict"] == "within noise"
    assert three.warm_change["difference"][0] == pytest.approx(7 / 12)
    assert three.warm_change["verdict"] == "improved"
    # the total (tuned - base) would read "improved": the report must not credit GRPO with it
    total = compute_reliability(BASE, GRPO, 3, k_values=[1, 3], resamples=500).pass_at_1_change
    assert total["verdict"] == "improved"
    verdict = three_arm_verdict(three)
    assert verdict["pass_at_1_verdict"] == "within noise"
    assert verdict["warm_start_verdict"] == "improved"
    assert verdict["lines"][0].startswith(f"pass@1 change, {GRPO_EFFECT}, all tasks: +0.00 pts")


def test_three_arm_rows_per_split_and_metric():
    table = three_arm_rows(arms())
    assert table["scope"].unique(maintain_order=True).to_list() == [
        "all tasks",
        "in_distribution",
        "out_of_distribution",
    ]
    assert table["metric"].unique(maintain_order=True).to_list() == ["pass@1", "pass@3", "pass^3"]
    overall = table.row(0, named=True)
    assert overall["base (95%)"].startswith("8.33%")
    assert overall["warm start (95%)"].startswith("66.67%")
    assert overall["warm start + GRPO (95%)"].startswith("66.67%")
    assert overall[GRPO_EFFECT].startswith("+0.00 pts")
    assert overall[WARM_EFFECT].startswith("+58.33 pts")
    ood = table.filter((pl.col("scope") == "out_of_distribution") & (pl.col("metric") == "pass@1"))
    assert ood[WARM_EFFECT][0].startswith("+25.00 pts")


def test_a_grpo_gain_over_the_warm_start_is_its_own_line():
    tuned = rows({"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10", "t11"})
    three = arms(tuned=tuned)
    assert three.grpo_change["difference"][0] == pytest.approx(4 / 12)
    text = render_three_arm_markdown(three, "Reliability report, three arms")
    assert "## Three arms: base, warm start, warm start + GRPO" in text
    assert "Overall: base vs tuned" not in text and GRPO_EFFECT in text and WARM_EFFECT in text
    assert "base = warm start, tuned = warm start + GRPO" in text
    assert "Neither is the total" in text


def test_the_three_arm_plot_has_one_curve_per_arm():
    from rewardbox.report.plots import PNG_MAGIC, arms_figure, arms_png
    from rewardbox.report.three_arms import arm_summaries

    summaries = arm_summaries(arms())
    assert [label for label, _ in summaries] == ["base", "warm start", "warm start + GRPO"]
    figure = arms_figure(summaries)
    for ax in figure.axes:
        assert [line.get_label() for line in ax.get_lines()] == [
            "base",
            "warm start",
            "warm start + GRPO",
        ]
    assert arms_png(summaries).startswith(PNG_MAGIC)
