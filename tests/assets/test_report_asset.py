"""The report asset computes the reliability result once; its WARN check reads that same value."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl

import rewardbox.metrics.reliability as reliability_module
import rewardbox.metrics.splits as splits_module
from tests.report.test_report import make_rows

BASE = make_rows(
    {
        "a": ("retail", [1, 0]),
        "b": ("retail", [0, 0]),
        "c": ("hotel", [1, 1]),
        "d": ("hotel", [0, 1]),
    }
)
TUNED = make_rows(
    {
        "a": ("retail", [1, 1]),
        "b": ("retail", [1, 0]),
        "c": ("hotel", [1, 1]),
        "d": ("hotel", [1, 1]),
    }
)


def _materialize(tmp_path, base: pl.DataFrame, tuned: pl.DataFrame) -> dg.ExecuteInProcessResult:
    from assets import report
    from resources.rewardbox import RewardboxResource

    @dg.asset(name="base_evaluation_results")
    def base_evaluation_results() -> pl.DataFrame:
        return base

    @dg.asset(name="evaluation_results")
    def evaluation_results() -> pl.DataFrame:
        return tuned

    return dg.materialize(
        [base_evaluation_results, evaluation_results, report.reliability_report],
        resources={"rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )


def test_one_bootstrap_per_report_and_the_check_reads_the_reports_own_numbers(
    tmp_path, monkeypatch
):
    calls = []

    def counting(original):
        def wrapped(*args, **kwargs):
            calls.append(args[2])  # the k values
            return original(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(
        reliability_module, "paired_bootstrap", counting(reliability_module.paired_bootstrap)
    )
    monkeypatch.setattr(splits_module, "paired_bootstrap", counting(splits_module.paired_bootstrap))
    result = _materialize(tmp_path, BASE, TUNED)
    assert result.success
    assert calls == [
        [1, 2]
    ]  # the report's one bootstrap (test profile: no splits), none for the check
    check = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "tuned_not_worse_than_base"
    )
    assert check.severity == dg.AssetCheckSeverity.WARN and check.passed == (
        check.metadata["verdict"].value != "worse"
    )
    verdict = json.loads((tmp_path / "test" / "report" / "verdict.json").read_text())
    metadata = result.asset_materializations_for_node("reliability_report")[0].metadata
    assert (
        verdict["pass_at_1_verdict"]
        == check.metadata["verdict"].value
        == metadata["pass_at_1_verdict"].value
    )
    assert metadata["pass_at_1_change"].value.startswith(
        f"{100 * check.metadata['pass_at_1_change'].value:+.2f} pts ["
    )
    assert check.metadata["base_pass_at_1"].value == metadata["base_pass_at_1"].value == 0.5


def test_the_check_warns_without_a_clean_trial_in_a_campaign(tmp_path):
    broken = make_rows({"a": ("retail", [None, None]), "b": ("retail", [None, None])})
    result = _materialize(tmp_path, BASE, broken)
    check = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "tuned_not_worse_than_base"
    )
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["verdict"].value == "n/a"


def test_the_reliability_result_is_a_typed_value_the_check_reuses():
    from assets.report import tuned_not_worse_than_base

    rel = reliability_module.compute_reliability(BASE, TUNED, 2, confidence=0.9)
    assert (
        isinstance(rel, reliability_module.Reliability)
        and rel.pass_at_1_change is rel.bootstrap["metrics"]["pass_at_1"]
    )
    check = tuned_not_worse_than_base(rel)
    point, low, high = rel.pass_at_1_change["difference"]
    metadata = {name: value.value for name, value in check.metadata.items()}
    assert metadata["pass_at_1_change"] == point and metadata["pass_at_1_change_low"] == low
    assert (
        metadata["pass_at_1_change_high"] == high
        and metadata["verdict"] == rel.pass_at_1_change["verdict"]
    )
    assert metadata["confidence"] == 0.9 and metadata["tasks"] == 4
