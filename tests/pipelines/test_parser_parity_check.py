"""The parser-parity check gates ``probe_results``: real parsers pass it, a divergent one blocks selection."""

from __future__ import annotations

import dataclasses
import json

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR
from tests.fixtures.dagster_resources import test_resources
from tests.policy.test_vllm_server import _gone, fake_vllm  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(900)  # whole materialisations on a shared, loaded machine


def _materialize(
    tmp_path,
    profile="test",
    wanted=(
        "candidate_tasks",
        "benchmark_tasks",
        "screened_candidates",
        "probe_results",
        "task_difficulty",
    ),
):
    from assets import evaluation, selection, tasks

    @dg.asset(name="base_checkpoint")
    def stub_checkpoint() -> (
        str
    ):  # the scripted policy never loads it; a fake vllm only needs the directory
        (tmp_path / "base").mkdir(parents=True, exist_ok=True)
        return str(tmp_path / "base")

    wanted = set(wanted)
    modules = [tasks, selection, evaluation]
    assets = [
        a
        for a in dg.load_assets_from_modules(modules)
        if {k.to_user_string() for k in a.keys} <= wanted
    ]
    checks = [
        c
        for c in dg.load_asset_checks_from_modules(modules)
        if {k.asset_key.to_user_string() for k in c.check_keys} <= wanted
    ]
    resources = test_resources(profile, tmp_path)
    return dg.materialize(
        [*assets, stub_checkpoint, *checks],
        resources=resources,
        raise_on_error=False,
        instance=dg.DagsterInstance.ephemeral(),
    )


def _parity_evaluation(result, name="probe_parser_parity"):
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == name]
    return evaluation


def test_real_parsers_pass_and_a_divergent_one_blocks_selection(tmp_path, monkeypatch):
    result = _materialize(tmp_path / "real")
    evaluation = _parity_evaluation(result)
    assert result.success and evaluation.passed
    assert evaluation.metadata["recorded"].value > 0 and evaluation.metadata["corpus"].value >= 25
    assert "task_difficulty" in {
        e.asset_key.to_user_string() for e in result.get_asset_materialization_events()
    }

    from rewardbox.policy import parity

    real = parity.interpret

    def divergent(
        raw_text, tools, **kwargs
    ):  # the training path reads the first call under another name
        out = real(raw_text, tools, **kwargs)
        calls = out.tool_calls
        return dataclasses.replace(
            out,
            tool_calls=tuple(dataclasses.replace(c, name=c.name + "_v2") for c in calls[:1])
            + calls[1:],
        )

    monkeypatch.setattr(parity, "interpret", divergent)
    blocked = _materialize(tmp_path / "divergent")
    evaluation = _parity_evaluation(blocked)
    assert not evaluation.passed and evaluation.metadata["mismatches"].value > 0
    assert "task_difficulty" not in {
        e.asset_key.to_user_string() for e in blocked.get_asset_materialization_events()
    }


def test_a_served_evaluation_runs_on_vllm_and_its_parity_includes_the_hermes_path(
    fake_vllm,  # noqa: F811 - the fixture imported from the vLLM server tests
    tmp_path,
):
    """``serving.kind: vllm`` with a fake ``vllm`` on PATH: the campaign talks to the served endpoint, the
    parity check compares the hermes path too, and no server process is left after the step."""
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["serving"] = {
        "kind": "vllm",
        "require_gpu": False,
        "startup_timeout_s": 60,
        "health_poll_s": 0.2,
    }
    data["evaluation"] = {"trials": 1}
    (tmp_path / "served.yaml").write_text(yaml.safe_dump(data))
    result = _materialize(
        tmp_path,
        str(tmp_path / "served.yaml"),
        wanted=("benchmark_tasks", "base_evaluation_results"),
    )
    assert result.success
    (event,) = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "base_evaluation_results"
    ]
    assert event.materialization.metadata["policy_kind"].value == "endpoint"
    evaluation = _parity_evaluation(result, "base_evaluation_parser_parity")
    assert evaluation.passed and "endpoint_hermes" in evaluation.metadata["paths"].value
    assert evaluation.metadata["recorded"].value > 0
    state = json.loads(fake_vllm.read_text())
    assert state["argv"][:2] == ["serve", str(tmp_path / "base")] and _gone(
        state["pid"], state["child_pid"]
    )
