"""The warm start's assets exist only when a profile enables it; off, the graph is unchanged."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from pipelines.graph import asset_definitions
from rewardbox.config.profile import PROFILE_DIR, load_profile
from tests.pipelines.test_definitions import ASSETS, CHECKS

WARM_ASSETS = {"rft_checkpoint", "rft_merged_checkpoint", "rft_evaluation_results"}


def graph(warm_start: bool):
    from pipelines.definitions import defs

    assets, checks = asset_definitions(warm_start)
    return (
        dg.Definitions(assets=assets, asset_checks=checks, resources=defs.resources)
        .get_repository_def()
        .asset_graph
    )


def parents(g, name):
    return {k.to_user_string() for k in g.get(dg.AssetKey(name)).parent_keys}


def checks_of(g):
    return {
        (k.asset_key.to_user_string(), k.name, g.get_check_spec(k).blocking)
        for k in g.asset_check_keys
    }


def test_off_the_graph_is_the_one_without_a_warm_start():
    from pipelines.definitions import defs

    off = graph(False)
    keys = {k.to_user_string() for k in off.get_all_asset_keys()}
    assert keys >= ASSETS and not keys & WARM_ASSETS
    assert checks_of(off) >= CHECKS
    assert parents(off, "grpo_checkpoint") == {"training_pool", "base_checkpoint", "probe_results"}
    assert parents(off, "reliability_report") == {"base_evaluation_results", "evaluation_results"}
    shipped = defs.get_repository_def().asset_graph  # the demo profile's, as `make dev` serves it
    assert {k.to_user_string() for k in shipped.get_all_asset_keys()} == keys


def test_on_the_warm_start_feeds_grpo_and_the_three_arm_report():
    on, off = graph(True), graph(False)
    keys = {k.to_user_string() for k in on.get_all_asset_keys()}
    assert keys == {k.to_user_string() for k in off.get_all_asset_keys()} | WARM_ASSETS
    assert parents(on, "rft_checkpoint") == {"training_pool", "base_checkpoint", "probe_results"}
    assert parents(on, "rft_merged_checkpoint") == {"base_checkpoint", "rft_checkpoint"}
    assert parents(on, "rft_evaluation_results") == {"benchmark_tasks", "rft_merged_checkpoint"}
    assert "benchmark_tasks" not in parents(on, "rft_checkpoint")  # never trained on the benchmark
    assert parents(on, "grpo_checkpoint") == {
        "training_pool",
        "base_checkpoint",
        "probe_results",
        "rft_checkpoint",
    }
    assert parents(on, "reliability_report") == {
        "base_evaluation_results",
        "rft_evaluation_results",
        "evaluation_results",
    }
    assert checks_of(on) == checks_of(off) | {
        ("rft_evaluation_results", "rft_evaluation_coverage", True)
    }


def test_every_shipped_profile_leaves_the_warm_start_off():
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    assert names and all(not load_profile(name).rft.enabled for name in names)


def test_the_warm_start_needs_local_lora_grpo(tmp_path):
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data |= {"name": "warm", "rft": {"enabled": True, "epochs": 3}}
    path = tmp_path / "warm.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_profile(path).rft.epochs == 3
    for grpo in ({"backend": "verl"}, {"finetune": "full"}):
        path.write_text(yaml.safe_dump(data | {"grpo": data["grpo"] | grpo}))
        with pytest.raises(ValueError, match="rft.enabled needs grpo.backend: local"):
            load_profile(path)
    path.write_text(yaml.safe_dump(data | {"rft": {"enabled": True, "epochs": 0}}))
    with pytest.raises(ValueError, match="epochs"):
        load_profile(path)
