"""One rewardbox episode played token-in / token-out: the token stream a trainer scores.

The episode itself is the unchanged ``EpisodeRunner`` (through
``rewardbox.episode.stepwise``): sandbox, tools, user simulator, turn limits,
grading and system-error marking are its own. This module only fills the policy
seat from a token generator (verl's LLM server) and keeps the exact token stream:

    prompt_ids   = the opening prompt, rendered with our chat template
    response_ids = [agent turn 1][tool/user turn][agent turn 2] ...
    response_mask  1 on every token the policy sampled, 0 on tool, user and template tokens
    response_logprobs  the sampler's log-probability of each sampled token, 0.0 elsewhere

Each agent turn is the generator's tokens verbatim (never re-tokenised), decoded and
read by ``rewardbox.policy.interpreter.interpret``, the same parser evaluation uses.
The tokens between two agent turns are the chat template's rendering of what the
runner appended (the closing of the sampled turn, tool results, a user reply, the
next generation prompt), so the next generation continues exactly the stream the
trainer will score. When the response budget or the engine's context (verl's
``rollout.max_model_len``) runs out, the episode ends as ``context_limit`` and is graded
on the state it reached (a policy limit); no request is sent that has no room.

**Truncated turns.** A sampled turn is ``"stop"`` only when it ends with an end-of-turn
token (``<|im_end|>`` or the tokenizer's EOS); any other turn was cut (by the turn's
``max_tokens``, the response budget or the engine's context limit) and is ``"length"``,
whatever the engine's stop reason says: verl's vLLM server reports both of vLLM's
``stop`` and ``length`` as ``"completed"`` (``vllm_async_server.py``). A ``"length"`` turn
runs no tool call, complete-looking or not (``interpret``), and is counted in
``truncated_turns``. The engine's own reason is kept as ``raw_finish_reason``.

**Log-probs.** A turn whose log-probs do not match its tokens one for one, or a server that
returns more tokens than asked, raises (``LogprobLengthError`` naming uid, trial, turn and
both lengths); nothing is cut to fit.

A system error (sandbox crash, grader fault) is retried with a fresh episode up to
``max_system_error_retries`` times; after that the trajectory carries
``system_error`` and no reward (never 0). Nothing here imports verl.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from rewardbox.episode.stepwise import AwaitingAction, Finished, Pause, StepwiseEpisode
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import retry_system_errors
from rewardbox.errors import LogprobLengthError
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.chat_template import END_OF_TURN, prompt_opens_reasoning, render_prompt
from rewardbox.policy.interpreter import interpret


@dataclass(frozen=True)
class Sampled:
    """What the generator returned for one agent turn.

    Attributes:
        token_ids: the sampled tokens, end-of-turn token included when the model stopped.
        logprobs: natural-log probability of each sampled token under the sampler, or None.
        stop_reason: the engine's own reason (verl: ``"completed"``, ``"aborted"``), or None.
    """

    token_ids: list[int]
    logprobs: list[float] | None
    stop_reason: str | None = None


Generate = Callable[[list[int], int], Awaitable[Sampled]]
"""``generate(context_ids, max_new_tokens)``: sample one agent turn continuing ``context_ids``."""


class Tokenizer(Protocol):
    """The slice of a Hugging Face tokenizer used here."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def convert_tokens_to_ids(self, token: str) -> int: ...


