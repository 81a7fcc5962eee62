"""Per-split tables: the paired bootstrap of each named group of domains, and their config."""

from __future__ import annotations

import polars as pl
import pytest
from pydantic import ValidationError

from rewardbox.metrics.bootstrap import paired_bootstrap
from rewardbox.metrics.rows import task_counts
from rewardbox.metrics.splits import domain_to_split, split_bootstrap
from rewardbox.report import reliability_tables, render_report_markdown
from rewardbox.report.config import ReportConfig
from rewardbox.report.tables import split_rows
from tests.report.test_report import make_rows

SPLITS = {"in_distribution": ["retail", "hotel"], "out_of_distribution": ["helpdesk"]}


def _campaigns(tasks: int = 12) -> tuple[pl.DataFrame, pl.DataFrame]:
    """In distribution: base 1 of 4 on every task, tuned 4 of 4; helpdesk: 2 of 4 both; a stray domain."""
    base, tuned = {}, {}
    for i in range(tasks):
        domain = ("retail", "hotel")[i % 2]
        base[f"id{i}"], tuned[f"id{i}"] = (domain, [1, 0, 0, 0]), (domain, [1, 1, 1, 1])
        base[f"ood{i}"], tuned[f"ood{i}"] = ("helpdesk", [1, 1, 0, 0]), ("helpdesk", [0, 0, 1, 1])
    base["x"], tuned["x"] = ("airline", [1, 1, 1, 1]), ("airline", [0, 0, 0, 0])
    return make_rows(base), make_rows(tuned)


def test_each_split_is_the_paired_bootstrap_of_its_own_tasks():
    base_rows, tuned_rows = _campaigns()
    base, tuned = task_counts(base_rows), task_counts(tuned_rows)
    result = split_bootstrap(base, tuned, SPLITS, [1, 2, 4], confidence=0.9, resamples=500, seed=3)
    assert list(result["splits"]) == ["in_distribution", "out_of_distribution"]
    assert result["unassigned_domains"] == ["airline"]
    inside = result["splits"]["in_distribution"]
    assert inside["tasks"] == 12
    entry = inside["metrics"]["pass_at_1"]
    assert entry["base"][0] == pytest.approx(0.25) and entry["tuned"][0] == pytest.approx(1.0)
    assert entry["difference"][0] == pytest.approx(0.75) and entry["verdict"] == "improved"
    assert inside["metrics"]["pass_hat_4"]["base"][0] == pytest.approx(0.0)
    assert inside["metrics"]["pass_hat_4"]["tuned"][0] == pytest.approx(1.0)
    outside = result["splits"]["out_of_distribution"]["metrics"]["pass_at_1"]
    assert outside["difference"][0] == pytest.approx(0.0) and outside["verdict"] == "within noise"
    # the same numbers as bootstrapping the split's tasks alone (point estimates are exact)
    alone = paired_bootstrap(
        base.filter(pl.col("domain") == "helpdesk"),
        tuned.filter(pl.col("domain") == "helpdesk"),
        [1],
        0.9,
        500,
        3,
    )
    assert outside["base"][0] == pytest.approx(alone["metrics"]["pass_at_1"]["base"][0])


def test_a_split_without_tasks_has_no_metrics_and_no_rows():
    base_rows, tuned_rows = _campaigns(2)
    result = split_bootstrap(
        task_counts(base_rows), task_counts(tuned_rows), {"empty": ["nowhere"], **SPLITS}, [1]
    )
    assert result["splits"]["empty"] == {"tasks": 0, "metrics": {}}
    rows = split_rows(result, [1, 4])
    assert "empty" not in rows["split"].to_list()
    assert set(rows["metric"]) <= {"pass@1", "pass@4", "pass^4"}


def test_domains_in_two_splits_or_empty_splits_are_config_errors():
    with pytest.raises(ValueError, match="'retail' is in both"):
        domain_to_split({"a": ["retail"], "b": ["retail"]})
    with pytest.raises(ValueError, match="lists no domain"):
        domain_to_split({"a": []})
    with pytest.raises(ValidationError, match="is in both"):
        ReportConfig(splits={"a": ["retail"], "b": ["retail", "hotel"]})
    assert ReportConfig().splits == {} and ReportConfig().confidence == 0.95
    with pytest.raises(ValidationError):
        ReportConfig(confidence=1.0)


def test_report_has_a_per_split_section_only_when_splits_are_set():
    base_rows, tuned_rows = _campaigns()
    plain = reliability_tables(base_rows, tuned_rows, 4)
    assert "per_split" not in plain
    tables = reliability_tables(
        base_rows, tuned_rows, 4, splits=SPLITS, confidence=0.9, resamples=300
    )
    line = next(
        ln
        for ln in tables["per_split"].splitlines()
        if ln.startswith("| in_distribution | 12 | pass@1 ")
    )
    assert (
        "25.00% [" in line
        and "100.00% [" in line
        and "+75.00 pts [" in line
        and line.endswith("improved |")
    )
    assert "(90%)" in tables["per_split"] and "Domains in no split" in tables["per_split"]
    doc = render_report_markdown(tables)
    assert doc.index("## Per split") < doc.index("## Per domain")
