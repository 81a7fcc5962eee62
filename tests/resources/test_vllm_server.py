"""The vLLM resource: the profile's policy when serving is off or impossible, an endpoint at a served checkpoint
otherwise (a fake ``vllm`` executable on PATH), and no server left running after the step."""

from __future__ import annotations

import asyncio
import json

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR, load_profile
from rewardbox.policy import build_policy
from rewardbox.policy.base import ChatRequest
from rewardbox.sandbox.base import ToolSpec
from tests.policy.test_vllm_server import _alive, _gone, fake_vllm  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(60)


def _profile(tmp_path, **serving):
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["serving"] = serving
    data["data_dir"] = str(tmp_path)
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


class _Log:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def info(self, message):
        self.lines.append(("info", message))

    def warning(self, message):
        self.lines.append(("warning", message))


def test_serving_off_yields_the_profile_policy(tmp_path):
    from resources.vllm_server import VllmServerResource

    profile = _profile(tmp_path)
    with VllmServerResource().policy_config(profile, str(tmp_path)) as config:
        assert config == profile.policy


def test_no_vllm_on_this_machine_falls_back_with_a_clear_message(tmp_path):
    from resources.vllm_server import VllmServerResource

    profile, log = _profile(tmp_path, kind="vllm", executable="no-such-vllm-here"), _Log()
    with VllmServerResource().policy_config(profile, str(tmp_path), log) as config:
        assert config == profile.policy
    assert log.lines == [
        (
            "warning",
            "vLLM serving skipped: no 'no-such-vllm-here' executable on PATH (install vllm "
            "on a GPU machine, or point policy.kind: endpoint at any OpenAI-compatible server); "
            "episodes use policy kind 'scripted_mix'",
        )
    ]


def test_served_checkpoint_gets_a_working_endpoint_policy_and_is_stopped_after(fake_vllm, tmp_path):  # noqa: F811
    from resources.vllm_server import VllmServerResource

    profile = _profile(
        tmp_path, kind="vllm", require_gpu=False, startup_timeout_s=20, health_poll_s=0.1
    )
    checkpoint = tmp_path / "merged"
    checkpoint.mkdir()
    tool = ToolSpec(
        "get_order",
        "Look up an order.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    )
    with VllmServerResource().policy_config(profile, str(checkpoint), _Log()) as config:
        state = json.loads(fake_vllm.read_text())
        assert config.kind == "endpoint" and config.model == "rewardbox-policy"
        assert config.base_url.endswith(f":{state['argv'][state['argv'].index('--port') + 1]}/v1")
        policy = build_policy(config, checkpoint_dir=str(checkpoint))

        async def one_turn():
            try:
                return await policy.complete(
                    ChatRequest(
                        messages=[{"role": "user", "content": "where is ORD-9?"}],
                        tools=[tool],
                        max_new_tokens=32,
                        temperature=0.0,
                    )
                )
            finally:
                await policy.aclose()

        completion = asyncio.run(one_turn())
    calls = completion.interpretation.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("get_order", {"order_id": "ORD-9"})]
    assert _gone(state["pid"], state["child_pid"])
    assert (tmp_path / "served" / "serving" / "vllm-merged.log").exists()


def test_resource_teardown_stops_a_server_whose_block_never_ended(fake_vllm, tmp_path):  # noqa: F811
    from resources.vllm_server import VllmServerResource

    profile = _profile(
        tmp_path, kind="vllm", require_gpu=False, startup_timeout_s=20, health_poll_s=0.1
    )
    with dg.build_resources(
        {"vllm_server": VllmServerResource(log_dir=str(tmp_path / "logs"))}
    ) as resources:
        block = resources.vllm_server.policy_config(profile, str(tmp_path))
        block.__enter__()  # an interrupted step: the block's own exit never runs
        state = json.loads(fake_vllm.read_text())
        assert _alive(state["pid"])
    assert _gone(state["pid"], state["child_pid"])
