"""What every embedded domain must satisfy: byte-exact datasets, ThinkingBox layout, loader round trip,
task tags and user facts, agent and scenario files, the graders in the test files, tool docstrings, registry.

Each test runs once per domain; what differs between domains is a ``Shape`` below. Checks that only
one domain makes live in its own ``test_<domain>_*.py``.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewardbox.domains import registry
from rewardbox.tasks.thinkingbox import load_dataset

from .conftest import DOMAIN_NAMES, domain_tasks, domain_under_test

CONFIG_FIELDS = {
    "scenario",
    "query",
    "user_context",
    "max_user_sim_turns",
    "max_agent_sim_turns",
    "bot_instructions",
    "history",
    "init",
    "format_query",
    "tags",
}


@dataclass(frozen=True)
class Shape:
    """What the shared checks expect of one domain."""

    id_fact: str  # the user-context line with the user's id
    quoted_fact: str  # the user-context line whose value the first message quotes
    max_tools: int
    max_doc_line: int  # characters of a tool docstring's first line, exclusive
    doc_markers: tuple[str, ...]  # one of them in every tool docstring
    graded: Callable[[dict[str, Any]], bool]  # picks the task whose test function is exec-ed
    diff_row: dict[str, str]  # a diff entry shown when the terminal state is wrong
    good_reply: str  # a reply that tells the value ("{value}")


SHAPES = {
    "retail": Shape(
        "Customer id: ",
        "Email: ",
        10,
        100,
        ("Error",),
        lambda t: t["file"] == "retail_cancel.py" and bool(t["response_values"]),
        {
            "path": "orders[ORD-1].status",
            "type": "value mismatch",
            "result": "pending",
            "golden": "cancelled",
        },
        "Done, {value} will be refunded. <DONE>",
    ),
    "hotel": Shape(
        "Traveller id: ",
        "Email: ",
        12,
        110,
        ("Error",),
        lambda t: t["file"] == "hotel_cancel.py" and bool(t["response_values"]),
        {
            "path": "bookings[BK-1].status",
            "type": "value mismatch",
            "result": "confirmed",
            "golden": "cancelled",
        },
        "Cancelled; {value} will be refunded. <DONE>",
    ),
    "helpdesk": Shape(
        "Employee id: ",
        "Employee id: ",
        12,
        100,
        ("Error", "Never fails"),
        lambda t: t["family"] == "device_paid",
        {
            "path": "devices[DEV-1].status",
            "type": "value mismatch",
            "result": "active",
            "golden": "replacement_ordered",
        },
        "Ordered; your department pays {value}. <DONE>",
    ),
}

each_domain = pytest.mark.parametrize("name", DOMAIN_NAMES)


def _parse(path: Path) -> tuple[dict, dict[str, dict]]:
    """Minimal ThinkingBox reading: module '!' defaults and per-function '!' YAML."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defaults, cases = {}, {}
    for node in tree.body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and str(node.value.value).startswith("!")
        ):
            defaults.update(yaml.safe_load(textwrap.dedent(node.value.value[1:])))
        if isinstance(node, ast.FunctionDef):
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and str(first.value.value).startswith("!")
            ):
                cases[node.name] = yaml.safe_load(textwrap.dedent(first.value.value[1:]))
    return defaults, cases


