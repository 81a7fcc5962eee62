"""The token-in/token-out episode for verl: masks, log-probs, reward, budget, system errors (no verl needed)."""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.episode.stepwise import StepwiseEpisode
from rewardbox.errors import LogprobLengthError
from rewardbox.training.verl.agent_loop import output_fields
from rewardbox.training.verl.tokens import (
    PromptTooLongError,
    Sampled,
    TurnTokens,
    play_episode,
    play_with_retries,
)
from tests.fixtures.verl_fakes import (
    GOLDEN_TURNS,
    SANDBOXES,
    CharTokenizer,
    OrderSandbox,
    ScriptedServer,
    ScriptedUser,
    StatusGrader,
    episode_config,
    order_task,
)

TOKENIZER = CharTokenizer()


def _episode(crash: bool = False, user: bool = False, **limits) -> StepwiseEpisode:
    task = order_task(user_context="Wants ORD-1 cancelled." if user else "")
    return StepwiseEpisode(
        task,
        0,
        sandbox_factory=lambda: OrderSandbox(crash),
        user_simulator=ScriptedUser() if user else None,
        grader=StatusGrader(),
        config=episode_config(**limits),
    )


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
    between = TOKENIZER.decode(traj.response_ids[runs[1][1] : runs[1][2]])
    assert (
        between.startswith("\n<|im_start|>user\n<result>\n") and '"status": "cancelled"' in between
    )
    assert between.endswith("<|im_start|>assistant\n") and set(
        traj.response_logprobs[runs[1][1] : runs[1][2]]
    ) == {0.0}
    # each generation continued exactly the stream the trainer scores
    assert server.calls[1][0] == traj.prompt_ids + traj.response_ids[: runs[1][2]]
    prompt = TOKENIZER.decode(traj.prompt_ids)
    assert "cancel_order(order_id: string)" in prompt and prompt.endswith(
        "Please cancel ORD-1.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_turn_cut_by_the_budget_is_closed_by_template_tokens_and_the_user_reply_is_masked():
    server = ScriptedServer(TOKENIZER, turns=("Shall I cancel it?", "Done <DONE>"))
    traj = asyncio.run(
        play_episode(
            _episode(user=True, max_new_tokens=13), _generate(server), TurnTokens(TOKENIZER), 4096
        )
    )
    first_turn = traj.result.agent_turns[0]
    assert first_turn.finish_reason == "length" and first_turn.raw_text == "Shall I cance"
    runs = _runs(traj.response_mask)
    assert [r[0] for r in runs] == [1, 0, 1] and runs[0][2] == 13
    user_turn = TOKENIZER.decode(traj.response_ids[runs[1][1] : runs[1][2]])
    assert (
        user_turn
        == "<|im_end|>\n<|im_start|>user\nYes, go ahead.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_the_response_budget_ends_the_episode_as_context_limit_and_it_is_still_graded():
    server = ScriptedServer(TOKENIZER)
    traj = asyncio.run(play_episode(_episode(), _generate(server), TurnTokens(TOKENIZER), 120))
    assert len(traj.response_ids) == len(traj.response_mask) == len(traj.response_logprobs) == 120
    assert (
        traj.result.termination_reason == "context_limit" and traj.reward == 1.0
    )  # the cancel call ran
    assert len(server.calls) == 1


def test_a_sandbox_crash_is_replayed_then_reported_as_a_system_error_never_a_reward():
    SANDBOXES.clear()
    server = ScriptedServer(TOKENIZER)
    traj = asyncio.run(
        play_with_retries(
            lambda: _episode(crash=True),
            _generate(server),
            TurnTokens(TOKENIZER),
            4096,
            max_system_error_retries=2,
        )
    )
    assert traj.system_error and traj.result.system_error_kind == "sandbox_crash"
    assert (
        traj.reward is None and traj.tries == 3 and len(SANDBOXES) == 3 and len(server.calls) == 3
    )
    # the one retry rule (rewardbox.episode.trial.retry_system_errors) records what run_trial records
    assert (
        traj.result.tries == 3 and traj.result.retried_system_error_kinds == ["sandbox_crash"] * 2
    )
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
        asyncio.run(
            play_episode(
                _episode(), _generate(server), TurnTokens(TOKENIZER), 4096, max_prompt_tokens=50
            )
        )
    assert server.calls == [] and SANDBOXES[0].closed


def test_a_server_that_returns_too_few_logprobs_is_an_error_not_a_silent_shift():
    server = ScriptedServer(TOKENIZER)

    async def generate(context_ids, max_new_tokens):
        ids, logprobs = server.sample(context_ids, max_new_tokens)
        return Sampled(ids, logprobs[:-1])

    with pytest.raises(
        LogprobLengthError, match=r"orders:test_cancel trial 0 turn 0: \d+ log-probs for \d+ tokens"
    ):
        asyncio.run(play_episode(_episode(), generate, TurnTokens(TOKENIZER), 4096))


def _engine(server: ScriptedServer, context_room: int, seen: list[int] | None = None):
    """verl's vLLM server with ``max_model_len = P + context_room`` (P: the opening prompt's tokens).

    As ``vllm_async_server.generate``: ``max_tokens`` clamped to the context room, vLLM's ``stop`` and
    ``length`` both reported as ``"completed"``, a request without room refused.
    """
    limit: list[int] = []

    async def generate(context_ids, max_new_tokens):
        limit.append(limit[0] if limit else len(context_ids) + context_room)
        room = limit[0] - len(context_ids)
        if room < 1:
            raise ValueError(f"Prompt length ({len(context_ids)}) leaves no room to generate")
        if seen is not None:
            seen.append(max_new_tokens)
        ids, logprobs = server.sample(context_ids, min(max_new_tokens, room))
        return Sampled(ids, logprobs, "completed")

    return generate


@pytest.mark.parametrize("cut", [7, 6, 5])
def test_issue24_item1_a_turn_cut_by_the_engine_context_is_length_and_counted(cut):
    # the given values: max_model_len = P + cut, response_length 8; the engine stops at its context
    server = ScriptedServer(TOKENIZER, turns=("Let me look at ORD-1 first.", "Done <DONE>"))
    traj = asyncio.run(
        play_episode(_episode(user=True), _engine(server, cut), TurnTokens(TOKENIZER), 8)
    )
    turn = traj.result.agent_turns[0]
    assert (turn.finish_reason, turn.raw_finish_reason, turn.output_tokens) == (
        "length",
        "completed",
        cut,
    )
    assert traj.result.to_row()["truncated_turns"] == 1
    fields = output_fields(traj, trial=0)["extra_fields"]
    assert (
        fields["reward_extra_info"]["truncated"] == 1.0
        and fields["reward_extra_info"]["truncated_turns"] == 1.0
    )
    assert (fields["rewardbox_truncated_turns"], fields["rewardbox_agent_turns"]) == (1, 1)
    assert traj.result.termination_reason == "context_limit" and len(server.calls) == 1


@pytest.mark.parametrize("known", [False, True])
def test_issue24_item1_a_call_cut_by_the_context_is_never_recovered_and_run(known):
    # a complete-looking call whose closing tag the context cut off: "stop" would recover and run it
    call = GOLDEN_TURNS[0].removesuffix("</tool_call>")
    server = ScriptedServer(TOKENIZER, turns=(GOLDEN_TURNS[0], GOLDEN_TURNS[1]))
    SANDBOXES.clear()
    context = None
    if known:  # our loop knows max_model_len: the turn's max_tokens is capped to the room, nothing more is sent
        probe = asyncio.run(
            play_episode(
                _episode(), _generate(ScriptedServer(TOKENIZER)), TurnTokens(TOKENIZER), 4096
            )
        )
        context = len(probe.prompt_ids) + len(call)
    seen: list[int] = []
    traj = asyncio.run(
        play_episode(
            _episode(),
            _engine(server, len(call), seen),
            TurnTokens(TOKENIZER),
            4096,
            max_context_tokens=context,
        )
    )
    turn = traj.result.agent_turns[0]
    assert turn.finish_reason == "length" and TOKENIZER.decode(turn.completion_token_ids) == call
    assert "truncated_call" in turn.events and traj.result.tool_calls == []
    assert SANDBOXES[-1].status == "processing" and traj.reward == 0.0
    assert seen[0] == (len(call) if known else 200) and len(server.calls) == 1


def test_issue24_item1_no_request_is_sent_without_context_room():
    server = ScriptedServer(TOKENIZER, turns=("Checking.", "Still checking.", "Done <DONE>"))
    probe = asyncio.run(
        play_episode(_episode(), _generate(ScriptedServer(TOKENIZER)), TurnTokens(TOKENIZER), 4096)
    )
    context = (
        len(probe.prompt_ids) + len("Checking.") + 1
    )  # room for the first turn and its end-of-turn token
    seen: list[int] = []
    traj = asyncio.run(
        play_episode(
            _episode(user=True),
            _engine(server, 10_000, seen),
            TurnTokens(TOKENIZER),
            4096,
            max_context_tokens=context,
        )
    )
    assert [t.finish_reason for t in traj.result.agent_turns] == [
        "stop"
    ]  # it ended on its own end-of-turn
    assert seen == [len("Checking.") + 1] and traj.result.termination_reason == "context_limit"
    assert traj.reward == 0.0 and traj.system_error is None  # graded on the state it reached


@pytest.mark.parametrize("extra", [1, -1])
def test_issue24_item5_a_turn_at_its_budget_with_a_logprob_too_many_or_few_raises_naming_the_turn(
    extra,
):
    server = ScriptedServer(TOKENIZER, turns=("Shall I cancel it?", "Done <DONE>"))

    async def generate(context_ids, max_new_tokens):
        ids, logprobs = server.sample(context_ids, max_new_tokens)
        return Sampled(ids, logprobs + [-0.1] * extra if extra > 0 else logprobs[:extra])

    episode = StepwiseEpisode(
        order_task("orders:test_budget"),
        3,
        sandbox_factory=lambda: OrderSandbox(),
        user_simulator=ScriptedUser(),
        grader=StatusGrader(),
        config=episode_config(max_new_tokens=13),
    )
    with pytest.raises(LogprobLengthError) as info:
        asyncio.run(play_episode(episode, generate, TurnTokens(TOKENIZER), 4096))
    err = info.value
    assert (err.uid, err.trial, err.turn, err.tokens, err.logprobs) == (
        "orders:test_budget",
        3,
        0,
        13,
        13 + extra,
    )
    assert str(err).startswith(
        f"orders:test_budget trial 3 turn 0: {13 + extra} log-probs for 13 tokens"
    )


def test_issue24_item5_more_tokens_than_asked_raise_never_cut():
    server = ScriptedServer(TOKENIZER)

    async def generate(context_ids, max_new_tokens):
        ids, logprobs = server.sample(context_ids, 10_000)
        return Sampled(ids, logprobs)

    with pytest.raises(LogprobLengthError, match="more tokens than the turn's max_tokens 13"):
        asyncio.run(
            play_episode(_episode(max_new_tokens=13), generate, TurnTokens(TOKENIZER), 4096)
        )


def test_issue24_item1_verls_stop_reason_is_kept_and_an_aborted_request_raises():
    from types import SimpleNamespace

    from rewardbox.errors import EndpointError
    from rewardbox.training.verl.agent_loop import server_generate

    class Manager:
        def __init__(self, reason):
            self.reason, self.params = reason, []

        async def generate(self, request_id, prompt_ids, sampling_params):
            self.params.append(sampling_params)
            return SimpleNamespace(
                token_ids=[5, 6], log_probs=[-0.1, -0.2], stop_reason=self.reason
            )

    done = Manager("completed")
    sampled = asyncio.run(server_generate(done, "r1", {"temperature": 1.0})([1, 2, 3], 7))
    assert (sampled.token_ids, sampled.stop_reason) == ([5, 6], "completed") and done.params[0][
        "max_tokens"
    ] == 7
    with pytest.raises(EndpointError, match="aborted request r2") as info:
        asyncio.run(server_generate(Manager("aborted"), "r2", {})([1], 4))
    assert info.value.error_kind == "endpoint_aborted"
