"""A step fails before its first episode when an endpoint it uses is down or does not serve its model.

The benchmark evaluation materialises with an endpoint policy and an endpoint user simulator on the
fake server (``GET /v1/models`` lists what it serves). A dead policy endpoint, a dead user simulator
and a wrong model name each fail the step at once: the failure names the URL and the model, no chat
request reached any server, and no campaign row, Parquet file or materialisation was written.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR
from tests.fixtures.dagster_resources import failure_text, test_resources
from tests.fixtures.fake_openai import chat_response
from tests.policy.test_preflight import dead_url

pytestmark = pytest.mark.timeout(600)


def _profile(tmp_path: Path, policy_url: str, user_url: str, policy_model: str = "agent") -> str:
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    profile["tasks"]["benchmark"] = [
        {"dataset": "embedded:retail", "test_list": "testlists/benchmark.yaml", "limit": 1}
    ]
    profile["policy"] = {
        "kind": "endpoint",
        "base_url": policy_url,
        "model": policy_model,
        "max_retries": 0,
    }
    profile["user"] = {"kind": "endpoint", "base_url": user_url, "model": "user"}
    profile["episode"].update(max_user_turns=1, concurrency=1)
    path = tmp_path / "preflight.yaml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


@dg.asset(name="base_checkpoint", group_name="model")
def no_checkpoint() -> str:
    """The endpoint policy needs no checkpoint."""
    return ""


@dg.asset(name="benchmark_tasks", group_name="tasks")
def one_benchmark_task() -> list:
    """The benchmark without screening (screening runs the user simulator too, and would fail first)."""
    from rewardbox.config.profile import load_profile
    from rewardbox.tasks.sources import load_benchmark

    return load_benchmark(load_profile("test").tasks).tasks[:1]


def _evaluate(tmp_path: Path, profile: str):
    from assets.evaluation import base_evaluation_results

    result = dg.materialize(
        [no_checkpoint, one_benchmark_task, base_evaluation_results],
        resources=test_resources(profile, tmp_path / "data"),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    failures = [failure_text(e) for e in result.all_events if e.is_step_failure]
    materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    return result, failures, materialised


def _nothing_written(tmp_path: Path, fake) -> None:
    assert not fake.requests  # no chat request: no episode started
    data = tmp_path / "data"
    assert not list(data.rglob("*.parquet")) and not list(data.rglob("*.jsonl"))


@pytest.mark.parametrize("dead", ["policy", "user simulator"])
def test_a_dead_endpoint_fails_the_step_before_any_episode_naming_its_url(
    tmp_path, fake_openai, dead
):
    fake_openai.models = ["agent", "user"]
    fake_openai.default = (200, chat_response("done"), {})
    url = dead_url()
    policy_url, user_url = (
        (url, fake_openai.base_url) if dead == "policy" else (fake_openai.base_url, url)
    )
    result, failures, materialised = _evaluate(tmp_path, _profile(tmp_path, policy_url, user_url))
    assert not result.success and "base_evaluation_results" not in materialised
    (message,) = failures
    model = "agent" if dead == "policy" else "user"
    assert (
        f"{dead} endpoint {url} (model '{model}'): unreachable" in message
        and "no episode was run" in message
    )
    _nothing_written(tmp_path, fake_openai)


def test_a_wrong_model_name_fails_the_step_naming_the_url_and_the_models_served(
    tmp_path, fake_openai
):
    fake_openai.models = ["agent", "user"]
    result, failures, materialised = _evaluate(
        tmp_path,
        _profile(tmp_path, fake_openai.base_url, fake_openai.base_url, policy_model="agnet"),
    )
    assert not result.success and "base_evaluation_results" not in materialised
    (message,) = failures
    assert (
        f"policy endpoint {fake_openai.base_url} (model 'agnet'): model 'agnet' is not served there"
        in message
    )
    assert "it serves: agent, user" in message
    _nothing_written(tmp_path, fake_openai)


def test_served_endpoints_pass_the_preflight_and_the_step_runs(tmp_path, fake_openai):
    fake_openai.models = ["agent", "user"]
    fake_openai.default = (200, chat_response("done"), {})
    result, failures, materialised = _evaluate(
        tmp_path, _profile(tmp_path, fake_openai.base_url, fake_openai.base_url)
    )
    assert result.success and not failures and "base_evaluation_results" in materialised
    assert fake_openai.requests and fake_openai.model_requests
