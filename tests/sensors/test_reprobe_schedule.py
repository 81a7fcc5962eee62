"""Re-probe schedule: one run per scheduled tick, keyed by the scheduled time."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import (
    Definitions,
    DynamicPartitionsDefinition,
    asset,
    build_schedule_context,
    define_asset_job,
    instance_for_test,
)

from sensors.schedules import TAG_SCHEDULED_AT, build_reprobe_schedule

policies = DynamicPartitionsDefinition(name="test_policies")


@asset
def probe_results() -> int:
    return 1


@asset(partitions_def=policies)
def partitioned_probe_results(context) -> str:
    return context.partition_key


def test_run_key_includes_scheduled_date():
    schedule_def = build_reprobe_schedule("reprobe_job")
    assert schedule_def.cron_schedule == "0 3 * * *" and schedule_def.job_name == "reprobe_job"

    def run_for(day: int):
        when = datetime(2025, 3, day, 3, 0, tzinfo=UTC)
        data = schedule_def.evaluate_tick(build_schedule_context(scheduled_execution_time=when))
        (request,) = data.run_requests
        return request

    monday, tuesday = run_for(3), run_for(4)
    assert monday.run_key == "reprobe@2025-03-03T03:00Z"
    assert tuesday.run_key == "reprobe@2025-03-04T03:00Z"
    assert monday.tags[TAG_SCHEDULED_AT].startswith("2025-03-03T03:00")


def test_job_object_and_custom_cron():
    job = define_asset_job("reprobe_job", selection=[probe_results])
    schedule_def = build_reprobe_schedule(job, cron="0 */6 * * *", name="reprobe_6h")
    Definitions(assets=[probe_results], jobs=[job], schedules=[schedule_def])  # wires cleanly
    when = datetime(2025, 3, 3, 18, 0, tzinfo=UTC)
    data = schedule_def.evaluate_tick(build_schedule_context(scheduled_execution_time=when))
    assert [r.run_key for r in data.run_requests] == ["reprobe@2025-03-03T18:00Z"]
    assert schedule_def.name == "reprobe_6h" and schedule_def.cron_schedule == "0 */6 * * *"


def test_partitioned_job_targets_current_policy_partition(tmp_path):
    job = define_asset_job("reprobe_job", selection=[partitioned_probe_results])
    schedule_def = build_reprobe_schedule(job, partition_key_fn=lambda: "ckpt-9")
    defs = Definitions(assets=[partitioned_probe_results], jobs=[job], schedules=[schedule_def])
    when = datetime(2025, 3, 3, 3, 0, tzinfo=UTC)
    with instance_for_test(temp_dir=str(tmp_path), set_dagster_home=False) as instance:
        instance.add_dynamic_partitions("test_policies", ["ckpt-9"])
        # entered and closed, so the instance it opens from the ref does not outlive the tick
        with build_schedule_context(
            instance=instance,
            instance_ref=instance.get_ref(),
            scheduled_execution_time=when,
            repository_def=defs.get_repository_def(),
        ) as context:
            (request,) = schedule_def.evaluate_tick(context).run_requests
    assert request.run_key == "reprobe@2025-03-03T03:00Z@ckpt-9"
    assert request.partition_key == "ckpt-9" and request.tags["dagster/partition"] == "ckpt-9"
