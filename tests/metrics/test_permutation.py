"""Issue #23 item 7: the exact paired sign-flip test beside the bootstrap, and "improved" only when both agree."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from rewardbox.metrics.bootstrap import paired_bootstrap
from rewardbox.metrics.permutation import (
    EXACT_MAX_CHANGED,
    changed_tasks,
    combined_verdict,
    pass_rate_test,
    sign_flip_test,
)
from rewardbox.report.changes import changed_tasks_table, fmt_p


def counts(cs: list[int], n: int = 3, domain: str = "retail") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "uid": [f"t{i:02d}" for i in range(len(cs))],
            "domain": [domain] * len(cs),
            "n": [n] * len(cs),
            "c": cs,
        }
    )


def learn_run():
    """The measured learn run's shape: 30 tasks x 3 trials, +4 successes resting on 3 tasks (+2, +1, +1)."""
    base = [0, 1, 2, 3, 1, 2] * 5
    tuned = list(base)
    tuned[0] += 2
    tuned[1] += 1
    tuned[4] += 1
    return counts(base), counts(tuned)


def test_issue23_item7_given_value_three_changed_tasks_give_p_one_eighth():
    base, tuned = learn_run()
    test = pass_rate_test(base, tuned)
    assert test == {"tasks": 30, "changed": 3, "exact": True, "p_greater": 0.125, "p_less": 1.0}
    assert test["p_greater"] == pytest.approx(
        stats.binomtest(3, 3, 0.5, alternative="greater").pvalue
    )
    entry = paired_bootstrap(base, tuned, [1], confidence=0.9, seed=0)["metrics"]["pass_at_1"]
    assert entry["difference"][0] == pytest.approx(4 / 90)
    # the interval alone said "improved" (only (27/30)^30 = 4.2% of resamples miss every changed task) ...
    assert entry["difference"][1] > 0 and entry["interval_verdict"] == "improved"
    # ... the test does not agree, so the verdict is "within noise"
    assert entry["test"]["p_greater"] == 0.125 and entry["verdict"] == "within noise"


def test_sign_flip_equals_scipys_exact_permutation_test():
    rng = np.random.default_rng(7)
    d = np.round(rng.normal(0.05, 0.2, size=11), 3)
    d[[2, 5]] = 0.0  # unchanged tasks change nothing
    ours = sign_flip_test(d)
    for side, alternative in (("p_greater", "greater"), ("p_less", "less")):
        ref = stats.permutation_test(
            (d[d != 0],),
            np.mean,
            permutation_type="samples",
            alternative=alternative,
            n_resamples=np.inf,
        ).pvalue
        assert ours[side] == pytest.approx(ref, abs=1e-12)
    assert ours["changed"] == 9 and ours["tasks"] == 11 and ours["exact"]


def test_sign_flip_ties_and_monte_carlo_agree_with_the_exact_sign_test():
    # equal magnitudes: the sign-flip test is the exact sign test, ties at the observed sum included
    assert sign_flip_test([1 / 3] * 6 + [-1 / 3] * 2)["p_greater"] == pytest.approx(
        stats.binomtest(6, 8, 0.5, alternative="greater").pvalue
    )
    # above the exact limit: Monte Carlo, seeded, within its error of the exact value
    up, down = 28, EXACT_MAX_CHANGED + 4 - 28
    mc = sign_flip_test([0.25] * up + [-0.25] * down + [0.0] * 5, seed=3)
    assert not mc["exact"] and mc["changed"] == up + down
    assert mc["p_greater"] == pytest.approx(
        stats.binomtest(up, up + down, 0.5, alternative="greater").pvalue, abs=0.01
    )
    assert mc == sign_flip_test([0.25] * up + [-0.25] * down + [0.0] * 5, seed=3)


def test_no_change_and_bad_input():
    assert sign_flip_test([0.0, 0.0]) == {
        "tasks": 2,
        "changed": 0,
        "exact": True,
        "p_greater": 1.0,
        "p_less": 1.0,
    }
    assert sign_flip_test([])["p_greater"] == 1.0
    with pytest.raises(ValueError, match="finite"):
        sign_flip_test([0.1, float("nan")])


@pytest.mark.parametrize(
    "interval, test, expected",
    [
        ((0.01, 0.09), {"p_greater": 0.125, "p_less": 1.0}, "within noise"),  # the learn run
        ((0.01, 0.09), {"p_greater": 0.09, "p_less": 1.0}, "improved"),
        (
            (-0.01, 0.09),
            {"p_greater": 0.001, "p_less": 1.0},
            "within noise",
        ),  # the interval disagrees
        ((-0.09, -0.01), {"p_greater": 1.0, "p_less": 0.05}, "worse"),
        ((-0.09, -0.01), {"p_greater": 1.0, "p_less": 0.2}, "within noise"),
        ((0.01, 0.09), None, "improved"),
        (None, None, "n/a"),
    ],
)
def test_combined_verdict_needs_both(interval, test, expected):
    assert combined_verdict(interval, test) == expected


