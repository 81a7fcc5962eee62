"""The checked-in retail dataset: byte-exact regeneration, ThinkingBox layout, task mix."""

from __future__ import annotations

import ast
import sys
import textwrap
import types
from collections import Counter
from pathlib import Path

import pytest
import yaml

from rewardbox.domains import registry
from rewardbox.domains.retail.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.retail.generator import generate_tasks, write_dataset

DATASET = registry.dataset_dir("retail")
CONFIG_FIELDS = {"scenario", "query", "user_context", "max_user_sim_turns", "max_agent_sim_turns",
                 "bot_instructions", "history", "init", "format_query", "tags"}
TASKS = generate_tasks()


def _parse(path: Path) -> tuple[dict, dict[str, dict]]:
    """Minimal ThinkingBox reading: module '!' defaults and per-function '!' YAML."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defaults, cases = {}, {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and str(node.value.value).startswith("!"):
            defaults.update(yaml.safe_load(textwrap.dedent(node.value.value[1:])))
        if isinstance(node, ast.FunctionDef):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and str(first.value.value).startswith("!"):
                cases[node.name] = yaml.safe_load(textwrap.dedent(first.value.value[1:]))
    return defaults, cases


def test_regenerating_gives_the_checked_in_files_byte_for_byte(tmp_path):
    written = write_dataset(tmp_path)
    checked_in = sorted(p for p in DATASET.rglob("*") if p.is_file())
    assert [p.relative_to(tmp_path) for p in written] == [p.relative_to(DATASET) for p in checked_in]
    for new in written:
        assert new.read_bytes() == (DATASET / new.relative_to(tmp_path)).read_bytes(), new.name


def test_generation_is_deterministic_and_the_seed_matters():
    assert generate_tasks() == TASKS
    other = generate_tasks(seed=1)
    assert [t["uid"] for t in other] == [t["uid"] for t in TASKS]
    assert [t["query"] for t in other] != [t["query"] for t in TASKS]


def test_test_files_follow_the_thinkingbox_layout_and_match_the_specs():
    by_uid = {t["uid"]: t for t in TASKS}
    seen = set()
    for path in sorted((DATASET / "test_case").glob("*.py")):
        defaults, cases = _parse(path)
        assert defaults == {"scenario": "retail", "tags": ["retail"]}
        for name, cfg in cases.items():
            assert set(cfg) <= CONFIG_FIELDS, (path.name, name)
            spec = by_uid[f"{path.name}:{name}"]
            seen.add(spec["uid"])
            assert cfg["query"] == spec["query"] and cfg["user_context"] == spec["user_context"]
            assert cfg["init"] == spec["init"] and cfg["tags"] == spec["tags"]
    assert seen == set(by_uid)


def test_task_mix():
    assert len(TASKS) >= 40
    levels = Counter(t["difficulty"] for t in TASKS)
    assert set(levels) == {"trivial", "easy", "medium", "hard"}
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [t for t in TASKS if sum(i["tool"] in ("cancel_order", "update_shipping_address", "return_items")
                                     for i in t["init"][SERVER_NAME]["golden_test_case"]["tool_interactions"]) > 1
             or any(len(i["parameters"].get("item_ids", [])) > 1
                    for i in t["init"][SERVER_NAME]["golden_test_case"]["tool_interactions"])]
    assert len(traps) >= 8 and len(tell) >= 4 and len(multi) >= 4
    for t in TASKS:
        assert f"difficulty:{t['difficulty']}" in t["tags"]
        assert ("expects_write" in t["tags"]) == t["expects_write"] and ("no_write" in t["tags"]) != t["expects_write"]
        ctx = t["user_context"]
        for fact in ("Name: ", "Email: ", "Customer id: ", "Goal: ", "Agrees to proceed: "):
            assert fact in ctx, (t["uid"], fact)
        email = next(line for line in ctx.splitlines() if line.startswith("Email: "))[7:]
        assert email in t["query"]
    assert len({t["uid"] for t in TASKS}) == len(TASKS)


def test_testlists_split_the_tasks_about_one_in_four():
    bench = yaml.safe_load((DATASET / "testlists" / "benchmark.yaml").read_text())
    cand = yaml.safe_load((DATASET / "testlists" / "candidates.yaml").read_text())
    assert not set(bench) & set(cand)
    assert sorted(bench + cand) == sorted(t["uid"] for t in TASKS)
    assert 0.2 <= len(bench) / len(TASKS) <= 0.3
    assert {t["family"] for t in TASKS if t["uid"] in bench} == {t["family"] for t in TASKS}


def test_agent_and_scenario_files():
    agent = yaml.safe_load((DATASET / "agent" / "agent.yaml").read_text())
    assert "<DONE>" in agent["system_instructions"] and len(agent["system_instructions"].split()) < 120
    scenario = yaml.safe_load((DATASET / "scenario" / "retail.yaml").read_text())
    assert scenario["world_state"] == {SERVER_NAME: {"data_patch": None, "golden_test_case": None}}
    assert [t["name"] for t in scenario["tools"]] == [fn.__name__ for fn in DOMAIN.tools]
    assert scenario["bot_instructions"].strip() == DOMAIN.policy_text
    assert len(DOMAIN.policy_text.split()) < 300 and "2025-06-15" in DOMAIN.policy_text


@pytest.fixture
def tb_stub(monkeypatch):
    """A stand-in ``thinkingbox.common`` for exec-ing a test file (never a real package)."""
    pkg, common = types.ModuleType("thinkingbox"), types.ModuleType("thinkingbox.common")
    common.Judge, common.TestContext = object, object
    pkg.common = common
    monkeypatch.setitem(sys.modules, "thinkingbox", pkg)
    monkeypatch.setitem(sys.modules, "thinkingbox.common", common)


def test_helpers_in_the_test_files_grade_as_specified(tb_stub):
    path = DATASET / "test_case" / "retail_cancel.py"
    spec = next(t for t in TASKS if t["file"] == "retail_cancel.py" and t["response_values"])
    g: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), g, g)
    fn = g[spec["name"]]

    def ctx(result_hash, response, **extra):
        effects = {SERVER_NAME: {"result_db_hash": result_hash, "golden_db_hash": "h1",
                                 "diff": [{"path": "orders[ORD-1].status", "type": "value mismatch",
                                           "result": "pending", "golden": "cancelled"}], **extra}}
        return types.SimpleNamespace(effects=effects, response=response)

    value = spec["response_values"][0]
    fn(ctx("h1", f"Done, {value} will be refunded. <DONE>"), None)
    with pytest.raises(AssertionError, match=r"orders\[ORD-1\].status"):
        fn(ctx("h2", f"{value} <DONE>"), None)
    with pytest.raises(AssertionError, match="reply lacks"):
        fn(ctx("h1", "All done. <DONE>"), None)
    with pytest.raises(RuntimeError, match="invalid task"):
        fn(ctx("h1", value, golden_error="golden interaction 0 failed"), None)
