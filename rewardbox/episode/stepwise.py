"""One episode driven from outside, one agent completion at a time.

``EpisodeRunner.run`` owns the agent-tools-user loop; here the policy is a
channel: each time the runner asks the policy for a completion, the episode
pauses and hands the ``ChatRequest`` to the caller; ``act`` answers it with a
``Completion`` built from the caller's action. Everything between two agent
turns (tool dispatch, the scripted user simulator, turn limits, grading,
system-error marking, sandbox teardown) is the runner's own code, unchanged.

    start() -> AwaitingAction | Finished
    act(completion) -> AwaitingAction | Finished      (repeat until Finished)
    out_of_context(reason) -> Finished                (the caller's context is full: graded as it stands)
    close()                                           (any time; tears down)

Used by the environment server (``rewardbox.envserver``) so that an external
training loop plays exactly the episodes that evaluation plays.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import EpisodeRunner, Grader
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.user_simulator import UserSimulator
from rewardbox.errors import ContextLengthError
from rewardbox.policy.base import ChatRequest, Completion, Interpretation, ToolCall, ToolCallError
from rewardbox.policy.interpreter import interpret, type_tool_call
from rewardbox.sandbox.base import SandboxFactory
from rewardbox.tasks.schema import Task


@dataclass(frozen=True)
class AwaitingAction:
    """The runner asked the policy for its next completion; ``request`` is what it would see."""

    request: ChatRequest


@dataclass(frozen=True)
class Finished:
    """The episode ended; ``result.reward`` is None exactly when ``result.system_error`` is set."""

    result: EpisodeResult


Pause = AwaitingAction | Finished


class EpisodeClosedError(RuntimeError):
    """``act`` was called on an episode that has finished or been closed (caller error)."""


class _ChannelPolicy:
    """The policy seat of an ``EpisodeRunner``, filled by whoever calls ``StepwiseEpisode.act``."""

    name = "external"

    def __init__(self) -> None:
        self.requests: asyncio.Queue[ChatRequest] = asyncio.Queue(maxsize=1)
        self.completions: asyncio.Queue[Completion | ContextLengthError] = asyncio.Queue(maxsize=1)

    async def complete(self, request: ChatRequest) -> Completion:
        await self.requests.put(request)
        answer = await self.completions.get()
        if isinstance(answer, ContextLengthError):
            raise answer
        return answer

    async def aclose(self) -> None:
        return None


class StepwiseEpisode:
    """One (task, trial) episode whose agent turns come from ``act``.

    Args:
        task: the task to play.
        trial: trial index (seeds and test context, as in ``EpisodeRunner.run``).
        sandbox_factory: makes this episode's fresh sandbox (one per episode).
        user_simulator: answers the agent's replies, or None (``no_user_llm``).
        grader: the task's test runner (``rewardbox.grading.testrunner.TestRunner``).
        config: episode limits.

    Not thread-safe: call ``start``/``act``/``close`` from one event loop.
    """

    def __init__(
        self,
        task: Task,
        trial: int = 0,
        *,
        sandbox_factory: SandboxFactory,
        user_simulator: UserSimulator | None,
        grader: Grader,
        config: EpisodeConfig | None = None,
    ) -> None:
        self.task = task
        self.trial = trial
        self._channel = _ChannelPolicy()
        self._runner = EpisodeRunner(self._channel, sandbox_factory, user_simulator, grader, config)
        self._run: asyncio.Task[EpisodeResult] | None = None
        self._pause: Pause | None = None

    @property
    def pause(self) -> Pause | None:
        """The latest pause (None before ``start``)."""
        return self._pause

    async def start(self) -> Pause:
        """Provision the sandbox, open the conversation and run until the first agent turn.

        Returns:
            ``AwaitingAction`` with the first request (system prompts, query,
            tools), or ``Finished`` when the episode could not start (a system
            error: sandbox start failed).

        Raises:
            EpisodeClosedError: ``start`` was already called.
        """
        if self._run is not None:
            raise EpisodeClosedError(
                "this episode was already started; build a new StepwiseEpisode"
            )
        self._run = asyncio.create_task(self._runner.run(self.task, self.trial))
        return await self._next_pause()

    async def act(self, completion: Completion) -> Pause:
        """Give the runner the agent's completion and run until the next agent turn or the end.

        Raises:
            EpisodeClosedError: the episode is not waiting for an action
                (not started, finished or closed): a caller error, not a system error.
        """
        self._check_waiting()
        self._channel.completions.put_nowait(completion)
        return await self._next_pause()

    async def out_of_context(self, reason: str) -> Pause:
        """End the episode because the caller's context is full, instead of giving a completion.

        The runner treats it as a policy that raised ``ContextLengthError``: the episode
        ends with ``termination_reason == "context_limit"`` and is graded on the state it reached
        (a policy limit, never a system error).

        Raises:
            EpisodeClosedError: the episode is not waiting for an action.
        """
        self._check_waiting()
        self._channel.completions.put_nowait(ContextLengthError(reason))
        return await self._next_pause()

    def _check_waiting(self) -> None:
        if not isinstance(self._pause, AwaitingAction) or self._run is None or self._run.done():
            raise EpisodeClosedError(
                "the episode is not waiting for an action (finished or not started); reset it"
            )

    async def close(self) -> None:
        """Stop the episode if it is still running; the runner tears the sandbox down. Idempotent."""
        if self._run is not None and not self._run.done():
            self._run.cancel()
            try:
                await self._run
            except asyncio.CancelledError:
                pass

    def cancel_soon(self) -> None:
        """Non-blocking ``close`` for callers outside the event loop's thread (``loop.call_soon_threadsafe``)."""
        if self._run is not None and not self._run.done():
            self._run.cancel()

    async def _next_pause(self) -> Pause:
        waiter = asyncio.ensure_future(self._channel.requests.get())
        try:
            await asyncio.wait({waiter, self._run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiter.done():
                waiter.cancel()
        if waiter.done() and not waiter.cancelled():
            self._pause = AwaitingAction(waiter.result())
        else:
            self._pause = Finished(self._run.result())
        return self._pause


_call_ids = itertools.count(1)


def completion_from_text(raw_text: str, request: ChatRequest) -> Completion:
    """A completion from raw model text, read by the one output interpreter (as every policy's is).

    The text is the client's whole completion, so no reasoning block was opened by a
    prompt here (``reasoning_open=False``): only a leading ``<think>`` opens one.
    """
    return Completion(
        raw_text=raw_text, interpretation=interpret(raw_text, request.tools, reasoning_open=False)
    )


def completion_from_calls(
    message: str,
    calls: list[tuple[str, object]],
    request: ChatRequest,
) -> Completion:
    """A completion from structured output: visible ``message`` and ``(name, arguments)`` calls.

    Arguments are typed from the tool schemas with ``type_tool_call`` (as for
    endpoints that return structured calls); a call to an unknown tool or with
    invalid arguments becomes a ``ToolCallError`` whose message the agent sees
    as the tool output (a policy failure, never a system error).
    """
    typed: list[ToolCall | ToolCallError] = [
        type_tool_call(name, arguments, request.tools, f"call_{next(_call_ids)}")
        for name, arguments in calls
    ]
    interpretation = Interpretation(
        content=message,
        tool_calls=tuple(c for c in typed if isinstance(c, ToolCall)),
        errors=tuple(c for c in typed if isinstance(c, ToolCallError)),
        call_order=tuple(c.id for c in typed),
    )
    return Completion(raw_text="", interpretation=interpretation)
