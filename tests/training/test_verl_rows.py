"""Training-pool hydration into verl's dataset rows, and the agent-loop config (no verl needed)."""

from __future__ import annotations

import importlib.util
import json

import pyarrow.parquet as pq
import pytest
import yaml

from rewardbox.training.verl.agent_loop import (
    AgentLoopBase,
    build_agent_loop_config,
    resolve_services,
)
from rewardbox.training.verl.rows import (
    AGENT_NAME,
    pool_to_verl_rows,
    task_from_extra_info,
    write_verl_dataset,
)
from tests.fixtures.verl_fakes import order_task


def test_pool_rows_carry_the_opening_prompt_and_the_whole_task_and_survive_parquet(tmp_path):
    tasks = [order_task("orders:a"), order_task("orders:b")]
    path = write_verl_dataset(tasks, tmp_path / "train.parquet")
    rows = pq.read_table(path).to_pylist()
    assert [r["extra_info"]["uid"] for r in rows] == ["orders:a", "orders:b"]
    assert [r["extra_info"]["index"] for r in rows] == [0, 1]
    assert {r["agent_name"] for r in rows} == {AGENT_NAME} and rows[0][
        "data_source"
    ] == "rewardbox/orders"
    assert rows[0]["prompt"] == [
        {"role": "system", "content": "You are a support agent."},
        {"role": "system", "content": "Orders can be cancelled."},
        {"role": "user", "content": "Please cancel ORD-1."},
    ]
    assert task_from_extra_info(rows[1]["extra_info"]) == tasks[1]
    assert task_from_extra_info(json.dumps(rows[0]["extra_info"])) == tasks[0]


def test_bad_pools_and_rows_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="appears twice"):
        pool_to_verl_rows([order_task("orders:a"), order_task("orders:a")])
    with pytest.raises(ValueError, match="empty"):
        write_verl_dataset([], "unused.parquet")
    with pytest.raises(ValueError, match="no task_json"):
        task_from_extra_info({"uid": "orders:a", "index": 0})
    with pytest.raises(ValueError, match="not a rewardbox task"):
        task_from_extra_info({"uid": "x", "task_json": json.dumps({"uid": "x"})})


def test_agent_loop_config_names_our_loop_and_refills_failed_groups(tmp_path):
    overrides = build_agent_loop_config(tmp_path, services_factory="my.module:services")
    entries = yaml.safe_load((tmp_path / "rewardbox_agent_loops.yaml").read_text())
    assert entries == [
        {
            "name": AGENT_NAME,
            "_target_": "rewardbox.training.verl.agent_loop.RewardboxAgentLoop",
            "services_factory": "my.module:services",
        }
    ]
    assert overrides["actor_rollout_ref.rollout.agent.default_agent_loop"] == AGENT_NAME
    assert overrides["trainer.v1.sampler.sync_refill_failed_groups"] is True
    assert overrides["actor_rollout_ref.rollout.calculate_log_probs"] is True
    with pytest.raises(ValueError, match="module:function"):
        resolve_services("rewardbox.training.verl.rows")


@pytest.mark.skipif(
    importlib.util.find_spec("verl") is not None, reason="verl is installed in this environment"
)
def test_the_module_imports_without_verl_and_defines_no_loop_class():
    import rewardbox.training.verl.agent_loop as loop

    assert AgentLoopBase is None and not hasattr(loop, "RewardboxAgentLoop")