@each_domain
def test_regenerating_gives_the_checked_in_files_byte_for_byte(name, tmp_path):
    d = domain_under_test(name)
    written = d.generator.write_dataset(tmp_path)
    checked_in = sorted(
        p for p in d.dataset.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert [p.relative_to(tmp_path) for p in written] == [
        p.relative_to(d.dataset) for p in checked_in
    ]
    for new in written:
        assert new.read_bytes() == (d.dataset / new.relative_to(tmp_path)).read_bytes(), new.name


@each_domain
def test_generation_is_deterministic_and_the_seed_matters(name):
    tasks = domain_tasks(name)
    assert domain_under_test(name).generator.generate_tasks() == tasks
    other = domain_under_test(name).generator.generate_tasks(seed=1)
    assert [t["uid"] for t in other] == [t["uid"] for t in tasks]
    assert [t["query"] for t in other] != [t["query"] for t in tasks]


@each_domain
def test_test_files_follow_the_thinkingbox_layout_and_match_the_specs(name):
    by_uid = {t["uid"]: t for t in domain_tasks(name)}
    seen = set()
    for path in sorted((domain_under_test(name).dataset / "test_case").glob("*.py")):
        defaults, cases = _parse(path)
        assert defaults == {"scenario": name, "tags": [name]}
        for fn_name, cfg in cases.items():
            assert set(cfg) <= CONFIG_FIELDS, (path.name, fn_name)
            spec = by_uid[f"{path.name}:{fn_name}"]
            seen.add(spec["uid"])
            assert cfg["query"] == spec["query"] and cfg["user_context"] == spec["user_context"]
            assert cfg["init"] == spec["init"] and cfg["tags"] == spec["tags"]
    assert seen == set(by_uid)


@each_domain
def test_the_loader_reads_every_task_as_generated(name):
    d = domain_under_test(name)
    result = load_dataset(d.dataset, dataset_name=name)
    assert result.errors == [] and result.skipped == []
    by_uid = {t["uid"]: t for t in domain_tasks(name)}
    assert sorted(t.uid for t in result.tasks) == sorted(by_uid)
    for task in result.tasks:
        spec = by_uid[task.uid]
        assert (task.dataset, task.scenario, task.agent) == (name, name, "agent")
        assert task.query == spec["query"] and task.user_context == spec["user_context"]
        assert task.init == spec["init"] and task.world_state == spec["world_state"]
        assert task.tags == (name, *spec["tags"])
        assert [t.name for t in task.tools] == d.tool_names
        assert (
            task.bot_instructions.strip() == d.domain.policy_text
            and "<DONE>" in task.system_instructions
        )
        assert f"__tb_test_fn = {spec['name']}" in task.test_code
        for value in spec["response_values"]:
            assert repr(value) in task.test_code


@each_domain
def test_tags_and_user_facts_match_each_task(name):
    tasks, shape = domain_tasks(name), SHAPES[name]
    assert len({t["uid"] for t in tasks}) == len(tasks)
    assert set(Counter(t["difficulty"] for t in tasks)) == {"trivial", "easy", "medium", "hard"}
    for t in tasks:
        assert f"difficulty:{t['difficulty']}" in t["tags"] and f"family:{t['family']}" in t["tags"]
        assert ("expects_write" in t["tags"]) == t["expects_write"] and (
            "no_write" in t["tags"]
        ) != t["expects_write"]
        assert ("tells_value" in t["tags"]) == bool(t["response_values"])
        ctx = t["user_context"]
        for fact in ("Name: ", "Email: ", shape.id_fact, "Goal: ", "Agrees to proceed: "):
            assert fact in ctx, (t["uid"], fact)
        quoted = next(line for line in ctx.splitlines() if line.startswith(shape.quoted_fact))
        # who is writing is in the first message, except in the short asks (the request alone, authoring.short_ask)
        # and questions about one given id; the simulated user still has it (a forgotten email: the name instead)
        short = t["query"].startswith(("Please ", "Hi, please ")) or t["family"] in (
            "tell_value",
            "forgot_email",
        )
        assert short or quoted[len(shape.quoted_fact) :] in t["query"], t["uid"]


@pytest.mark.parametrize("name", ["retail", "hotel"])
def test_training_domains_split_the_tasks_about_one_in_four(name):
    dataset, tasks = domain_under_test(name).dataset, domain_tasks(name)
    bench = yaml.safe_load((dataset / "testlists" / "benchmark.yaml").read_text())
    cand = yaml.safe_load((dataset / "testlists" / "candidates.yaml").read_text())
    assert not set(bench) & set(cand)
    assert sorted(bench + cand) == sorted(t["uid"] for t in tasks)
    seen = [t for t in tasks if not t["held_out_template"]]
    assert 0.2 <= sum(t["uid"] in bench for t in seen) / len(seen) <= 0.3
    assert {t["family"] for t in tasks if t["uid"] in bench} == {t["family"] for t in tasks}
    held_out = [t for t in tasks if t["held_out_template"]]
    assert len({t["family"] for t in held_out}) >= 2  # whole templates the trainer never sees
    assert all(t["uid"] in bench and "held_out_template" in t["tags"] for t in held_out)
    assert [t["uid"] for t in tasks if t["split"] == "benchmark"] == bench
    loaded = load_dataset(dataset, test_list=dataset / "testlists" / "benchmark.yaml")
    assert [t.uid for t in loaded.tasks] == bench


@each_domain
def test_agent_and_scenario_files(name):
    d = domain_under_test(name)
    agent = yaml.safe_load((d.dataset / "agent" / "agent.yaml").read_text())
    assert (
        "<DONE>" in agent["system_instructions"] and len(agent["system_instructions"].split()) < 120
    )
    scenario = yaml.safe_load((d.dataset / "scenario" / f"{name}.yaml").read_text())
    assert scenario["world_state"] == {
        d.server_name: {"data_patch": None, "golden_test_case": None}
    }
    assert [t["name"] for t in scenario["tools"]] == d.tool_names
    assert scenario["bot_instructions"].strip() == d.domain.policy_text
    assert (
        len(d.domain.policy_text.split()) < 300 and d.seed.TODAY.isoformat() in d.domain.policy_text
    )


@pytest.fixture
def tb_stub(monkeypatch):
    """A stand-in ``thinkingbox.common`` for exec-ing a test file (never a real package)."""
    pkg, common = types.ModuleType("thinkingbox"), types.ModuleType("thinkingbox.common")
    common.Judge, common.TestContext = object, object
    pkg.common = common
    monkeypatch.setitem(sys.modules, "thinkingbox", pkg)
    monkeypatch.setitem(sys.modules, "thinkingbox.common", common)


@each_domain
def test_helpers_in_the_test_files_grade_as_specified(name, tb_stub):
    d, shape = domain_under_test(name), SHAPES[name]
    spec = next(t for t in domain_tasks(name) if shape.graded(t))
    path = d.dataset / "test_case" / spec["file"]
    g: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), g, g)
    fn = g[spec["name"]]

    def ctx(result_hash, response, **extra):
        effects = {
            d.server_name: {
                "result_db_hash": result_hash,
                "golden_db_hash": "h1",
                "diff": [shape.diff_row],
                **extra,
            }
        }
        return types.SimpleNamespace(effects=effects, response=response)

    value = spec["response_values"][0]
    fn(ctx("h1", shape.good_reply.format(value=value)), None)
    with pytest.raises(AssertionError, match=re.escape(shape.diff_row["path"])):
        fn(ctx("h2", f"{value} <DONE>"), None)
    with pytest.raises(AssertionError, match="reply does not state"):
        fn(ctx("h1", "All done. <DONE>"), None)
    with pytest.raises(RuntimeError, match="invalid task"):
        fn(ctx("h1", value, golden_error="golden interaction 0 failed"), None)


@each_domain
def test_every_tool_has_a_docstring_for_the_model(name):
    shape, tools = SHAPES[name], domain_under_test(name).domain.tools
    assert 6 <= len(tools) <= shape.max_tools
    for fn in tools:
        doc = inspect.getdoc(fn)
        assert doc and len(doc.splitlines()[0]) < shape.max_doc_line, fn.__name__
        for p in list(inspect.signature(fn).parameters)[1:]:
            assert f"{p}:" in doc, (fn.__name__, p)
        assert any(marker in doc for marker in shape.doc_markers), fn.__name__


@each_domain
def test_registry_knows_the_server_and_dataset(name):
    d = domain_under_test(name)
    assert d.server_name == f"rewardbox_{name}" and d.server_name in registry.server_names()
    assert registry.get_server_builder(d.server_name).args == (d.name,)
    assert registry.DOMAIN_SERVERS[name] == d.server_name
    assert (registry.dataset_dir(name) / "scenario" / f"{name}.yaml").is_file()