def test_a_broad_gain_is_improved_and_a_broad_loss_worse():
    base = counts([1] * 20)
    better = counts([2] * 12 + [1] * 8)
    out = paired_bootstrap(base, better, [1], confidence=0.9)["metrics"]["pass_at_1"]
    assert out["verdict"] == "improved" and out["test"]["p_greater"] == pytest.approx(2**-12)
    back = paired_bootstrap(better, base, [1], confidence=0.9)["metrics"]["pass_at_1"]
    assert back["verdict"] == "worse" and fmt_p(back) == "p < 0.001"


def test_changed_tasks_lists_before_and_after_counts():
    base, tuned = learn_run()
    tuned = tuned.vstack(counts([1], domain="helpdesk").with_columns(uid=pl.lit("ood")))
    base = base.vstack(counts([3], domain="helpdesk").with_columns(uid=pl.lit("ood")))
    changed = changed_tasks(base, tuned)
    assert changed.select("uid", "base_c", "base_n", "tuned_c", "tuned_n").rows() == [
        ("t00", 0, 3, 2, 3),
        ("t01", 1, 3, 2, 3),
        ("t04", 1, 3, 2, 3),
        ("ood", 3, 3, 1, 3),
    ]
    table = changed_tasks_table(
        changed, {"in_distribution": ["retail"], "out_of_distribution": ["helpdesk"]}
    )
    assert "| t00 | retail | in_distribution | 0/3 | 2/3 | +66.67 pts |" in table
    assert "| ood | helpdesk | out_of_distribution | 3/3 | 1/3 | -66.67 pts |" in table
    assert "4 task(s) changed: 3 up, 1 down." in table
    assert changed_tasks_table(changed_tasks(base, base)).startswith("(no task")


def _rows(task_counts_: pl.DataFrame) -> pl.DataFrame:
    rows = [
        (u, d, t, float(t < c), t < c, None)
        for u, d, n, c in task_counts_.select("uid", "domain", "n", "c").iter_rows()
        for t in range(n)
    ]
    return pl.DataFrame(
        rows, schema=["uid", "domain", "trial", "reward", "passed", "system_error"], orient="row"
    )


def test_make_demo_prints_the_reports_verdict_by_the_same_rule():
    from rewardbox.metrics.reliability import compute_reliability
    from rewardbox.report.verdict import verdict_summary
    from rewardbox.strict_json import dumps, loads

    base, tuned = learn_run()
    rel = compute_reliability(
        _rows(base), _rows(tuned), 3, confidence=0.9, splits={"in_distribution": ["retail"]}
    )
    summary = loads(
        dumps(verdict_summary(rel))
    )  # what the report asset writes and pipelines.where prints
    assert summary["pass_at_1_verdict"] == "within noise" and summary["pass_at_1_p"] == "p = 0.125"
    assert summary["changed_tasks"] == 3
    assert summary["lines"][0].startswith("pass@1 change (tuned - base), all tasks: +4.44 pts [")
    assert summary["lines"][0].endswith(", p = 0.125, within noise")
    assert summary["lines"][1].startswith("pass@1 change, in_distribution: +4.44 pts")


def test_sign_flip_counts_floating_point_ties_at_a_zero_mean_in_both_directions():
    # observed mean 0 with magnitudes whose float sums only nearly cancel: scipy's enumeration misses
    # some of the tied patterns (0.5 and 0.6055 here); the hand counts are 9/16 and 163/256
    assert sign_flip_test([0.1, 0.2, 0.3, -0.6]) | {} == {
        "tasks": 4,
        "changed": 4,
        "exact": True,
        "p_greater": 9 / 16,
        "p_less": 9 / 16,
    }
    balanced = sign_flip_test([1 / 3] * 4 + [-1 / 3] * 4 + [0.0] * 3)
    exact = stats.binomtest(4, 8, 0.5, alternative="greater").pvalue
    assert balanced["p_greater"] == pytest.approx(exact) == pytest.approx(163 / 256)
    assert balanced["p_less"] == pytest.approx(163 / 256)


def test_a_sampled_p_value_is_shown_as_approximate_in_the_report():
    d = [0.25] * 30 + [-0.25] * 10
    test = sign_flip_test(d, seed=5)
    assert not test["exact"] and test == sign_flip_test(d, seed=5)
    assert fmt_p({"difference": (0.125, 0.05, 0.2), "test": test}).endswith("(sampled)")
    loss = sign_flip_test([-x for x in d[:20]] + [0.1] * 20, seed=5)
    assert (
        fmt_p({"difference": (-0.05, -0.1, 0.0), "test": loss})
        == f"p ≈ {loss['p_less']:.3f} (sampled)"
    )
    exact = sign_flip_test([1 / 3] * 3)
    assert fmt_p({"difference": (0.1, 0.0, 0.2), "test": exact}) == "p = 0.125"
