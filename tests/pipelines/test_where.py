"""``python -m pipelines.where`` prints each stage's wall time and peak memory read from the instance."""

import dagster as dg

from pipelines.where import stage_usage_lines


@dg.asset
def probe_like(context: dg.AssetExecutionContext) -> int:
    context.add_output_metadata(
        {
            "wall_s": 12.5,
            "peak_rss_mib": 3072.0,
            "episodes": 4,
            "thread_teams": "decode 2, wide 2 (measured, bfloat16 probe)",
        }
    )
    return 1


@dg.asset
def train_like(context: dg.AssetExecutionContext, probe_like: int) -> int:
    context.add_output_metadata({"wall_s": 30.0, "peak_rss_mib": 1536.0})
    return probe_like


@dg.asset
def no_usage(train_like: int) -> int:
    return train_like


def test_stage_lines_read_wall_time_and_peak_memory_from_the_instance():
    instance = dg.DagsterInstance.ephemeral()
    assert stage_usage_lines(instance) == []
    assert dg.materialize([probe_like, train_like, no_usage], instance=instance).success
    lines = stage_usage_lines(instance)
    assert lines[0].startswith("Stage wall time and peak resident memory")
    assert [line.split()[0] for line in lines[1:]] == [
        "probe_like",
        "train_like",
        "stages",
        "whole",
    ]
    assert "12.5 s" in lines[1] and "3.00 GiB" in lines[1]
    assert lines[1].endswith("threads: decode 2, wide 2 (measured, bfloat16 probe)")
    assert "30.0 s" in lines[2] and "1.50 GiB" in lines[2] and "threads" not in lines[2]
    assert "42.5 s" in lines[3] and "peak 3.00 GiB (probe_like)" in lines[3]
    run = instance.get_runs(limit=1)[0]
    stats = instance.get_run_stats(run.run_id)
    assert f"{stats.end_time - stats.start_time:8.1f} s" in lines[4] and run.run_id[:8] in lines[4]
    assert not any("no_usage" in line for line in lines)
