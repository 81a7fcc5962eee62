"""The TRL ``environment_factory`` class against a real server, without TRL itself.

TRL builds each tool's schema with ``transformers.utils.get_json_schema`` from
the method's signature and docstring; the generated methods must yield the
server's schemas, and an episode played through them must get the grader's reward.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "openenv.core", reason="the environment server needs the 'env' extra (openenv-core)"
)

from transformers.utils import get_json_schema

from rewardbox.envserver.trl import EpisodeOverError, environment_class, rewardbox_reward, task_rows

from .conftest import ADDRESS_TASK


@pytest.fixture(scope="module")
def trl_setup(served):
    rows, tools = task_rows(
        served.url, [ADDRESS_TASK, "retail_address.py:test_retail_address_change_02"]
    )
    return rows, tools, environment_class(served.url, tools)


def test_rows_carry_the_opening_messages_and_the_task_uid(served, trl_setup):
    rows, tools, _cls = trl_setup
    task = served.services.tasks[ADDRESS_TASK]
    assert rows[0]["task_uid"] == ADDRESS_TASK
    assert rows[0]["prompt"][0] == {"role": "system", "content": task.system_instructions}
    assert rows[0]["prompt"][-1] == {"role": "user", "content": task.query}
    assert len({t["function"]["name"] for t in tools}) == len(tools) >= 9


def test_generated_methods_give_trl_the_servers_tool_schemas(trl_setup):
    _rows, tools, cls = trl_setup
    env = cls.__new__(cls)  # no session needed to read schemas
    for tool in tools:
        expected = tool["function"]["parameters"]
        produced = get_json_schema(getattr(env, tool["function"]["name"]))["function"]["parameters"]
        assert set(produced["properties"]) == set(expected["properties"]), tool["function"]["name"]
        assert set(produced.get("required", [])) == set(expected.get("required", [])), tool[
            "function"
        ]["name"]
        for arg, spec in expected["properties"].items():
            assert produced["properties"][arg]["type"] == spec["type"], (
                tool["function"]["name"],
                arg,
            )
            if "enum" in spec:
                assert produced["properties"][arg]["enum"] == spec["enum"]
    schema = get_json_schema(env.reply_to_user)["function"]
    assert schema["name"] == "reply_to_user" and schema["parameters"]["required"] == ["message"]


def test_an_episode_through_the_tool_methods_gets_the_graders_reward(served, trl_setup):
    _rows, _tools, cls = trl_setup
    task = served.services.tasks[ADDRESS_TASK]
    golden, null = cls(), cls()
    try:
        golden.reset(task_uid=ADDRESS_TASK, prompt=[])
        null.reset(task_uid=ADDRESS_TASK, prompt=[])
        outputs = [
            getattr(golden, tool)(**arguments)
            for _server, tool, arguments in task.golden_interactions()
        ]
        assert "ADR-2017-W" in outputs[-1]
        completions = [
            [{"role": "assistant", "content": "Your order now ships to the new address."}],
            [{"role": "assistant", "content": "I cannot help with that."}],
        ]
        assert rewardbox_reward(environments=[golden, null], completions=completions) == [1.0, 0.0]
        with pytest.raises(EpisodeOverError):
            golden.find_customer(email="ana.diaz@mail.test")
    finally:
        golden._client.close()
        null._client.close()


def test_a_tool_name_that_cannot_be_a_method_is_refused(served):
    bad = [{"type": "function", "function": {"name": "reset", "description": "", "parameters": {}}}]
    with pytest.raises(ValueError, match="cannot be a method"):
        environment_class(served.url, bad)
