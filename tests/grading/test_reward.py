"""The one reward rule (rewardbox.grading.reward), as generated test files and YAML tasks both call it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewardbox.grading.context import context_payload
from rewardbox.grading.reward import (
    GoldenStateError,
    database_problems,
    validate_database,
    validate_response,
    validate_rubrics_yesno,
)
from rewardbox.grading.testrunner import TestRunner
from rewardbox.tasks.yamlfile import parse_yaml_test_file

REPO = Path(__file__).resolve().parents[2]
SRV = "fake_shop"


def effects(result="h1", golden="h1", **extra):
    return {SRV: {"result_db_hash": result, "golden_db_hash": golden, "diff": [], **extra}}


@pytest.fixture(scope="module")
def runner():
    with TestRunner(max_workers=1, timeout_s=30) as pool:
        yield pool


def yaml_task(tmp_path: Path, validate: str):
    """One declarative YAML test with the given ``validate`` list (YAML flow text)."""
    path = tmp_path / "t.yaml"
    tests, errors = parse_yaml_test_file(
        path, f"scenario: s\ntests:\n- name: t\n  query: q\n  validate: {validate}\n"
    )
    assert not errors
    return tests[0]


def run_yaml(runner, tmp_path, validate: str, reply: str, fx=None):
    task = yaml_task(tmp_path, validate)
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": reply}]
    return runner.run_code_sync(
        task.test_code, context_payload(messages=messages, effects=fx or effects())
    )


# --- the rule -----------------------------------------------------------------


def test_database_equal_hashes_pass_and_differences_are_listed():
    validate_database(SimpleNamespace(effects=effects()))
    diff = [
        {"path": "orders[0].status", "type": "value", "result": "placed", "golden": "cancelled"}
    ]
    problems = database_problems(effects("a", "b", diff=diff))
    assert problems == [
        "fake_shop: terminal state differs from the golden state: "
        'orders[0].status: value result="placed" golden="cancelled"'
    ]
    with pytest.raises(AssertionError, match="orders\\[0\\].status"):
        validate_database(SimpleNamespace(effects=effects("a", "b", diff=diff)), SRV)


def test_database_checks_only_the_named_servers():
    fx = {**effects(), "other": {"result_db_hash": "x", "golden_db_hash": "y", "diff": []}}
    validate_database(SimpleNamespace(effects=fx), [SRV])
    with pytest.raises(AssertionError, match="other"):
        validate_database(SimpleNamespace(effects=fx))


def test_golden_error_is_a_permanent_system_error_not_a_zero():
    with pytest.raises(
        GoldenStateError, match="cannot be built: golden interaction 0 failed"
    ) as info:
        database_problems(effects(None, None, golden_error="golden interaction 0 failed"))
    assert info.value.permanent and info.value.error_kind == "grader_invalid_task"
    assert isinstance(info.value, RuntimeError)  # older callers caught RuntimeError


def test_missing_effects_are_a_system_error():
    with pytest.raises(KeyError):
        validate_database(SimpleNamespace(effects={}))
    with pytest.raises(KeyError):
        validate_rubrics_yesno(SimpleNamespace(effects=effects(), response="r"), judge=None)


def test_response_rule_is_case_insensitive_numeric_and_negation_aware():
    validate_response(SimpleNamespace(response="Your refund of $171 is on its way."), ["171.00"])
    validate_response(SimpleNamespace(response="Order ord-5 is CANCELLED."), ["ORD-5", "cancelled"])
    with pytest.raises(AssertionError, match="does not state ORD-5"):
        validate_response(SimpleNamespace(response="Order ORD-55 is cancelled."), ["ORD-5"])
    with pytest.raises(AssertionError, match="does not state cancelled"):
        validate_response(SimpleNamespace(response="It has not been cancelled."), ["cancelled"])


# --- YAML tasks call the same rule (the differences that were fixed) ---------------


def test_yaml_response_contains_ignores_case_like_generated_tasks(runner, tmp_path):
    """Was a case-sensitive substring test: "ord-5" failed a task expecting "ORD-5"."""
    outcome = run_yaml(
        runner, tmp_path, "[{response_contains: ORD-5}]", "Order ord-5 is cancelled <DONE>"
    )
    assert (outcome.result, outcome.is_system_error) == (True, False)


@pytest.mark.parametrize(
    "reply", ["Order ORD-55 is cancelled <DONE>", "I could not find ORD-5 <DONE>"]
)
def test_yaml_response_contains_needs_a_stated_whole_word(runner, tmp_path, reply):
    """Was a substring test: "ORD-55" and a negated mention both passed "ORD-5"."""
    outcome = run_yaml(runner, tmp_path, "[{response_contains: ORD-5}]", reply)
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (False, 0.0, False)
    assert "does not state ORD-5" in outcome.message


def test_yaml_numbers_compare_as_numbers(runner, tmp_path):
    outcome = run_yaml(
        runner, tmp_path, "[{response_contains: '171.00'}]", "You get $171 back <DONE>"
    )
    assert outcome.result is True


def test_yaml_golden_error_is_a_permanent_system_error(runner, tmp_path):
    """Was a hash comparison only: an unbuildable golden state graded the policy 0."""
    fx = effects("h1", None, golden_error="golden interaction 1 (cancel_order) failed")
    outcome = run_yaml(runner, tmp_path, "[database]", "Done <DONE>", fx)
    assert (outcome.is_system_error, outcome.permanent, outcome.system_error_kind) == (
        True,
        True,
        "grader_invalid_task",
    )
    assert outcome.reward == 0.0 and "cannot be built" in outcome.message


def test_yaml_empty_response_contains_is_refused(tmp_path):
    _, errors = parse_yaml_test_file(
        tmp_path / "t.yaml", "tests:\n- name: t\n  validate: [{response_contains: ''}]\n"
    )
    assert [e.field for e in errors] == ["validate"]


# --- generated test files under the upstream harness -----------------------------------


def test_generated_test_file_runs_with_only_the_standard_library_and_rewardbox(tmp_path):
    """docs/thinkingbox.md: under ``tb infer`` the test worker is the harness's Python, started in the
    directory ``tb`` runs from; the generated files import ``rewardbox.grading.reward``, which must load
    there without our dependencies. ``python -S`` (no site-packages) from the checkout root stands in for
    it, with a minimal ``thinkingbox.common`` as the harness provides, and runs one file as upstream does
    (``exec`` of the file's code, then the test function)."""
    stub = tmp_path / "thinkingbox" / "common"
    stub.mkdir(parents=True)
    (tmp_path / "thinkingbox" / "__init__.py").write_text("")
    (stub / "__init__.py").write_text("class Judge: ...\nclass TestContext: ...\n")
    test_file = REPO / "rewardbox/domains/retail/dataset/test_case/retail_info.py"
    script = textwrap.dedent(f"""
        import sys
        from types import SimpleNamespace
        sys.path.insert(1, {str(tmp_path)!r})
        ns = {{"__name__": "tb_test"}}
        exec(compile(open({str(test_file)!r}).read(), "retail_info.py", "exec"), ns)
        fn = next(v for k, v in ns.items() if k.startswith("test_"))
        other = {{"rewardbox_retail": {{"result_db_hash": "a", "golden_db_hash": "b", "diff": []}}}}
        try:
            fn(SimpleNamespace(effects=other, response=""), None)
        except AssertionError:
            print("failed as expected")
        third_party = sorted({{m.split(".")[0] for m in sys.modules}} - set(sys.stdlib_module_names)
                             - {{"rewardbox", "thinkingbox", "__main__"}})
        print("third party:", third_party)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["failed as expected", "third party: []"]
