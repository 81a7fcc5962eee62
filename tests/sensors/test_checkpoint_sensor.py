"""New-checkpoint sensor, evaluated tick by tick against a real DagsterInstance (issue #5 item 9).

The instance is `instance_for_test()` (SQLite in a temp dir), not `DagsterInstance.ephemeral()`:
a sensor context resolves a partitioned run request against the instance's dynamic partitions only
when it is given an `instance_ref` (dagster 1.13, `SensorEvaluationContext.
caching_dynamic_partitions_loader`), and an ephemeral instance has no ref. Without the ref, the
resolution step that makes the same-tick test meaningful fails with "The instance is not available
to load partitions".

`Ticker` plays the sensor daemon's part: it evaluates a tick with `build_sensor_context`, applies
the dynamic partitions requests to the instance the way the daemon does (adding only missing
keys), and carries the cursor to the next tick. Assertions count the sensor's RAW run requests, so
a repeated request is caught rather than hidden by Dagster's run-key deduplication.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterUnknownPartitionError,
    Definitions,
    RunRequest,
    SensorResult,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
    sensor,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData

from pipelines.partitions import checkpoint_partitions
from rewardbox.errors import InfrastructureError
from sensors.checkpoints import (
    TAG_CHECKPOINT_PATH,
    TAG_TASK_SET_VERSION,
    build_checkpoint_sensor,
    decode_cursor,
)

WEIGHTS = "model.safetensors"


@asset(partitions_def=checkpoint_partitions)
def checkpoint_evaluation(context) -> str:
    """Tiny stand-in for the evaluation asset: records which checkpoint it evaluated."""
    return context.partition_key


eval_job = define_asset_job("evaluate_checkpoint_job", selection=[checkpoint_evaluation])


def validate_has_weights(path: Path) -> None:
    """Test validator: a checkpoint is malformed until its weights file exists."""
    if not (path / WEIGHTS).is_file():
        raise ValueError(f"{path}: {WEIGHTS} missing")


def write_checkpoint(root: Path, name: str, *, config: bool = True, weights: bool = True) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    if config:
        (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if weights:
        (path / WEIGHTS).write_bytes(b"\0" * 8)
    return path


class Ticker:
    """Evaluates one sensor tick after another, like the sensor daemon, on one instance."""

    def __init__(self, sensor_def, instance) -> None:
        self.sensor_def = sensor_def
        self.instance = instance
        self.defs = Definitions(
            assets=[checkpoint_evaluation], jobs=[eval_job], sensors=[sensor_def]
        )
        self.cursor: str | None = None

    def tick(self) -> SensorExecutionData:
        # entered and closed, so the instance it opens from the ref does not outlive the tick
        with build_sensor_context(
            instance=self.instance,
            instance_ref=self.instance.get_ref(),
            cursor=self.cursor,
            definitions=self.defs,
        ) as context:
            data = self.sensor_def.evaluate_tick(context)
        for request in data.dynamic_partitions_requests or []:
            missing = [
                key
                for key in request.partition_keys
                if not self.instance.has_dynamic_partition(request.partitions_def_name, key)
            ]
            self.instance.add_dynamic_partitions(request.partitions_def_name, missing)
        self.cursor = data.cursor
        return data


def make_sensor(watch_dir: Path, version: dict[str, str], validate_fn=validate_has_weights):
    return build_checkpoint_sensor(
        partitions_def=checkpoint_partitions,
        job=eval_job,
        watch_dir_fn=lambda: watch_dir,
        task_set_version_fn=lambda: version["v"],
        validate_fn=validate_fn,
    )


@pytest.fixture()
def watch(tmp_path) -> Path:
    """The watched checkpoint directory (kept apart from the instance's storage)."""
    path = tmp_path / "checkpoints"
    path.mkdir()
    return path


@pytest.fixture()
def instance(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    with instance_for_test(temp_dir=str(home), set_dagster_home=False) as inst:
        yield inst


def test_malformed_checkpoint_is_retried_and_valid_one_not_repeated(watch, instance):
    write_checkpoint(watch, "ckpt-1")
    write_checkpoint(watch, "ckpt-2", weights=False)  # malformed: validation raises
    ticker = Ticker(make_sensor(watch, {"v": "v1"}), instance)

    first = ticker.tick()
    assert [r.run_key for r in first.run_requests] == ["ckpt-1@v1"]
    assert decode_cursor(first.cursor) == {"ckpt-1@v1"}  # the failure is NOT recorded

    write_checkpoint(watch, "ckpt-2")  # fixed before the next tick
    second = ticker.tick()
    assert [r.run_key for r in second.run_requests] == ["ckpt-2@v1"]
    assert decode_cursor(second.cursor) == {"ckpt-1@v1", "ckpt-2@v1"}

    all_keys = [r.run_key for r in [*first.run_requests, *second.run_requests]]
    assert sorted(all_keys) == ["ckpt-1@v1", "ckpt-2@v1"]  # exactly one request each
    assert [r.partition_key for r in second.run_requests] == ["ckpt-2"]
    assert set(instance.get_dynamic_partitions("checkpoints")) == {"ckpt-1", "ckpt-2"}

    third = ticker.tick()
    assert third.run_requests == [] and third.skip_message


def test_task_set_version_change_requests_a_new_run(watch, instance):
    write_checkpoint(watch, "ckpt-1")
    version = {"v": "tasks-v1"}
    ticker = Ticker(make_sensor(watch, version), instance)

    before = ticker.tick()
    assert ticker.tick().run_requests == []  # same version: nothing new
    version["v"] = "tasks-v2"
    after = ticker.tick()

    assert [r.run_key for r in before.run_requests] == ["ckpt-1@tasks-v1"]
    assert [r.run_key for r in after.run_requests] == ["ckpt-1@tasks-v2"]
    assert after.run_requests[0].partition_key == "ckpt-1"
    assert after.run_requests[0].tags[TAG_TASK_SET_VERSION] == "tasks-v2"
    assert decode_cursor(after.cursor) == {"ckpt-1@tasks-v1", "ckpt-1@tasks-v2"}
    assert instance.get_dynamic_partitions("checkpoints") == ["ckpt-1"]  # added once


def test_partition_added_and_run_requested_in_same_tick(watch, instance):
    path = write_checkpoint(watch, "ckpt-7")
    ticker = Ticker(make_sensor(watch, {"v": "v1"}), instance)
    assert not instance.has_dynamic_partition("checkpoints", "ckpt-7")

    # evaluate_tick resolves the partitioned run request against the instance's partitions with
    # this tick's add request applied; it raises if the partition would not exist.
    data = ticker.tick()
    (request,) = data.run_requests
    assert request.partition_key == "ckpt-7"
    assert request.tags["dagster/partition"] == "ckpt-7"
    assert request.tags[TAG_CHECKPOINT_PATH] == str(path)
    assert instance.has_dynamic_partition("checkpoints", "ckpt-7")

    # Launch the requested run on the same instance: the partition exists, the run succeeds.
    job_def = ticker.defs.resolve_job_def("evaluate_checkpoint_job")
    result = job_def.execute_in_process(
        instance=instance,
        partition_key=request.partition_key,
        tags={k: v for k, v in request.tags.items() if k.startswith("rewardbox/")},
    )
    assert result.success
    assert result.output_for_node("checkpoint_evaluation") == "ckpt-7"
    materialized = instance.get_materialized_partitions(AssetKey("checkpoint_evaluation"))
    assert materialized == {"ckpt-7"}


def test_run_request_without_the_add_request_would_fail(watch, instance):
    """Control for the test above: the same request with no partition added is rejected."""

    @sensor(job=eval_job)
    def no_add_sensor(context):
        return SensorResult(run_requests=[RunRequest(run_key="x@v1", partition_key="ckpt-x")])

    defs = Definitions(assets=[checkpoint_evaluation], jobs=[eval_job], sensors=[no_add_sensor])
    with (
        build_sensor_context(
            instance=instance, instance_ref=instance.get_ref(), definitions=defs
        ) as context,
        pytest.raises(DagsterUnknownPartitionError, match="ckpt-x"),
    ):
        no_add_sensor.evaluate_tick(context)


def test_half_written_checkpoint_is_ignored_until_complete(watch, instance):
    calls: list[str] = []

    def validate(path: Path) -> None:
        calls.append(path.name)
        validate_has_weights(path)

    write_checkpoint(watch, "ckpt-3", config=False, weights=False)  # still being written
    ticker = Ticker(make_sensor(watch, {"v": "v1"}, validate), instance)

    first = ticker.tick()
    assert first.run_requests == [] and calls == []  # not even validated
    assert not instance.has_dynamic_partition("checkpoints", "ckpt-3")

    write_checkpoint(watch, "ckpt-3")  # config.json and weights now present
    second = ticker.tick()
    assert [r.run_key for r in second.run_requests] == ["ckpt-3@v1"]
    ticker.tick()
    assert calls == ["ckpt-3"]  # a handled checkpoint is not validated again


def test_two_deferred_checkpoints_fixed_in_one_tick(watch, instance):
    failing = {"ckpt-a", "ckpt-b"}

    def validate(path: Path) -> None:
        if path.name in failing:
            raise InfrastructureError(f"loader for {path} unavailable")

    write_checkpoint(watch, "ckpt-a")
    write_checkpoint(watch, "ckpt-b")
    ticker = Ticker(make_sensor(watch, {"v": "v1"}, validate), instance)

    assert ticker.tick().run_requests == []
    assert decode_cursor(ticker.cursor) == set()
    failing.clear()
    data = ticker.tick()
    assert [r.run_key for r in data.run_requests] == ["ckpt-a@v1", "ckpt-b@v1"]
    (add_request,) = data.dynamic_partitions_requests
    assert list(add_request.partition_keys) == ["ckpt-a", "ckpt-b"]


def test_missing_watch_dir_skips(watch, instance):
    ticker = Ticker(make_sensor(watch / "absent", {"v": "v1"}), instance)
    data = ticker.tick()
    assert data.run_requests == [] and "does not exist" in data.skip_message


def test_corrupt_cursor_fails_the_tick(watch, instance):
    write_checkpoint(watch, "ckpt-1")
    ticker = Ticker(make_sensor(watch, {"v": "v1"}), instance)
    ticker.cursor = "{not json"
    with pytest.raises(ValueError, match="cursor is not JSON"):
        ticker.tick()


def test_factory_needs_exactly_one_target(tmp_path):
    kwargs = dict(
        partitions_def=checkpoint_partitions,
        watch_dir_fn=lambda: tmp_path,
        task_set_version_fn=lambda: "v1",
        validate_fn=validate_has_weights,
    )
    with pytest.raises(ValueError, match="exactly one"):
        build_checkpoint_sensor(**kwargs)
    with pytest.raises(ValueError, match="exactly one"):
        build_checkpoint_sensor(job_name="a", job=eval_job, **kwargs)
