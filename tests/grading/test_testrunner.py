"""TestRunner: outcomes (docs/thinkingbox.md, "Test code"), worker reuse and replacement, fixtures, TestContext."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest

from rewardbox.grading.context import TestContext, context_payload
from rewardbox.grading.execute import evaluate_test_code
from rewardbox.grading.testrunner import TestRunner
from rewardbox.tasks.thinkingbox import load_dataset

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"
SRV = "fake_shop"


@pytest.fixture(scope="module")
def tasks():
    return {t.uid: t for t in load_dataset(DATASET).tasks}


@pytest.fixture(scope="module")
def runner():
    with TestRunner(max_workers=1, timeout_s=30) as pool:
        yield pool


def effects(result="h1", golden="h1", **extra):
    return {SRV: {"result_db_hash": result, "golden_db_hash": golden, "diff": [], **extra}}


def ctx(**kw):
    kw.setdefault(
        "messages",
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Done <DONE>"}],
    )
    kw.setdefault("effects", effects())
    return context_payload(**kw)


def code_task(tasks, body: str):
    """A fixture task with its test code replaced by ``body`` (a function named t)."""
    return replace(
        tasks["fake_shop_orders.py:test_refund_ok"], test_code=f"{body}\n__tb_test_fn = t\n"
    )


# --- outcomes ---------------------------------------------------------------


def test_pass(runner, tasks):
    outcome = runner.run_sync(tasks["fake_shop_orders.py:test_refund_ok"], ctx())
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (True, 1.0, False)


def test_assertion_is_policy_failure_with_location(runner, tasks):
    diff = [{"path": "orders", "type": "length mismatch", "result": 1, "golden": 2}]
    outcome = runner.run_sync(
        tasks["fake_shop_orders.py:test_refund_ok"], ctx(effects=effects("a", "b", diff=diff))
    )
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (False, 0.0, False)
    assert "terminal state differs" in outcome.message and "length mismatch" in outcome.message
    assert outcome.line_content.strip().startswith('assert effects["result_db_hash"]')
    source = (DATASET / "test_case/fake_shop/fake_shop_orders.py").read_text().split("\n")
    assert source[outcome.lineno - 1] == outcome.line_content
    assert "AssertionError" in outcome.tb


def test_keyerror_is_system_error(runner, tasks):
    outcome = runner.run_sync(
        tasks["fake_shop_orders.py:test_refund_ok"], ctx(effects={SRV: {"status": "error"}})
    )
    assert outcome.is_system_error and not outcome.result and outcome.reward == 0.0
    assert outcome.message.startswith("KeyError") and "KeyError" in outcome.tb


def test_numeric_reward_and_prints(runner, tasks):
    outcome = runner.run_sync(tasks["fake_shop_orders.py:test_lookup_only"], ctx())
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (True, 0.5, False)
    assert outcome.prints == "order looked up\n"


@pytest.mark.parametrize("value", ["1.7", "-0.1", "float('nan')", "'high'"])
def test_reward_out_of_range_is_system_error(runner, tasks, value):
    outcome = runner.run_sync(code_task(tasks, f"def t(x):\n    return {value}"), ctx())
    assert outcome.is_system_error and "[0, 1]" in outcome.message


def test_test_metadata_and_missing_binding(runner, tasks):
    task = code_task(tasks, "def t(x):\n    x.metadata['seen'] = x.query()")
    outcome = runner.run_sync(task, ctx())
    assert outcome.result and outcome.metadata["seen"] == "hi"
    unbound = replace(task, test_code="def t(x):\n    pass\n")
    assert runner.run_sync(unbound, ctx()).is_system_error


def test_declarative_yaml_test_runs(runner, tasks):
    task = tasks["fake_shop_declarative.yaml:cancel_and_confirm"]
    said = [{"role": "assistant", "content": "ORD-5 is cancelled. <DONE>"}]
    assert runner.run_sync(task, ctx(messages=said)).reward == 1.0
    failed = runner.run_sync(task, ctx(messages=[{"role": "assistant", "content": "Cancelled."}]))
    assert not failed.result and not failed.is_system_error and "ORD-5" in failed.message
    missing = runner.run_sync(tasks["fake_shop_declarative.yaml:cancel_order"], ctx(effects={}))
    assert missing.is_system_error  # no effects at all is never a pass


# --- fixtures -----------------------------------------------------------------


def test_fixtures_by_parameter_name(runner, tasks):
    task = code_task(tasks, "def t(x, judge, half, ratio):\n    return float(half + ratio)")
    assert runner.run_sync(task, ctx()).reward == 0.75  # 1/2 (conftest) + 1/4 (scenario override)
    unknown = code_task(tasks, "def t(x, nonexistent):\n    pass")
    outcome = runner.run_sync(unknown, ctx())
    assert outcome.is_system_error and "nonexistent" in outcome.message


def test_context_manager_fixture_is_entered(runner, tasks):
    fixtures = {"answer": {"type": "contextlib.nullcontext", "enter_result": 0.25}}
    task = replace(code_task(tasks, "def t(x, answer):\n    return answer"), fixtures=fixtures)
    assert runner.run_sync(task, ctx()).reward == 0.25


# --- the pool -------------------------------------------------------------------


def test_pool_reuses_one_worker_process(runner, tasks):
    task = tasks["fake_shop_orders.py:test_refund_ok"]
    pids = {runner.run_sync(task, ctx()).metadata["worker_pid"] for _ in range(6)}
    assert len(pids) == 1 and os.getpid() not in pids


def test_timeout_kills_worker_and_pool_recovers(tasks):
    hang = code_task(tasks, "import time\ndef t(x):\n    time.sleep(60)")
    ok = tasks["fake_shop_orders.py:test_refund_ok"]
    with TestRunner(max_workers=1, timeout_s=1.0) as pool:
        first_pid = pool.run_sync(ok, ctx()).metadata["worker_pid"]
        outcome = pool.run_sync(hang, ctx())
        assert outcome.is_system_error and "timed out" in outcome.message
        after = pool.run_sync(ok, ctx())
        assert after.result and after.metadata["worker_pid"] != first_pid
        assert pool.workers_started == 2


def test_crashing_worker_is_system_error_and_replaced(tasks):
    crash = code_task(tasks, "import os\ndef t(x):\n    os._exit(3)")
    with TestRunner(max_workers=1, timeout_s=30) as pool:
        outcome = pool.run_sync(crash, ctx())
        assert outcome.is_system_error and "exit code 3" in outcome.message
        assert pool.run_sync(tasks["fake_shop_orders.py:test_refund_ok"], ctx()).result


def test_workers_recycled_after_max_tasks(tasks):
    task = tasks["fake_shop_orders.py:test_refund_ok"]
    with TestRunner(max_workers=1, max_tasks_per_worker=2) as pool:
        pids = [pool.run_sync(task, ctx()).metadata["worker_pid"] for _ in range(4)]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[1] != pids[2]


def test_async_run_concurrent(tasks):
    task = tasks["fake_shop_orders.py:test_refund_ok"]

    async def grade_all(pool):
        return await asyncio.gather(*(pool.run(task, ctx()) for _ in range(6)))

    with TestRunner(max_workers=2) as pool:
        outcomes = asyncio.run(grade_all(pool))
        assert all(o.result for o in outcomes)
        assert len({o.metadata["worker_pid"] for o in outcomes}) <= 2 and pool.workers_started <= 2
    with pytest.raises(RuntimeError):
        pool.run_sync(task, ctx())


# --- TestContext ------------------------------------------------------------------


def test_context_response_transcript_and_query():
    payload = {
        "messages": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "Refund ORD-1"},
            {"role": "assistant", "content": "thinking...", "metadata": {"tag": "think"}},
            {"role": "assistant", "content": "Which order?"},
            {"role": "user", "content": "ORD-1"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
            {"role": "tool", "content": "{}"},
            {"role": "assistant", "content": "Refunded. <DONE>"},
            {"role": "assistant", "content": "", "dummy": True},
        ]
    }
    x = TestContext.from_dict(payload)
    assert x.response == "Refunded. <DONE>" and x.query() == "Refund ORD-1"
    assert (
        x.transcript()
        == "User: Refund ORD-1\n\nAssistant: Which order?\n\nUser: ORD-1\n\nAssistant: Refunded. <DONE>"
    )
    assert x.transcript(1) == "Assistant: Refunded. <DONE>"
    assert (
        x.transcript(limit=2)
        == "Assistant: Which order?\n\nUser: ORD-1\n\nAssistant: Refunded. <DONE>"
    )
    with pytest.raises(ValueError):
        x.transcript(-1)
    with pytest.raises(ValueError):
        TestContext.from_dict({}).query()


def test_context_tool_calls_both_shapes_and_roundtrip():
    x = TestContext.from_dict(
        {
            "tool_calls": [
                {
                    "tool_call": {"name": "get_order", "arguments": {"order_id": "A"}, "id": "c1"},
                    "tool_response": {"name": "get_order", "content": '{"id": "A"}', "id": "c1"},
                },
                {"name": "refund_order", "arguments": {"order_id": "A"}, "output": '{"ok": true}'},
                {
                    "tool_call": {"name": "get_order", "arguments": {}},
                    "tool_response": "Error: not found",
                },
            ],
            "response": "explicit",
            "session_id": "s-1",
        }
    )
    assert [t.tool_call.name for t in x.tool_calls] == ["get_order", "refund_order", "get_order"]
    assert x.tool_calls[2].tool_response.content == "Error: not found"
    assert x.tool_calls[1].tool_response.content == '{"ok": true}' and x.tool_calls[
        0
    ].tool_call.arguments == {"order_id": "A"}
    assert x.response == "explicit" and x.session_id == "s-1"
    again = TestContext.from_dict(x.to_dict())
    assert again.tool_calls == x.tool_calls and again.response == x.response


def test_in_process_evaluation_matches_pool(runner, tasks):
    task = tasks["fake_shop_orders.py:test_lookup_only"]
    local = evaluate_test_code(task.test_code, ctx(), fixtures=task.fixtures, uid=task.uid)
    pooled = runner.run_sync(task, ctx())
    assert (local.result, local.reward, local.prints) == (
        pooled.result,
        pooled.reward,
        pooled.prints,
    )
