"""Task-source sensor: a changed fingerprint of the candidate task files requests one re-screen."""

from __future__ import annotations

import os

import pytest
from dagster import DagsterInstance, build_sensor_context

from sensors.task_source import (
    TAG_SOURCE_FINGERPRINT,
    build_task_source_sensor,
    fingerprint_task_source,
)


def tick(sensor_def, instance, cursor):
    """Evaluates one tick; returns (raw run requests, new cursor)."""
    data = sensor_def.evaluate_tick(build_sensor_context(instance=instance, cursor=cursor))
    return data.run_requests, data.cursor


@pytest.fixture()
def source(tmp_path):
    root = tmp_path / "candidates"
    (root / "airline").mkdir(parents=True)
    (root / "airline" / "tasks.yaml").write_text("- uid: a1\n")
    return root


@pytest.fixture()
def instance():
    with DagsterInstance.ephemeral() as inst:
        yield inst


def test_same_fingerprint_once_change_twice(source, instance):
    sensor_def = build_task_source_sensor(
        job_name="rescreen_job", source_fingerprint_fn=lambda: fingerprint_task_source(source)
    )
    first, cursor = tick(sensor_def, instance, None)
    again, cursor_again = tick(sensor_def, instance, cursor)
    (source / "airline" / "tasks.yaml").write_text("- uid: a1\n- uid: a2\n")
    changed, cursor_changed = tick(sensor_def, instance, cursor_again)

    assert len(first) == 1 and again == [] and len(changed) == 1
    assert cursor == cursor_again == first[0].tags[TAG_SOURCE_FINGERPRINT]
    assert cursor_changed == changed[0].tags[TAG_SOURCE_FINGERPRINT] != cursor
    assert first[0].run_key.startswith(cursor) and changed[0].run_key.startswith(cursor_changed)
    assert first[0].run_key != changed[0].run_key


def test_revert_to_an_earlier_source_gets_its_own_run_key(instance):
    values = iter(["A", "B", "A"])
    sensor_def = build_task_source_sensor(
        job_name="rescreen_job", source_fingerprint_fn=lambda: next(values)
    )
    cursor, keys = None, []
    for _ in range(3):
        requests, cursor = tick(sensor_def, instance, cursor)
        keys += [r.run_key for r in requests]
    assert keys == ["A@after:none", "B@after:A", "A@after:B"]  # 3 distinct keys: none deduplicated


def test_fingerprint_counts_dataset_files_only(source):
    before = fingerprint_task_source(source)
    (source / "notes.swp").write_text("editor junk")
    os.utime(source / "airline" / "tasks.yaml", (0, 0))
    assert fingerprint_task_source(source) == before  # junk file and mtime ignored
    (source / "airline" / "tasks.yaml").rename(source / "airline" / "tasks2.yaml")
    assert fingerprint_task_source(source) != before  # a rename counts


def test_missing_source_fails_the_tick(tmp_path, instance):
    sensor_def = build_task_source_sensor(
        job_name="rescreen_job",
        source_fingerprint_fn=lambda: fingerprint_task_source(tmp_path / "absent"),
    )
    with pytest.raises(FileNotFoundError, match="absent"):
        tick(sensor_def, instance, None)
