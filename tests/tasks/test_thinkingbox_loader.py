"""ThinkingBox-layout loader: parsing, merging, resolution, test lists, errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.pyfile import parse_python_test_file
from rewardbox.tasks.schema import Task
from rewardbox.tasks.tb_config import merge_bot_instructions, merge_init, recursive_merge
from rewardbox.tasks.thinkingbox import ThinkingBoxDataset, load_dataset
from rewardbox.tasks.yamlfile import parse_yaml_test_file

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"


@pytest.fixture(scope="module")
def loaded():
    return load_dataset(DATASET)


def by_uid(result) -> dict[str, Task]:
    return {t.uid: t for t in result.tasks}


# --- merge rules (docs/thinkingbox.md, "Merging init") ------------------------------


def test_recursive_merge_dicts_recurse_lists_concatenate_scalars_replace():
    base = {"my_list": [1, 2, 3], "my_dict": {"a": 1, "b": 2}, "x": "old", "keep": [9]}
    override = {"my_list": [4, 5], "my_dict": {"b": 11, "c": 12}, "x": {"new": True}}
    merged = recursive_merge(base, override)
    assert merged == {
        "my_list": [1, 2, 3, 4, 5],
        "my_dict": {"a": 1, "b": 11, "c": 12},
        "x": {"new": True},
        "keep": [9],
    }
    assert base["my_list"] == [1, 2, 3] and base["my_dict"] == {"a": 1, "b": 2}  # inputs untouched


def test_recursive_merge_copies_override_values():
    override = {"rows": {"deep": [1]}}
    merged = recursive_merge({"rows": None}, override)
    merged["rows"]["deep"].append(2)
    assert override == {"rows": {"deep": [1]}}


def test_merge_init_per_server_truthy_merges_falsy_replaced():
    world = {"srv_a": {"sources": ["doc"], "data_patch": None}, "srv_b": None, "srv_c": {}}
    init = {
        "srv_a": {"data_patch": {"t": [1]}},
        "srv_b": {"x": 1},
        "srv_c": {"y": [2]},
        "srv_d": {"z": 3},
    }
    merged = merge_init(world, init)
    assert merged["srv_a"] == {"sources": ["doc"], "data_patch": {"t": [1]}}
    assert merged["srv_b"] == {"x": 1} and merged["srv_c"] == {"y": [2]}
    assert list(merged) == ["srv_a", "srv_b", "srv_c", "srv_d"]  # scenario order first
    assert world["srv_a"]["data_patch"] is None
    assert merge_init(world, None) == world and merge_init(world, None) is not world


def test_bot_instructions_join_non_none_only():
    assert merge_bot_instructions("policy", "extra") == "policy\nextra"
    assert merge_bot_instructions("policy", None) == "policy"
    assert merge_bot_instructions(None, None) == ""
    assert merge_bot_instructions("", "extra") == "\nextra"  # '' is not None, as upstream


# --- Python test files -------------------------------------------------------


def test_python_file_defaults_tags_and_test_code(loaded):
    task = by_uid(loaded)["fake_shop_orders.py:test_refund_ok"]
    assert task.scenario == "fake_shop" and task.dataset == "tb_dataset" and task.agent == "think"
    assert task.tags == ("shop", "orders", "refund")  # scenario, file default, test
    assert task.user_context.startswith("Name Ada Byte")
    assert task.max_user_turns == 10 and task.max_agent_turns == sys.maxsize
    code_lines = task.test_code.split("\n")
    source_lines = (DATASET / "test_case/fake_shop/fake_shop_orders.py").read_text().split("\n")
    assert "def test_lookup_only" not in task.test_code  # the other test is blanked
    assert "def validate_database" in task.test_code  # helpers are kept
    def_line = source_lines.index("def test_refund_ok(x: TestContext, judge: Judge):")
    assert code_lines[def_line] == source_lines[def_line]  # line numbers kept
    assert task.test_code.rstrip().endswith("__tb_test_fn = test_refund_ok")
    assert task.metadata == {
        "test_case_file": "test_case/fake_shop/fake_shop_orders.py",
        "test_case_name": "test_refund_ok",
        "agent": "think",
        "scenario": "fake_shop",
    }


def test_scenario_and_agent_fields(loaded):
    task = by_uid(loaded)["fake_shop_orders.py:test_lookup_only"]
    assert task.available_tools == ["get_order", "refund_order", "report_issue"]
    refund = task.tools[1]
    assert refund.override_description == "Refund a delivered order."
    assert refund.override_arg_description == {"order_id": "The order id, e.g. ORD-1."}
    assert task.tools[2].is_end_turn and task.tools[2].direct_response == "Issue reported."
    assert (
        task.bot_instructions
        == "Shop policy. Current date: 2026-01-15.\nNever refund without asking."
    )
    assert task.system_instructions.startswith("You are a support agent.")
    (tool,) = task.builtin_tools
    assert tool["name"] == "ReportSuspiciousToolOutput" and tool["is_end_turn"] is True
    assert tool["input_schema"]["required"] == ["reason"]
    assert task.max_user_turns == 3 and task.max_agent_turns == 12
    # fixtures: conftest.yaml, overridden by the scenario's
    assert task.fixtures["half"]["numerator"] == 1 and task.fixtures["ratio"]["denominator"] == 4


def test_init_merged_into_world_state(loaded):
    task = by_uid(loaded)["fake_shop_orders.py:test_refund_ok"]
    shop = task.world_state["fake_shop"]
    assert [s["name"] for s in shop["sources"]] == ["Refunds.md", "Shipping.md"]
    assert shop["data_patch"] == {
        "orders": [{"id": "ORD-1", "status": "delivered", "total_usd": 20.0}]
    }
    assert shop["rubrics_yesno"] is None
    assert task.world_state["fake_search"] == {}
    assert list(task.init) == ["fake_shop"]
    assert task.golden_interactions() == [("fake_shop", "refund_order", {"order_id": "ORD-1"})]


def test_unknown_key_reports_file_line_key_and_rest_still_loads(loaded):
    (error,) = loaded.errors
    assert isinstance(error, TaskFormatError)
    assert error.path.endswith("broken_keys.py") and error.field == "user_contxt"
    source = (DATASET / "test_case/broken_keys.py").read_text().split("\n")
    assert source[error.line - 1].strip() == "user_contxt: oops"
    uids = by_uid(loaded)
    assert "broken_keys.py:test_good" in uids and "broken_keys.py:test_bad" not in uids
    assert "def test_bad" not in uids["broken_keys.py:test_good"].test_code
    assert len(loaded.tasks) == 7


def test_parse_python_file_edge_cases(tmp_path):
    code = '''
def helper(x):
    """An ordinary docstring: not a test."""

"""!
scenario: s1
tags: [a]
"""

def t_one(x):
    """!
    query: one
    tags: [b]
    """

"""!
scenario: s2
"""

def t_two(x):
    """!
    query: two
    """
'''
    tests, errors = parse_python_test_file(tmp_path / "f.py", code)
    assert errors == []
    assert [t.name for t in tests] == ["t_one", "t_two"]
    assert tests[0].config == {"scenario": "s1", "tags": ["a", "b"], "query": "one"}
    assert tests[1].config == {
        "scenario": "s2",
        "tags": ["a"],
        "query": "two",
    }  # defaults in file order
    _, errors = parse_python_test_file(tmp_path / "bad.py", "def broken(:\n")
    assert errors[0].line == 1 and "not valid Python" in str(errors[0])


# --- YAML test files ---------------------------------------------------------


def test_yaml_declarative_and_upstream_entries(loaded):
    uids = by_uid(loaded)
    cancel = uids["fake_shop_declarative.yaml:cancel_order"]
    assert cancel.query == "Cancel ORD-4 please." and cancel.user_context == "Name Bo Lin."
    assert cancel.world_state["fake_shop"]["data_patch"] == {
        "orders": [{"id": "ORD-4", "status": "placed"}]
    }
    assert "    validate_database(x)\n" in cancel.test_code
    confirm = uids["fake_shop_declarative.yaml:cancel_and_confirm"]
    assert confirm.tags == ("shop", "yaml", "confirm")
    assert "validate_database(x, ['fake_shop'])" in confirm.test_code
    assert "validate_response(x, expect=['ORD-5'])" in confirm.test_code
    assert (
        "from rewardbox.grading.reward import" in confirm.test_code
    )  # the rule is called, not copied
    inline = uids["fake_shop_declarative.yaml:inline_code"]
    assert inline.test_code.rstrip().endswith("__tb_test_fn = inline_code")
    compile(confirm.test_code, "<confirm>", "exec")


def test_yaml_bad_validate_item_and_unknown_key(tmp_path):
    path = tmp_path / "t.yaml"
    text = "scenario: s\ntests:\n- name: ok\n  query: q\n- name: bad\n  query: q\n  validate: [telepathy]\n- name: typo\n  qurey: q\n"
    tests, errors = parse_yaml_test_file(path, text)
    assert [t.name for t in tests] == ["ok"]
    assert [(e.field, e.line) for e in errors] == [("validate", 5), ("qurey", 9)]


# --- resolution and test lists -----------------------------------------------


def test_get_testfile_path_prefix_folders():
    ds = ThinkingBoxDataset(DATASET)
    assert ds.get_testfile_path("broken_keys.py") == DATASET / "test_case" / "broken_keys.py"
    expected = DATASET / "test_case" / "fake_shop" / "fake_shop_orders.py"
    assert ds.get_testfile_path("fake_shop_orders.py") == expected  # longest prefix 'fake_shop'
    with pytest.raises(FileNotFoundError):
        ds.get_testfile_path("no_such_file.py")


def test_get_testfile_path_one_level_only(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(DATASET, root)
    nested = root / "test_case" / "fake" / "shop"
    nested.mkdir(parents=True)
    (nested / "fake_shop_x.py").write_text("")
    (root / "test_case" / "fake" / "fake_shop_y.py").write_text("")
    ds = ThinkingBoxDataset(root)
    assert ds.get_testfile_path("fake_shop_y.py") == root / "test_case" / "fake" / "fake_shop_y.py"
    with pytest.raises(FileNotFoundError):
        ds.get_testfile_path("fake_shop_x.py")


def test_test_list_keeps_order():
    result = load_dataset(DATASET, test_list=DATASET / "testlist_fixture.yaml", dataset_name="shop")
    assert [t.uid for t in result.tasks] == [
        "fake_shop_rubrics_yesno.py:test_refund_told",
        "fake_shop_orders.py:test_lookup_only",
        "fake_shop_orders.py:test_refund_ok",
    ]
    assert {t.dataset for t in result.tasks} == {"shop"} and result.errors == []


def test_test_list_strict_names_missing_uids():
    uids = ["fake_shop_orders.py:test_refund_ok", "fake_shop_orders.py:nope", "ghost.py:test_x"]
    with pytest.raises(TaskFormatError) as info:
        load_dataset(DATASET, test_list=uids)
    assert "fake_shop_orders.py:nope" in str(info.value) and "ghost.py:test_x" in str(info.value)
    lenient = load_dataset(DATASET, test_list=uids, strict=False)
    assert [t.uid for t in lenient.tasks] == ["fake_shop_orders.py:test_refund_ok"]
    assert lenient.missing == ["fake_shop_orders.py:nope", "ghost.py:test_x"]
    assert lenient.errors[-1].field is None and "ghost.py:test_x" in str(lenient.errors[-1])


def test_test_list_reports_broken_listed_test_as_cause():
    with pytest.raises(TaskFormatError) as info:
        load_dataset(DATASET, test_list=["broken_keys.py:test_bad"])
    assert "user_contxt" in str(info.value)


# --- agent rule, skip, bad dataset ---------------------------------------------


def test_agent_rule_with_two_agent_files(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(DATASET, root)
    shutil.copy(root / "agent" / "think.yaml", root / "agent" / "other.yaml")
    result = load_dataset(root)
    assert result.tasks == [] and result.errors[-1].field == "agent"
    assert len([e for e in result.errors if e.field == "agent"]) == 1  # reported once
    assert {t.agent for t in load_dataset(root, agent="other").tasks} == {"other"}
    scenario = root / "scenario" / "fake_shop.yaml"
    scenario.write_text(scenario.read_text().replace("owner: rewardbox-tests", "agent: think"))
    assert len(load_dataset(root).tasks) == 7


def test_skip_tag_and_missing_scenario(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(DATASET, root)
    (root / "test_case" / "extra.py").write_text(
        '"""!\nscenario: fake_shop\n"""\n\n'
        'def t_skipped(x):\n    """!\n    query: q\n    tags: {labels: [l1], skip: true}\n    """\n\n'
        'def t_nowhere(x):\n    """!\n    query: q\n    scenario: missing_scenario\n    """\n'
    )
    result = load_dataset(root)
    assert result.skipped == ["extra.py:t_skipped"]
    assert any(e.path.endswith("missing_scenario.yaml") for e in result.errors)
    listed = load_dataset(root, test_list=["extra.py:t_skipped"])
    assert listed.tasks[0].tags == ("shop", "l1")


def test_bad_scenario_file_names_line_and_field(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(DATASET, root)
    scenario = root / "scenario" / "fake_shop.yaml"
    scenario.write_text(
        scenario.read_text().replace("  is_end_turn: true\n", "  is_end_turn: maybe\n")
    )
    result = load_dataset(root)
    bad = [e for e in result.errors if e.path.endswith("fake_shop.yaml")]
    assert len(bad) == 1 and bad[0].field == "tools.2.is_end_turn"
    assert scenario.read_text().split("\n")[bad[0].line - 1].strip() == "is_end_turn: maybe"
    assert [t.uid for t in result.tasks] == []  # every test uses that scenario
    assert len(result.errors) == 2  # + the unknown-key test, still reported


def test_not_a_dataset(tmp_path):
    with pytest.raises(TaskFormatError):
        load_dataset(tmp_path)


def test_task_roundtrip_through_dict(loaded):
    task = by_uid(loaded)["fake_shop_orders.py:test_refund_ok"]
    assert Task.from_dict(task.to_dict()) == task
