"""The parser-parity check gates ``probe_results``: real parsers pass it, a divergent one blocks selection."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

pytestmark = pytest.mark.timeout(300)


def _materialize(tmp_path):
    from assets import selection, tasks
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    @dg.asset(name="base_checkpoint")
    def stub_checkpoint() -> str:  # the test profile's scripted policy never loads it
        return str(tmp_path / "unused-checkpoint")

    wanted = {"candidate_tasks", "benchmark_tasks", "screened_candidates", "probe_results", "task_difficulty"}
    assets = [a for a in dg.load_assets_from_modules([tasks, selection])
              if {k.to_user_string() for k in a.keys} <= wanted]
    checks = [c for c in dg.load_asset_checks_from_modules([selection])
              if {k.asset_key.to_user_string() for k in c.check_keys} == {"probe_results"}]
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    return dg.materialize([*assets, stub_checkpoint, *checks], resources=resources, raise_on_error=False,
                          instance=dg.DagsterInstance.ephemeral())


def _parity_evaluation(result):
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "probe_parser_parity"]
    return evaluation


def test_real_parsers_pass_and_a_divergent_one_blocks_selection(tmp_path, monkeypatch):
    result = _materialize(tmp_path / "real")
    evaluation = _parity_evaluation(result)
    assert result.success and evaluation.passed
    assert evaluation.metadata["recorded"].value > 0 and evaluation.metadata["corpus"].value >= 25
    assert "task_difficulty" in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}

    from rewardbox.policy import parity

    real = parity.interpret

    def divergent(raw_text, tools, **kwargs):  # the training path reads the first call under another name
        out = real(raw_text, tools, **kwargs)
        calls = out.tool_calls
        return dataclasses.replace(out, tool_calls=tuple(dataclasses.replace(c, name=c.name + "_v2") for c in calls[:1])
                                   + calls[1:])

    monkeypatch.setattr(parity, "interpret", divergent)
    blocked = _materialize(tmp_path / "divergent")
    evaluation = _parity_evaluation(blocked)
    assert not evaluation.passed and evaluation.metadata["mismatches"].value > 0
    assert "task_difficulty" not in {e.asset_key.to_user_string() for e in blocked.get_asset_materialization_events()}
