"""The clean-trial gate's verdict: share of system errors and tasks without a clean trial, by kind."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.clean_trials import SystemErrorBound, clean_trial_verdict


def _rows(spec: list[tuple[str, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "uid": [u for u, _ in spec],
            "system_error": [e for _, e in spec],
            "system_error_kind": [e and e.split(":")[0] for _, e in spec],
        },
        schema={"uid": pl.Utf8, "system_error": pl.Utf8, "system_error_kind": pl.Utf8},
    )


def test_every_trial_a_system_error_fails_naming_kinds_counts_and_causes():
    rows = _rows(
        [
            ("a", "endpoint_connection: refused"),
            ("a", "endpoint_connection: refused"),
            ("b", "sandbox_crash: exit 127"),
        ]
    )
    verdict = clean_trial_verdict(rows, SystemErrorBound())
    assert not verdict.passed and verdict.by_kind == {"endpoint_connection": 2, "sandbox_crash": 1}
    text = verdict.message("probe_results")
    assert text.startswith(
        "probe_results: the campaign could not produce clean trials: 2 of 2 task(s) have no clean trial"
    )
    assert "3 of 3 trials (100%) are system errors, above system_errors.max_frac=0.2" in text
    assert (
        "endpoint_connection x2, sandbox_crash x1" in text
        and "cause: sandbox_crash: exit 127" in text
    )


@pytest.mark.parametrize(("errors", "passed"), [(2, True), (3, False)])  # of 10 trials, bound 0.2
def test_the_share_bound_is_inclusive(errors, passed):
    rows = _rows([(f"t{i % 5}", "judge_timeout: x" if i < errors else None) for i in range(10)])
    assert clean_trial_verdict(rows, SystemErrorBound()).passed is passed


def test_one_task_with_no_clean_trial_fails_under_the_default_and_passes_when_allowed():
    rows = _rows([("a", None), ("a", None), ("a", None), ("a", None), ("b", "sandbox_timeout: t")])
    assert clean_trial_verdict(rows, SystemErrorBound()).tasks_without_clean_trial == ["b"]
    assert not clean_trial_verdict(rows, SystemErrorBound()).passed
    assert clean_trial_verdict(
        rows, SystemErrorBound(every_task_clean=False)
    ).passed  # 1 of 5 = 20%


def test_an_expected_task_with_no_row_counts_and_an_empty_campaign_passes():
    rows = _rows([("a", None)])
    assert clean_trial_verdict(
        rows, SystemErrorBound(), expected_uids=["a", "b"]
    ).tasks_without_clean_trial == ["b"]
    assert clean_trial_verdict(_rows([]), SystemErrorBound(), expected_uids=[]).passed


def test_the_profile_carries_the_bound_and_refuses_unknown_keys(tmp_path):
    assert load_profile("test").system_errors == SystemErrorBound(
        max_frac=0.2, every_task_clean=True
    )
    with pytest.raises(ValueError):
        SystemErrorBound.model_validate({"max_fraction": 0.1})
