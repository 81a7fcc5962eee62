"""Paired task-level bootstrap: agrees with a plain loop, pairs the arms, widens for clustered trials."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rewardbox.metrics import task_counts, wilson_interval
from rewardbox.metrics.bootstrap import paired_bootstrap, verdict
from rewardbox.metrics.passk import pass_hat_k


def _rows(rates: np.ndarray, trials: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    passed = rng.random((len(rates), trials)) < rates[:, None]
    return pl.DataFrame(
        {
            "uid": np.repeat([f"t{i:04d}" for i in range(len(rates))], trials),
            "trial": np.tile(np.arange(trials), len(rates)),
            "passed": passed.ravel(),
            "system_error": pl.Series([None] * passed.size, dtype=pl.Utf8),
        }
    )


def _campaigns(tasks: int = 120, trials: int = 10, shift: float = 0.0):
    rates = np.random.default_rng(3).beta(0.6, 0.9, size=tasks)  # spread like the probes
    base = task_counts(_rows(rates, trials, 1))
    tuned = task_counts(_rows(np.clip(rates + shift, 0, 1), trials, 2))
    return base, tuned


def test_matches_a_plain_loop_over_the_same_resamples():
    base, tuned = _campaigns(tasks=40, trials=6, shift=0.1)
    out = paired_bootstrap(base, tuned, [3], confidence=0.9, resamples=300, seed=11)
    resampled = np.random.default_rng(11).integers(0, 40, size=(300, 40))
    bn, bc, tn, tc = (df[col].to_numpy() for df in (base, tuned) for col in ("n", "c"))
    diffs, hats = [], []
    for idx in resampled:  # the resampled tasks, with repeats
        diffs.append(tc[idx].sum() / tn[idx].sum() - bc[idx].sum() / bn[idx].sum())
        hats.append(np.mean([pass_hat_k(int(n), int(c), 3) for n, c in zip(tn[idx], tc[idx])]))
    point, low, high = out["metrics"]["pass_at_1"]["difference"]
    assert point == pytest.approx(tc.sum() / tn.sum() - bc.sum() / bn.sum())
    assert (low, high) == pytest.approx(tuple(np.quantile(diffs, [0.05, 0.95])), abs=1e-12)
    assert out["metrics"]["pass_hat_3"]["tuned"][1:] == pytest.approx(
        tuple(np.quantile(hats, [0.05, 0.95])), abs=1e-12
    )


def test_seeded_and_identical_arms_give_a_zero_difference():
    base, _ = _campaigns()
    first = paired_bootstrap(base, base, [2, 5], seed=4)
    assert first == paired_bootstrap(base, base, [2, 5], seed=4)
    for name in ("pass_at_1", "pass_at_2", "pass_hat_5"):
        assert first["metrics"][name]["difference"] == (
            0.0,
            0.0,
            0.0,
        )  # paired: the same tasks in both arms
        assert first["metrics"][name]["verdict"] == "within noise"


def test_task_level_interval_is_wider_than_pooled_wilson_for_clustered_trials():
    base, _ = _campaigns(tasks=120, trials=20)
    low, high = paired_bootstrap(base, base, [1])["metrics"]["pass_at_1"]["base"][1:]
    w_low, w_high = wilson_interval(int(base["c"].sum()), int(base["n"].sum()))
    assert (high - low) > 2 * (w_high - w_low)


@pytest.mark.parametrize(
    "shift, expected", [(0.25, "improved"), (-0.25, "worse"), (0.0, "within noise")]
)
def test_verdicts(shift, expected):
    base, tuned = _campaigns(shift=shift)
    assert paired_bootstrap(base, tuned, [2])["metrics"]["pass_at_2"]["verdict"] == expected


def test_k_above_a_policys_smallest_n_is_left_out_and_bad_settings_raise():
    base, tuned = _campaigns(tasks=10, trials=4)
    tuned = tuned.with_columns(
        n=pl.when(pl.col("uid") == "t0000").then(3).otherwise(pl.col("n")),
        c=pl.when(pl.col("uid") == "t0000").then(0).otherwise(pl.col("c")),
    )
    out = paired_bootstrap(base, tuned, [4])["metrics"]["pass_hat_4"]
    assert (
        out["base"] is not None
        and out["tuned"] is None
        and out["difference"] is None
        and out["verdict"] == "n/a"
    )
    assert (
        verdict((-0.1, 0.2)) == "within noise"
        and verdict((0.01, 0.2)) == "improved"
        and verdict(None) == "n/a"
    )
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap(base, tuned, [1], confidence=1.5)
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap(base, tuned, [1], resamples=0)


def test_by_domain_reports_each_domain_from_its_own_tasks():
    base, tuned = _campaigns(tasks=30, trials=6, shift=0.2)
    label = pl.Series([("retail", "hotel", "helpdesk")[i % 3] for i in range(30)])
    base, tuned = base.with_columns(domain=label), tuned.with_columns(domain=label)
    out = paired_bootstrap(base, tuned, [2], resamples=500, by_domain=True)
    assert set(out["domains"]) == {"retail", "hotel", "helpdesk"}
    alone = paired_bootstrap(
        base.filter(pl.col("domain") == "hotel"), tuned.filter(pl.col("domain") == "hotel"), [2]
    )
    hotel = out["domains"]["hotel"]["pass_at_1"]
    assert hotel["base"][0] == alone["metrics"]["pass_at_1"]["base"][0]  # same point estimate
    assert hotel["difference"][1] <= hotel["difference"][0] <= hotel["difference"][2]
