"""Campaign summaries from attempt rows: pass@1, pass@k, pass^k, k/k, system errors."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.metrics import summarise_by_domain, summarise_campaign, task_counts

ERR = "sandbox: backend timed out"


def make_rows(spec: dict[str, tuple[str, list]], bool_errors: bool = False) -> pl.DataFrame:
    """spec: uid -> (domain, outcomes); outcome 1/0, or None for a system error."""
    rows = []
    for uid, (domain, outcomes) in spec.items():
        for trial, outcome in enumerate(outcomes):
            error = outcome is None
            rows.append(
                {
                    "uid": uid,
                    "trial": trial,
                    "domain": domain,
                    "reward": None if error else float(outcome),
                    "passed": None if error else bool(outcome),
                    "system_error": error if bool_errors else (ERR if error else None),
                    "input_tokens": 100,
                    "cached_input_tokens": 40,
                    "output_tokens": 10,
                }
            )
    return pl.DataFrame(rows)


SPEC = {
    "t1": ("retail", [1, 1, 0, 0]),
    "t2": ("retail", [1, 1, 1, 1]),
    "t3": ("airline", [0, 0, 0, 0]),
    "t4": ("airline", [1, 1, 1, 1, 1, 1, 0, 0][:4]),
}


def test_overall_numbers_by_hand():
    summary = summarise_campaign(make_rows(SPEC), k_values=[1, 2, 4])
    assert summary["tasks"] == 4
    assert summary["clean_trials"] == 16
    assert summary["successes"] == 10
    assert summary["pass_at_1"] == pytest.approx(10 / 16)
    # pass@2 per task: t1 5/6, t2 1, t3 0, t4 1.
    assert summary["pass_at_k"][2] == pytest.approx((5 / 6 + 1 + 0 + 1) / 4)
    # pass^2 per task: t1 1/6, t2 1, t3 0, t4 1.
    assert summary["pass_hat_k"][2] == pytest.approx((1 / 6 + 1 + 0 + 1) / 4)
    assert summary["pass_hat_k_plugin"][2] == pytest.approx((0.25 + 1 + 0 + 1) / 4)
    # At k = n pass^k is the observed 4/4 share.
    assert summary["observed_all_pass_tasks"] == 2
    assert summary["pass_hat_k"][4] == pytest.approx(2 / 4)
    assert summary["system_errors"] == 0
    assert summary["clean_counts_equal"] is True
    low, high = summary["pass_at_1_interval"]
    assert low < 10 / 16 < high
    assert summary["input_tokens"] == 1600 and summary["cached_input_tokens"] == 640


@pytest.mark.parametrize("bool_errors", [False, True])
def test_system_errors_are_not_failures(bool_errors):
    spec = {"a": ("d", [1, None, 1, 1]), "b": ("d", [0, 0, None, None])}
    summary = summarise_campaign(make_rows(spec, bool_errors=bool_errors), k_values=[1, 2, 3])
    assert summary["system_errors"] == 3
    assert summary["clean_trials"] == 5
    assert summary["pass_at_1"] == pytest.approx(3 / 5)
    assert summary["observed_all_pass_tasks"] == 1  # 'a' passed 3/3 clean trials
    assert summary["clean_counts_equal"] is False
    # k = 3 exceeds task b's 2 clean trials: omitted, with the reason.
    assert 3 not in summary["pass_at_k"]
    assert "n = 2" in summary["omitted_k"][3]
    # Each task uses its own n: a has n=3, c=3; b has n=2, c=0.
    assert summary["pass_hat_k"][2] == pytest.approx((1.0 + 0.0) / 2)
    # Tokens of system-error attempts are not counted.
    assert summary["input_tokens"] == 500


def test_task_with_only_system_errors_is_left_out_of_rates():
    spec = {"a": ("d", [1, 0]), "b": ("d", [None, None])}
    summary = summarise_campaign(make_rows(spec), k_values=[1, 2])
    assert summary["tasks"] == 1
    assert summary["tasks_without_clean_trials"] == 1
    assert summary["pass_at_k"][2] == pytest.approx(1.0)


def test_reward_column_alone_is_enough():
    rows = make_rows(SPEC).drop("passed")
    assert summarise_campaign(rows, [1])["successes"] == 10


def test_duplicate_key_and_missing_outcome_are_named():
    rows = make_rows({"a": ("d", [1, 0])})
    with pytest.raises(ValueError, match=r"\('a', 1\) appears 2 times"):
        summarise_campaign(pl.concat([rows, rows.tail(1)]), [1])
    broken = rows.with_columns(
        pl.when(pl.col("trial") == 1).then(None).otherwise(pl.col("passed")).alias("passed")
    )
    with pytest.raises(ValueError, match=r"'passed' is null .*uid='a', trial=1"):
        summarise_campaign(broken, [1])
    with pytest.raises(ValueError, match="missing column"):
        summarise_campaign(rows.drop("system_error"), [1])


def test_task_counts_columns():
    counts = task_counts(make_rows({"b": ("x", [1, None]), "a": ("y", [0, 0])}))
    assert counts["uid"].to_list() == ["a", "b"]
    assert counts.select("n", "c", "system_errors", "trials").rows() == [(2, 0, 0, 2), (1, 1, 1, 2)]


def test_per_domain_table():
    table = summarise_by_domain(make_rows(SPEC), k_values=[2])
    assert table["domain"].to_list() == ["airline", "retail"]
    retail = table.filter(pl.col("domain") == "retail").row(0, named=True)
    assert retail["tasks"] == 2
    assert retail["pass_at_1"] == pytest.approx(6 / 8)
    assert retail["pass_hat_2"] == pytest.approx((1 / 6 + 1) / 2)
    assert retail["observed_all_pass_tasks"] == 1
    no_domain = summarise_by_domain(make_rows(SPEC).drop("domain"), k_values=[2])
    assert no_domain["domain"].to_list() == ["(all)"]
