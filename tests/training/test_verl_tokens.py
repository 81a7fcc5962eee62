"""The token-in/token-out episode for verl: masks, log-probs, reward, budget, system errors (no verl needed)."""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.episode.stepwise import StepwiseEpisode
from rewardbox.training.verl_tokens import PromptTooLongError, Sampled, TurnTokens, play_episode, play_with_retries
from tests.fixtures.verl_fakes import (GOLDEN_TURNS, SANDBOXES, CharTokenizer, OrderSandbox, ScriptedServer,
                                       ScriptedUser, StatusGrader, episode_config, order_task)

TOKENIZER = CharTokenizer()


def _episode(crash: bool = False, user: bool = False, **limits) -> StepwiseEpisode:
    task = order_task(user_context="Wants ORD-1 cancelled." if user else "")
    return StepwiseEpisode(task, 0, sandbox_factory=lambda: OrderSandbox(crash),
                           user_simulator=ScriptedUser() if user else None, grader=StatusGrader(),
                           config=episode_config(**limits))


def _generate(server: ScriptedServer):
    async def generate(context_ids, max_new_tokens):
        return Sampled(*server.sample(context_ids, max_new_tokens))
    return generate


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(mask value, start, end) of each run of equal values."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def test_a_golden_episode_scores_1_and_masks_exactly_the_sampled_tokens():
    server = ScriptedServer(TOKENIZER)
    traj = asyncio.run(play_episode(_episode(), _generate(server), TurnTokens(TOKENIZER), 4096))
    assert (traj.reward, traj.system_error, traj.result.termination_reason) == (1.0, None, "done")
    runs = _runs(traj.response_mask)
    assert [r[0] for r in runs] == [1, 0, 1]  # agent turn, tool result, agent turn
    for (_, start, end), text in zip([runs[0], runs[2]], GOLDEN_TURNS):
        assert TOKENIZER.decode(traj.response_ids[start:end]) == text + "<|im_end|>"
        assert traj.response_logprobs[start:end] == [-0.5] * (end - start)
    between = TOKENIZER.decode(traj.response_ids[runs[1][1]:runs[1][2]])
    assert between.startswith("\n<|im_start|>user\n<result>\n") and '"status": "cancelled"' in between
    assert between.endswith("<|im_start|>assistant\n") and set(traj.response_logprobs[runs[1][1]:runs[1][2]]) == {0.0}
    # each generation continued exactly the stream the trainer scores
    assert server.calls[1][0] == traj.prompt_ids + traj.response_ids[:runs[1][2]]
    prompt = TOKENIZER.decode(traj.prompt_ids)
    assert "cancel_order(order_id: string)" in prompt and prompt.endswith("Please cancel ORD-1.<|im_end|>\n"
                                                                             "<|im_start|>assistant\n")


def test_a_turn_cut_by_the_budget_is_closed_by_template_tokens_and_the_user_reply_is_masked():
    server = ScriptedServer(TOKENIZER, turns=("Shall I cancel it?", "Done <DONE>"))
    traj = asyncio.run(play_episode(_episode(user=True, max_new_tokens=13), _generate(server),
                                    TurnTokens(TOKENIZER), 4096))
    first_turn = traj.result.agent_turns[0]
    assert first_turn.finish_reason == "length" and first_turn.raw_text == "Shall I cance"
    runs = _runs(traj.response_mask)
    assert [r[0] for r in runs] == [1, 0, 1] and runs[0][2] == 13
    user_turn = TOKENIZER.decode(traj.response_ids[runs[1][1]:runs[1][2]])
    assert user_turn == "<|im_end|>\n<|im_start|>user\nYes, go ahead.<|im_end|>\n<|im_start|>assistant\n"


def test_the_response_budget_ends_the_episode_as_context_limit_and_it_is_still_graded():
    server = ScriptedServer(TOKENIZER)
    traj = asyncio.run(play_episode(_episode(), _generate(server), TurnTokens(TOKENIZER), 120))
    assert len(traj.response_ids) == len(traj.response_mask) == len(traj.response_logprobs) == 120
    assert traj.result.termination_reason == "context_limit" and traj.reward == 1.0  # the cancel call ran
    assert len(server.calls) == 1


def test_a_sandbox_crash_is_replayed_then_reported_as_a_system_error_never_a_reward():
    SANDBOXES.clear()
    server = ScriptedServer(TOKENIZER)
    traj = asyncio.run(play_with_retries(lambda: _episode(crash=True), _generate(server), TurnTokens(TOKENIZER),
                                         4096, max_system_error_retries=2))
    assert traj.system_error and traj.result.system_error_kind == "sandbox_crash"
    assert traj.reward is None and traj.tries == 3 and len(SANDBOXES) == 3 and len(server.calls) == 3
    assert all(s.closed for s in SANDBOXES)


def test_a_generation_server_fault_propagates_and_the_sandbox_is_torn_down():
    SANDBOXES.clear()
    server = ScriptedServer(TOKENIZER, fail=ConnectionError("vLLM server gone"))
    with pytest.raises(ConnectionError, match="gone"):
        asyncio.run(play_episode(_episode(), _generate(server), TurnTokens(TOKENIZER), 4096))
    assert len(SANDBOXES) == 1 and SANDBOXES[0].closed


def test_missing_logprobs_drop_the_logprob_list_rather_than_invent_values():
    server = ScriptedServer(TOKENIZER)

    async def generate(context_ids, max_new_tokens):
        ids, _ = server.sample(context_ids, max_new_tokens)
        return Sampled(ids, None)

    traj = asyncio.run(play_episode(_episode(), generate, TurnTokens(TOKENIZER), 4096))
    assert traj.response_logprobs is None and traj.reward == 1.0


def test_a_prompt_longer_than_the_trainer_allows_is_refused_never_cut_and_the_sandbox_closed():
    SANDBOXES.clear()
    server = ScriptedServer(TOKENIZER)
    with pytest.raises(PromptTooLongError, match="raise data.max_prompt_length"):
        asyncio.run(play_episode(_episode(), _generate(server), TurnTokens(TOKENIZER), 4096, max_prompt_tokens=50))
    assert server.calls == [] and SANDBOXES[0].closed


def test_a_server_that_returns_too_few_logprobs_is_an_error_not_a_silent_shift():
    server = ScriptedServer(TOKENIZER)

    async def generate(context_ids, max_new_tokens):
        ids, logprobs = server.sample(context_ids, max_new_tokens)
        return Sampled(ids, logprobs[:-1])

    with pytest.raises(ValueError, match="log-probs for"):
        asyncio.run(play_episode(_episode(), generate, TurnTokens(TOKENIZER), 4096))