@dataclass
class TokenTrajectory:
    """One episode as token ids, masks and the reward.

    Attributes:
        prompt_ids: the opening prompt, shape ``[P]``.
        response_ids, response_mask, response_logprobs: shape ``[R]`` each, ``R <= max_response_tokens``;
            ``response_logprobs`` is None when the generator returned none for some turn.
        result: the runner's ``EpisodeResult`` (messages, finish reason, reward, system error).
        tries: episodes played (1 + system-error retries).
        agent_turns: turns sampled so far (the next turn's 0-based index).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)
    result: EpisodeResult | None = None
    tries: int = 1
    generate_s: float = 0.0
    agent_turns: int = 0

    @property
    def reward(self) -> float | None:
        """The grader's reward; None exactly when the episode ended in a system error."""
        return None if self.result is None or self.result.system_error else self.result.reward

    @property
    def system_error(self) -> str | None:
        return None if self.result is None else self.result.system_error

    def extend(self, token_ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        """Append tokens with one mask value; ``logprobs`` (sampled tokens) or 0.0 each.

        Raises:
            ValueError: ``logprobs`` and ``token_ids`` differ in length (the server broke its contract).
        """
        if mask and logprobs is not None and len(logprobs) != len(token_ids):
            raise ValueError(
                f"the server returned {len(logprobs)} log-probs for {len(token_ids)} tokens"
            )
        self.response_ids.extend(token_ids)
        self.response_mask.extend([mask] * len(token_ids))
        if self.response_logprobs is not None:
            if mask and logprobs is None:
                self.response_logprobs = None
            else:
                self.response_logprobs.extend(logprobs if mask else [0.0] * len(token_ids))


class TurnTokens:
    """Our chat template as token pieces: the opening prompt and the tokens between agent turns.

    Args:
        tokenizer: the policy's tokenizer (the one whose ids the generator samples).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        stops = {tokenizer.convert_tokens_to_ids(END_OF_TURN), tokenizer.eos_token_id}
        self.end_of_turn_ids = {t for t in stops if isinstance(t, int) and t >= 0}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def opening(self, request: ChatRequest) -> tuple[str, list[int]]:
        """(text, ids) of the first prompt: system turn with the tools, the query, the generation prompt."""
        text = render_prompt(request.messages, request.tools)
        return text, self.encode(text)

    def between(
        self, before: ChatRequest, after: ChatRequest, sampled: list[int]
    ) -> tuple[str, list[int]]:
        """(text, ids) that follow the sampled turn: its closing, then what the runner appended.

        Args:
            before: the request the sampled turn answered.
            after: the next request; its messages are ``before``'s, the assistant message, then the
                tool results or the user's reply.
            sampled: the turn's token ids (closed by an end-of-turn token, or cut by the budget).

        Raises:
            ValueError: ``after`` does not extend ``before`` with an assistant message (a runner bug).
        """
        cut = len(before.messages)
        if (
            after.messages[:cut] != before.messages
            or after.messages[cut].get("role") != "assistant"
        ):
            raise ValueError(
                "the next request does not extend the previous one by an assistant turn"
            )
        prefix = render_prompt(after.messages[: cut + 1], after.tools, add_generation_prompt=False)
        full = render_prompt(after.messages, after.tools)
        if not full.startswith(prefix):
            raise ValueError(
                "the chat template does not render the history as a prefix of the next prompt"
            )
        closing = "\n" if sampled and sampled[-1] in self.end_of_turn_ids else END_OF_TURN + "\n"
        text = closing + full[len(prefix) :]
        return text, self.encode(text)

    def completion(
        self, sampled: Sampled, request: ChatRequest, prompt_text: str, budget: int
    ) -> Completion:
        """The sampled turn as a ``Completion``, read by the one interpreter."""
        ids = sampled.token_ids
        finish = (
            "stop" if ids and ids[-1] in self.end_of_turn_ids else "length"
        )  # see "Truncated turns"
        raw = self.tokenizer.decode(ids, skip_special_tokens=True)
        reading = interpret(
            raw,
            request.tools,
            finish_reason=finish,
            reasoning_open=prompt_opens_reasoning(prompt_text),
        )
        return Completion(
            raw_text=raw,
            interpretation=reading,
            finish_reason=finish,
            raw_finish_reason=sampled.stop_reason,
            output_tokens=len(ids),
            completion_token_ids=list(ids),
            completion_logprobs=sampled.logprobs,
        )


class PromptTooLongError(ValueError):
    """The opening prompt (system prompt, tools, query) exceeds the trainer's prompt length: a config error.

    Never truncated: a cut prompt would train on a conversation the model never saw.
    """


async def play_episode(
    episode: StepwiseEpisode,
    generate: Generate,
    turns: TurnTokens,
    max_response_tokens: int,
    max_prompt_tokens: int | None = None,
    max_context_tokens: int | None = None,
) -> TokenTrajectory:
    """Play ``episode`` to its end with ``generate`` as the policy; always closes the episode.

    Args:
        episode: a fresh (not started) step-wise episode.
        generate: samples one agent turn (verl: the LLM server manager).
        turns: the tokenizer's template pieces.
        max_response_tokens: the trainer's response length (verl ``rollout.response_length``).
        max_prompt_tokens: the trainer's prompt length (verl ``rollout.prompt_length``), or None.
        max_context_tokens: the engine's context, prompt and response together (verl
            ``rollout.max_model_len``), or None when unbounded here. Each turn's ``max_tokens`` is
            capped to the room left; with none left the episode ends as ``context_limit``.

    Returns:
        The token trajectory; ``result.system_error`` set when the runner hit a system error.

    Raises:
        PromptTooLongError: the opening prompt does not fit ``max_prompt_tokens`` (raise verl's
            ``data.max_prompt_length``); nothing was sampled.
        LogprobLengthError: the generator broke its contract (see the module docstring).
        Whatever ``generate`` raises (the generation server failed: the caller's infrastructure fault).
    """
    try:
        pause = await episode.start()
        if isinstance(
            pause, Finished
        ):  # the sandbox did not start: a system error, nothing sampled
            return TokenTrajectory(prompt_ids=[], response_logprobs=None, result=pause.result)
        prompt_text, prompt_ids = turns.opening(pause.request)
        if max_prompt_tokens is not None and len(prompt_ids) > max_prompt_tokens:
            raise PromptTooLongError(
                f"the opening prompt of {episode.task.uid} is {len(prompt_ids)} tokens, more "
                f"than the prompt length {max_prompt_tokens}; raise data.max_prompt_length"
            )
        trajectory = TokenTrajectory(prompt_ids=prompt_ids)
        while isinstance(pause, AwaitingAction):
            pause, prompt_text = await _one_turn(
                episode,
                pause,
                prompt_text,
                generate,
                turns,
                trajectory,
                (max_response_tokens, max_context_tokens),
            )
        trajectory.result = pause.result
        return trajectory
    finally:
        await episode.close()


def _turn_budget(
    request_tokens: int, trajectory: TokenTrajectory, limits: tuple[int, int | None]
) -> tuple[int, str]:
    """(tokens this turn may sample, why it may sample none): the request's, the response's and the context's room."""
    max_response_tokens, max_context_tokens = limits
    room = max_response_tokens - len(trajectory.response_ids)
    if room <= 0:
        return 0, f"response budget of {max_response_tokens} tokens used up"
    if max_context_tokens is not None:
        context_room = (
            max_context_tokens - len(trajectory.prompt_ids) - len(trajectory.response_ids)
        )
        if context_room <= 0:
            return 0, f"engine context of {max_context_tokens} tokens (rollout.max_model_len) full"
        room = min(room, context_room)
    return min(request_tokens, room), ""


def check_sampled(sampled: Sampled, budget: int, uid: str, trial: int, turn: int) -> None:
    """Raise unless ``sampled`` is one turn the trainer can score as it is.

    Raises:
        LogprobLengthError: log-probs and tokens differ in length, or more tokens than ``budget``
            came back (naming uid, trial, turn and both lengths); nothing is cut to fit.
    """
    tokens = len(sampled.token_ids)
    if sampled.logprobs is not None and len(sampled.logprobs) != tokens:
        raise LogprobLengthError(
            uid, trial, turn, tokens, len(sampled.logprobs), "the generator's reply"
        )
    if tokens > budget:
        raise LogprobLengthError(
            uid,
            trial,
            turn,
            tokens,
            tokens if sampled.logprobs is None else len(sampled.logprobs),
            f"the generator returned more tokens than the turn's max_tokens {budget}",
        )


async def _one_turn(
    episode: StepwiseEpisode,
    pause: AwaitingAction,
    prompt_text: str,
    generate: Generate,
    turns: TurnTokens,
    trajectory: TokenTrajectory,
    limits: tuple[int, int | None],
) -> tuple[Pause, str]:
    """Sample one agent turn, hand it to the runner, append the tokens up to the next generation prompt."""
    budget, why_none = _turn_budget(pause.request.max_new_tokens, trajectory, limits)
    if budget <= 0:
        return await episode.out_of_context(why_none), prompt_text
    t0 = time.perf_counter()
    sampled = await generate(trajectory.prompt_ids + trajectory.response_ids, budget)
    trajectory.generate_s += time.perf_counter() - t0
    check_sampled(sampled, budget, episode.task.uid, episode.trial, trajectory.agent_turns)
    trajectory.agent_turns += 1
    trajectory.extend(sampled.token_ids, 1, sampled.logprobs)
    after = await episode.act(turns.completion(sampled, pause.request, prompt_text, budget))
    if not isinstance(after, AwaitingAction):
        return after, prompt_text
    text, ids = turns.between(pause.request, after.request, sampled.token_ids)
    room = limits[0] - len(trajectory.response_ids)
    trajectory.extend(ids[:room], 0)
    if len(ids) > room:
        return await episode.out_of_context(
            f"tool/user turn does not fit the {limits[0]}-token response budget"
        ), text
    return after, text


async def play_with_retries(
    new_episode: Callable[[], StepwiseEpisode],
    generate: Generate,
    turns: TurnTokens,
    max_response_tokens: int,
    max_system_error_retries: int,
    max_prompt_tokens: int | None = None,
    max_context_tokens: int | None = None,
) -> TokenTrajectory:
    """:func:`play_episode`, played again from scratch after a transient system error by
    ``rewardbox.episode.trial.retry_system_errors``, ``run_trial``'s rule (tries and retried kinds recorded).

    Returns:
        The first scored trajectory, or the last one with ``system_error`` set (reward None).
    """
    trajectory, trajectory.tries = await retry_system_errors(
        lambda: play_episode(
            new_episode(),
            generate,
            turns,
            max_response_tokens,
            max_prompt_tokens,
            max_context_tokens,
        ),
        max_system_error_retries,
        lambda played: played.result,
    )
    return trajectory
