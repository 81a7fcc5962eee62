"""The verl agent loop's episode on the real parts: the test profile's sandbox, scripted user and grader.

The policy seat is a token server that writes the golden (or null) policy's text for the request the
runner is waiting on; the tokenizer is the character fake of the other verl tests.
"""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.stepwise import StepwiseEpisode
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.runtime.verl_services import load_served_tasks
from rewardbox.runtime.verl_services import verl_loop_services as services_from_profile
from rewardbox.training.verl.tokens import Sampled, TurnTokens, play_with_retries
from tests.fixtures.verl_fakes import CharTokenizer

TOKENIZER = CharTokenizer()


@pytest.fixture(scope="module")
def services():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REWARDBOX_PROFILE", "test")
        built = services_from_profile()
    yield built
    built.grader.close()


def _play(services, task, policy):
    episodes: list[StepwiseEpisode] = []
    config = services.config.model_copy(
        update={"max_new_tokens": 1024}
    )  # one token per character here

    def new_episode():
        episodes.append(
            StepwiseEpisode(
                task,
                0,
                sandbox_factory=services.sandbox_factory,
                user_simulator=services.user_simulator,
                grader=services.grader,
                config=config,
            )
        )
        return episodes[-1]

    async def generate(context_ids, max_new_tokens):
        text = (await policy.complete(episodes[-1].pause.request)).raw_text
        ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_id]
        return Sampled(ids[:max_new_tokens], [-1.0] * len(ids[:max_new_tokens]))

    return asyncio.run(
        play_with_retries(
            new_episode,
            generate,
            TurnTokens(TOKENIZER),
            8192,
            services.config.max_system_error_retries,
        )
    )


def _policy_runs(mask):
    return sum(1 for i, m in enumerate(mask) if m == 1 and (i == 0 or mask[i - 1] == 0))


def test_golden_text_on_a_real_hotel_task_scores_1_and_doing_nothing_scores_0(services):
    tasks = load_served_tasks(load_profile("test"), ["hotel"])
    task = next(
        t for t in tasks if len(t.golden_interactions()) >= 2 and not t.metadata.get("null_passes")
    )
    golden = _play(services, task, GoldenReplayPolicy())
    assert (golden.reward, golden.system_error, golden.result.termination_reason) == (
        1.0,
        None,
        "done",
    )
    assert (
        _policy_runs(golden.response_mask) == len(task.golden_interactions()) + 1
    )  # one call per turn, answer
    assert golden.result.tool_calls[0]["tool_call"]["name"] == task.golden_interactions()[0][1]
    null = _play(services, task, NullPolicy())
    assert (null.reward, null.system_error) == (
        0.0,
        None,
    )  # a policy failure is scored 0; never a system error
