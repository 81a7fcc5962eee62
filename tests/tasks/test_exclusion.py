"""Test lists and benchmark exclusion by uid and by content hash."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.exclusion import check_disjoint, exclude_overlap, load_test_list, write_test_list
from rewardbox.tasks.thinkingbox import load_dataset

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"


@pytest.fixture(scope="module")
def tasks():
    return load_dataset(DATASET).tasks


def test_load_test_list_roundtrip(tmp_path):
    uids = ["a.py:t1", "b_c.py:t2", "a.py:t0"]
    assert load_test_list(write_test_list(tmp_path / "list.yaml", uids)) == uids
    assert load_test_list(DATASET / "testlist_fixture.yaml")[0] == "fake_shop_rubrics_yesno.py:test_refund_told"


@pytest.mark.parametrize(
    "text, line",
    [("- a.py:t1\n- a.py:t1\n", 2), ("- a.py:t1\n- no_colon\n", 2), ("- a.py:t1\n- 42\n", 2), ("a: b\n", 1)],
)
def test_load_test_list_rejects_bad_entries(tmp_path, text, line):
    path = tmp_path / "list.yaml"
    path.write_text(text)
    with pytest.raises(TaskFormatError) as info:
        load_test_list(path)
    assert info.value.line == line and info.value.path == str(path)


def test_exclude_by_uid(tasks):
    benchmark = [t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok"]
    kept, excluded = exclude_overlap(tasks, benchmark)
    assert [t.uid for t in excluded] == ["fake_shop_orders.py:test_refund_ok"]
    assert len(kept) == len(tasks) - 1
    # a bare uid list excludes by uid too
    kept2, excluded2 = exclude_overlap(tasks, ["fake_shop_orders.py:test_refund_ok"])
    assert [t.uid for t in kept2] == [t.uid for t in kept] and excluded2 == excluded


def test_exclude_by_content_hash_under_another_uid(tasks):
    original = next(t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok")
    renamed = replace(original, uid="copied_file.py:test_renamed", query=f"  {original.query}\n", tags=("x",))
    kept, excluded = exclude_overlap([renamed, *tasks[:1]], [original])
    assert excluded == [renamed] and kept == tasks[:1]
    problems = check_disjoint([renamed], [original])
    assert problems == [f"copied_file.py:test_renamed: same query and init as benchmark task {original.uid}"]


def test_different_init_is_not_overlap(tasks):
    original = next(t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok")
    variant = replace(original, uid="v.py:t", init={"fake_shop": {"data_patch": {"orders": []}}})
    assert check_disjoint([variant], [original]) == []
    assert exclude_overlap([variant], [original]) == ([variant], [])


def test_check_disjoint_reports_each_overlap(tasks):
    assert check_disjoint(tasks, []) == []
    problems = check_disjoint(tasks, tasks[:2])
    assert len(problems) == 2 and all("uid is a benchmark uid" in p for p in problems)
