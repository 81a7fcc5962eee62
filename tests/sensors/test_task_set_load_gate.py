"""No sensor launches a run on a task set that failed to load (issue #12, part A)."""

from __future__ import annotations

import json

from dagster import DagsterInstance, build_sensor_context, instance_for_test

from pipelines.partitions import checkpoint_partitions
from rewardbox.errors import TaskSetLoadError
from sensors.checkpoints import build_checkpoint_sensor
from sensors.task_source import build_task_source_sensor
from tests.sensors.test_checkpoint_sensor import Ticker, eval_job

BROKEN = TaskSetLoadError(
    "benchmark", ["/data/hotel/test_case/hotel_cancel.py:33: not valid Python"], "policy"
)


def test_task_source_sensor_launches_nothing_while_the_set_does_not_load():
    state = {"fingerprint": "A", "broken": True}

    def check() -> None:
        if state["broken"]:
            raise BROKEN

    sensor_def = build_task_source_sensor(
        job_name="rescreen_job",
        source_fingerprint_fn=lambda: state["fingerprint"],
        task_set_check_fn=check,
    )
    with DagsterInstance.ephemeral() as instance:
        data = sensor_def.evaluate_tick(build_sensor_context(instance=instance, cursor="OLD"))
        assert data.run_requests == [] and data.cursor in (None, "OLD")  # the cursor does not move
        assert "hotel_cancel.py:33" in data.skip_message
        state["broken"] = False  # fixed: the same changed fingerprint now launches its re-screen
        fixed = sensor_def.evaluate_tick(build_sensor_context(instance=instance, cursor="OLD"))
    assert [r.run_key for r in fixed.run_requests] == ["A@after:OLD"] and fixed.cursor == "A"


def test_checkpoint_sensor_launches_no_evaluation_on_a_benchmark_that_does_not_load(tmp_path):
    watch = tmp_path / "incoming"
    (watch / "ckpt-1").mkdir(parents=True)
    (watch / "ckpt-1" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    state = {"broken": True}

    def version() -> str:
        if state["broken"]:
            raise BROKEN
        return "v1"

    sensor_def = build_checkpoint_sensor(
        partitions_def=checkpoint_partitions,
        job=eval_job,
        watch_dir_fn=lambda: watch,
        task_set_version_fn=version,
        validate_fn=lambda path: None,
    )
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home"), set_dagster_home=False) as instance:
        ticker = Ticker(sensor_def, instance)
        data = ticker.tick()
        assert (
            data.run_requests == [] and not data.dynamic_partitions_requests and data.cursor is None
        )
        assert "benchmark task set does not load" in data.skip_message
        state["broken"] = False
        fixed = ticker.tick()
    assert [r.run_key for r in fixed.run_requests] == ["ckpt-1@v1"]
