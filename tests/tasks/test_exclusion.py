"""Test lists and benchmark exclusion by uid and by content hash."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.exclusion import (
    check_disjoint,
    exclude_overlap,
    load_test_list,
    write_test_list,
)
from rewardbox.tasks.thinkingbox import load_dataset

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"


@pytest.fixture(scope="module")
def tasks():
    return load_dataset(DATASET).tasks


def test_load_test_list_roundtrip(tmp_path):
    uids = ["a.py:t1", "b_c.py:t2", "a.py:t0"]
    assert load_test_list(write_test_list(tmp_path / "list.yaml", uids)) == uids
    assert (
        load_test_list(DATASET / "testlist_fixture.yaml")[0]
        == "fake_shop_rubrics_yesno.py:test_refund_told"
    )


@pytest.mark.parametrize(
    "text, line",
    [
        ("- a.py:t1\n- a.py:t1\n", 2),
        ("- a.py:t1\n- no_colon\n", 2),
        ("- a.py:t1\n- 42\n", 2),
        ("a: b\n", 1),
    ],
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
    renamed = replace(
        original, uid="copied_file.py:test_renamed", query=f"  {original.query}\n", tags=("x",)
    )
    kept, excluded = exclude_overlap([renamed, *tasks[:1]], [original])
    assert excluded == [renamed] and kept == tasks[:1]
    problems = check_disjoint([renamed], [original])
    assert problems == [
        f"copied_file.py:test_renamed: same task (query, user context, starting data, golden actions) as benchmark task {original.uid}"
    ]


def test_different_init_is_not_overlap(tasks):
    original = next(t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok")
    variant = replace(original, uid="v.py:t", init={"fake_shop": {"data_patch": {"orders": []}}})
    assert check_disjoint([variant], [original]) == []
    assert exclude_overlap([variant], [original]) == ([variant], [])


def test_check_disjoint_reports_each_overlap(tasks):
    assert check_disjoint(tasks, []) == []
    problems = check_disjoint(tasks, tasks[:2])
    assert len(problems) == 2 and all("uid is a benchmark uid" in p for p in problems)


def _twin_dataset(root: Path) -> Path:
    """The issue's small case: test_a (query "hi", empty golden) and test_b = test_a + rubrics_yesno."""
    (root / "agent").mkdir(parents=True)
    (root / "scenario").mkdir()
    (root / "test_case").mkdir()
    (root / "agent" / "a.yaml").write_text("system_instructions: hi\nbuiltin_tools: []\n")
    (root / "scenario" / "toy.yaml").write_text(
        "world_state:\n  srv: {data_patch: null, golden_test_case: null}\ntools:\n- {name: look}\n"
    )
    golden = "golden_test_case: {tool_interactions: []}"
    (root / "test_case" / "toy.py").write_text(f'''"""!
scenario: toy
"""


def test_a(x):
    """!
    query: hi
    init:
      srv: {{{golden}}}
    """


def test_b(x):
    """!
    query: hi
    init:
      srv:
        {golden}
        rubrics_yesno: ["Does the reply state the status?"]
    """


def test_c(x):
    """!
    query: hi
    init:
      srv:
        {golden}
        data_patch: {{orders: [{{id: 1}}]}}
    """
''')
    return root


def test_twin_with_only_grading_keys_is_excluded(tmp_path):
    root = _twin_dataset(tmp_path / "toy")
    everything = load_dataset(root).tasks
    benchmark = load_dataset(root, test_list=["toy.py:test_b"]).tasks
    kept, excluded = exclude_overlap(everything, benchmark)
    assert [t.uid for t in excluded] == ["toy.py:test_a", "toy.py:test_b"]
    assert [t.uid for t in kept] == ["toy.py:test_c"]  # other starting data: another task
    assert check_disjoint(everything, benchmark)[0].startswith("toy.py:test_a: same task")


def test_identity_covers_user_context_and_golden_actions(tasks):
    original = next(t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok")
    other_user = replace(
        original, uid="u.py:t", user_context=original.user_context + " Prefers email."
    )
    world = {k: dict(v or {}) for k, v in original.world_state.items()}
    server = next(iter(world))
    world[server]["golden_test_case"] = {
        "tool_interactions": [{"tool": "refund_order", "parameters": {"order_id": "X"}}]
    }
    other_golden = replace(original, uid="g.py:t", world_state=world)
    assert check_disjoint([other_user, other_golden], [original]) == []


def test_the_leak_check_flags_a_benchmark_split_in_a_training_set(tasks):
    held_out = replace(tasks[0], split="benchmark")
    problems = check_disjoint([tasks[1], held_out])  # no benchmark given: splits only
    assert problems == [f"{held_out.uid}: split is 'benchmark', not 'candidate'"]
    assert check_disjoint(tasks[1:]) == []


def test_content_hash_canonicalises_whitespace_but_not_words(tasks):
    """Issue #23 item 8: a reflowed or double-spaced twin is the same task; a changed word is not."""
    original = next(t for t in tasks if t.uid == "fake_shop_orders.py:test_refund_ok")
    words = original.query.split()
    reflowed = replace(
        original, query="  " + "\n".join(words) + "\t", user_context=original.user_context + "\n\n"
    )
    spaced = replace(original, query="  ".join(words))
    assert reflowed.content_hash() == spaced.content_hash() == original.content_hash()
    assert replace(original, query="".join(words)).content_hash() != original.content_hash()
    assert (
        replace(original, query=original.query + " now").content_hash() != original.content_hash()
    )
