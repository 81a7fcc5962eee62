"""The ``thinkingbox.common`` stand-in: submodules, message types, judge methods, rubric judge,
and permanent system errors (not retried)."""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import run_trial
from rewardbox.grading.context import TestContext, context_payload
from rewardbox.grading.execute import evaluate_test_code
from tests.fixtures.fake_judge import Judge200

SUBMODULE_TEST = """
from thinkingbox.common import Judge, TestContext
from thinkingbox.common.chat_types import ParallelToolCall, Text, ToolResponse
from thinkingbox.common.config_types import RubricConfig
from thinkingbox.common.rubrics_judge import RubricJudge


def t(x: TestContext, judge: Judge):
    texts = [m for m in x.messages if isinstance(m, Text) and m.is_visible]
    calls = [c.name for m in x.messages if isinstance(m, ParallelToolCall) for c in m.tool_calls]
    outputs = [m.content for m in x.messages if isinstance(m, ToolResponse)]
    assert calls == ["get_order"] and outputs == ['{"status": "shipped"}'], (calls, outputs)
    assert judge.no_repeat(x.response, [t.content for t in texts[:-1] if t.role == "assistant"])
    rubric = RubricJudge(judge, x).evaluate(x.response, [RubricConfig(criterion="States the status", weight=2),
                                                         RubricConfig(criterion="Rude", weight=1, is_penalty=True)])
    rubric.assert_passed()
    x.metadata["texts"] = len(texts)

__tb_test_fn = t
"""


def _episode_messages():
    return [
        {"role": "user", "content": "Where is ORD-1?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "check the order",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"id": "ORD-1"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "get_order",
            "content": '{"status": "shipped"}',
        },
        {"role": "assistant", "content": "ORD-1 has shipped. <DONE>"},
    ]


def test_test_file_importing_submodules_runs_with_typed_messages():
    rule = lambda prompt: "NO" if "Rude" in prompt or "<first>" in prompt else "YES"  # noqa: E731
    judge = Judge200(rule)
    try:
        outcome = evaluate_test_code(
            SUBMODULE_TEST, context_payload(_episode_messages(), {}), judge_config=judge.config
        )
    finally:
        judge.close()
    assert outcome.result and not outcome.is_system_error, outcome.tb
    assert outcome.metadata["texts"] == 3 and outcome.metadata["rubric_reward"] == 1.0
    compare = [p for p in judge.prompts if "<first>" in p]
    assert (
        len(compare) == 1 and "Let me look." in compare[0]
    )  # no_repeat: one comparison per earlier reply


def test_no_repeat_false_on_first_repeat_and_rubric_penalty_scales():
    judge = Judge200(lambda prompt: "Yes")
    code = SUBMODULE_TEST.replace("assert judge.no_repeat", "assert not judge.no_repeat")
    try:
        outcome = evaluate_test_code(
            code, context_payload(_episode_messages(), {}), judge_config=judge.config
        )
    finally:
        judge.close()
    # the deduction penalty (weight 1 of 2) is triggered: reward 0.5 < 0.7 -> a policy failure, not an error
    assert (
        not outcome.result
        and not outcome.is_system_error
        and "below the threshold" in outcome.message
    )


def test_typed_messages_roundtrip_and_transcript():
    x = TestContext.from_dict(context_payload(_episode_messages(), {}))
    assert [type(m).__name__ for m in x.messages] == [
        "ChatMessage",
        "ChatMessage",
        "ChatMessage",
        "ParallelToolCall",
        "ToolResponse",
        "ChatMessage",
    ]
    assert (
        x.transcript()
        == "User: Where is ORD-1?\n\nAssistant: Let me look.\n\nAssistant: ORD-1 has shipped. <DONE>"
    )
    assert TestContext.from_dict(x.to_dict()).to_dict() == x.to_dict()


@pytest.mark.parametrize(
    "code, cause",
    [
        (
            "from thinkingbox.common.mcp_proxy_client import SessionClientFixture\n__tb_test_fn = lambda x: None\n",
            "ModuleNotFoundError",
        ),
        (
            "def t(x, judge):\n    judge.text_yesno(x.response, 'ok?')\n__tb_test_fn = t\n",
            "no judge endpoint",
        ),
        (
            "def t(x):\n    x.effects['srv']\n__tb_test_fn = t\n",
            None,
        ),  # KeyError: transient (e.g. a server fault)
    ],
)
def test_permanent_vs_transient_test_errors(code, cause):
    outcome = evaluate_test_code(code, context_payload(_episode_messages(), {}))
    assert outcome.is_system_error and outcome.permanent == (cause is not None)
    assert cause is None or cause in outcome.message


class _CountingRunner:
    """Stands in for EpisodeRunner in run_trial: returns a system error, counts the tries."""

    def __init__(self, permanent: bool):
        self.permanent, self.calls = permanent, 0
        self.config = type("C", (), {"max_system_error_retries": 2})()

    async def run(self, task, trial):
        self.calls += 1
        return EpisodeResult(
            uid="u", trial=trial, system_error="grader: boom", system_error_permanent=self.permanent
        )


@pytest.mark.parametrize("permanent, calls", [(True, 1), (False, 3)])
def test_permanent_system_errors_are_not_retried(permanent, calls):
    runner = _CountingRunner(permanent)
    result = asyncio.run(run_trial(runner, None, 0))
    assert runner.calls == calls and result.tries == calls and result.system_error
