"""Print each stage's wall time and peak memory, then where the latest reliability report is
(``make demo`` calls this last)."""

from __future__ import annotations

import os

import dagster as dg

from rewardbox.config.profile import profile_from_env
from rewardbox.strict_json import loads

USAGE_KEYS = ("wall_s", "peak_rss_mib")
"""Metadata every campaign and training stage writes (``rewardbox.process_memory.stage_usage``)."""


def stage_usage_lines(instance: dg.DagsterInstance) -> list[str]:
    """One line per asset whose latest materialization recorded ``wall_s`` and ``peak_rss_mib``, in the
    order they were materialized (with the thread teams the stage's model process chose, where it
    recorded them), then their summed wall time and the largest peak, then the wall
    time of the run that materialized the last of them, which also counts the stages that record
    nothing (loading the checkpoint, the blocking checks, the merge) and the executor's step start-up
    (docs/performance.md, "Memory"). Empty when no stage recorded them."""
    rows = []
    for key in instance.get_asset_keys():
        event = instance.get_latest_materialization_event(key)
        if event is None or event.asset_materialization is None:
            continue
        metadata = event.asset_materialization.metadata
        if all(k in metadata for k in USAGE_KEYS):
            values = [metadata[k].value for k in USAGE_KEYS]
            teams = metadata["thread_teams"].value if "thread_teams" in metadata else ""
            rows.append((event.timestamp, key.to_user_string(), *values, event.run_id, teams))
    if not rows:
        return []
    rows.sort()
    width = max(len("stages above"), *(len(row[1]) for row in rows))
    lines = ["Stage wall time and peak resident memory (each stage's own process):"]
    for _, name, wall_s, peak, _, teams in rows:
        threads = f"  threads: {teams}" if teams else ""
        lines.append(f"  {name:<{width}}  {wall_s:8.1f} s  {peak / 1024:6.2f} GiB{threads}")
    total = sum(r[2] for r in rows)
    largest = max(rows, key=lambda r: r[3])
    lines.append(
        f"  {'stages above':<{width}}  {total:8.1f} s  peak {largest[3] / 1024:.2f} GiB ({largest[1]})"
    )
    run_id = rows[-1][4]
    stats = instance.get_run_stats(run_id)
    if stats.start_time and stats.end_time:
        job = instance.get_run_by_id(run_id).job_name
        lines.append(
            f"  {'whole run':<{width}}  {stats.end_time - stats.start_time:8.1f} s  ({job}, run {run_id[:8]})"
        )
    return lines


def main() -> None:
    report = profile_from_env().artifacts_path / "report" / "reliability_report.md"
    lines = []
    if os.environ.get("DAGSTER_HOME"):
        try:
            lines = stage_usage_lines(dg.DagsterInstance.get())
        except Exception as exc:  # noqa: BLE001 - the report's location must still print
            lines = [f"(stage wall times and peak memory unavailable: {type(exc).__name__}: {exc})"]
    if lines:
        print("\n" + "\n".join(lines))
    if report.exists():
        verdict = report.parent / "verdict.json"
        if verdict.exists():  # the report's own verdict: interval and sign-flip test must agree
            print("\n" + "\n".join(loads(verdict.read_text())["lines"]))
        print(
            f"\nReport: {report}\nPlots:  {report.parent}/*.png\nUI:     make dev  (then open http://127.0.0.1:3000)"
        )
    else:
        raise SystemExit(f"no report at {report}: the run did not reach reliability_report")


if __name__ == "__main__":
    main()
