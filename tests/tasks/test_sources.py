"""Task sources: evaluation-only releases declared as exclusion only, and domains by scenario."""

from __future__ import annotations

from pathlib import Path

from rewardbox.config.profile import TaskSourcesConfig
from rewardbox.tasks.sources import load_benchmark, load_candidates, load_held_out

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIXED = str(FIXTURES / "tb_mixed")


def _config(**extra) -> TaskSourcesConfig:
    return TaskSourcesConfig.model_validate(
        {"candidates": [{"dataset": MIXED}], "benchmark": [], **extra}
    )


def test_exclude_only_release_keeps_its_tasks_and_their_twins_out_of_training(tmp_path):
    release = tmp_path / "release.yaml"
    release.write_text("- mixed_orders.py:test_cancel_write\n")
    config = _config(exclude_only=[{"dataset": MIXED, "test_list": str(release)}])
    loaded = load_candidates(config)
    assert loaded.excluded == ["mixed_orders.py:test_cancel_write"]
    assert (
        "mixed_orders.py:test_cancel_write" not in [t.uid for t in loaded.tasks]
        and len(loaded.tasks) == 4
    )
    assert [t.split for t in load_held_out(config).tasks] == ["exclude_only"]
    assert (
        load_benchmark(config).tasks == []
    )  # declared for exclusion only: never screened nor evaluated


def test_domain_is_the_scenario_unless_the_profile_maps_it():
    assert {t.domain for t in load_candidates(_config()).tasks} == {
        "shop"
    }  # not "tb_mixed" (the directory)
    mapped = load_candidates(_config(domains={"shop": "retail_ops"})).tasks
    assert {t.domain for t in mapped} == {"retail_ops"} and all(
        t.dataset == "tb_mixed" for t in mapped
    )
