"""The warm-started run's report asset: three arms, GRPO's check against the warm start."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl

from tests.report.test_report import make_rows

TASKS = {f"t{i}": "retail" if i < 4 else "hotel" for i in range(6)}


def rows(passing: set[str]) -> pl.DataFrame:
    return make_rows({uid: (d, [1, 1] if uid in passing else [0, 0]) for uid, d in TASKS.items()})


BASE = rows(set())
WARM = rows({"t0", "t1", "t2", "t3", "t4"})
TUNED = rows({"t0", "t1", "t2"})  # GRPO lost two of the warm start's tasks; the total is still up


def _materialize(tmp_path) -> dg.ExecuteInProcessResult:
    from assets import warm_start
    from resources.rewardbox import RewardboxResource

    def source(name, frame):
        @dg.asset(name=name)
        def rows_asset() -> pl.DataFrame:
            return frame

        return rows_asset

    return dg.materialize(
        [
            source("base_evaluation_results", BASE),
            source("rft_evaluation_results", WARM),
            source("evaluation_results", TUNED),
            warm_start.three_arm_report,
        ],
        resources={"rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )


def test_the_report_states_grpo_against_the_warm_start_and_the_check_reads_it(tmp_path):
    result = _materialize(tmp_path)
    assert result.success
    check = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "tuned_not_worse_than_base"
    )
    # GRPO's own change is -2 of 6 tasks (against the warm start), never the total +3 of 6
    assert check.metadata["pass_at_1_change"].value < 0
    assert (
        check.metadata["base_pass_at_1"].value == 5 / 6
    )  # the "base" of GRPO's check: the warm start
    report = tmp_path / "test" / "report"
    verdict = json.loads((report / "verdict.json").read_text())
    assert verdict["lines"][0].startswith(
        "pass@1 change, GRPO effect ((warm start + GRPO) - warm start), all tasks: -33.33 pts"
    )
    assert any(
        line.startswith(
            "pass@1 change, warm-start effect (warm start - base), all tasks: +83.33 pts"
        )
        for line in verdict["lines"]
    )
    assert verdict["pass_at_1_verdict"] == check.metadata["verdict"].value
    text = (report / "reliability_report.md").read_text()
    assert "## Three arms: base, warm start, warm start + GRPO" in text
    assert "![pass@k and pass^k vs k: base, warm start, warm start + GRPO](reliability.png)" in text
    assert (report / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metadata = result.asset_materializations_for_node("reliability_report")[0].metadata
    assert metadata["grpo_pass_at_1_verdict"].value == verdict["pass_at_1_verdict"]
