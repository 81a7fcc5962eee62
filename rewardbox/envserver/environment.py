"""``RewardboxEnvironment``: one session's episode as an OpenEnv ``Environment``.

OpenEnv's server calls the environment factory once per WebSocket session, so
each session owns one ``RewardboxEnvironment`` and, after each ``reset``, one
``StepwiseEpisode`` with its own fresh sandbox: concurrent sessions never see
each other's state. ``reset_async``/``step_async`` run on the server's event
loop (OpenEnv prefers them over the sync methods when overridden); the sync
``reset``/``step`` drive a private loop for in-process use without a server.

Outcomes: a graded episode ends with ``status="finished"`` and the grader's
reward; an infrastructure fault ends it with ``status="system_error"``,
``reward=None`` and ``system_error`` set, never a reward of 0. Caller errors
(unknown task, step before reset or after the end, a malformed action) raise,
and OpenEnv reports them to the client as an error response.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from rewardbox.envserver.models import RewardboxAction, RewardboxObservation, RewardboxState
from rewardbox.envserver.services import EnvServices, check_trial
from rewardbox.episode.stepwise import (
    AwaitingAction,
    EpisodeClosedError,
    Finished,
    Pause,
    StepwiseEpisode,
    completion_from_calls,
    completion_from_text,
)
from rewardbox.grading.tb_messages import DONE_MARKER
from rewardbox.policy.base import ChatRequest, Completion

_HIDDEN_KEYS = ("is_user_llm", "reasoning_content")
"""Message keys the policy never sees (as in the runner's requests)."""


class RewardboxEnvironment(Environment[RewardboxAction, RewardboxObservation, RewardboxState]):
    """Our domains and ThinkingBox tasks behind OpenEnv's ``reset``/``step``/``state``.

    ``reset(task_uid=..., seed=..., episode_id=..., trial=0)`` starts an
    episode of the named task (or one picked by ``seed``) and returns the
    system prompts, the task's query and the tool schemas. ``step(action)``
    plays one agent turn (``RewardboxAction``) and returns the tool results or
    the simulated user's reply; the last step carries ``done`` and the reward.

    Args:
        services: the server's shared tasks, sandbox factory, user simulator and grader.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, services: EnvServices) -> None:
        super().__init__()
        self._services = services
        self._episode: StepwiseEpisode | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._private_loop: asyncio.AbstractEventLoop | None = None
        self._state = RewardboxState()
        self._shown = 0

    # -- OpenEnv API (async: the server's path) ------------------------------------------

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_uid: str | None = None,
        trial: int = 0,
        **kwargs: Any,
    ) -> RewardboxObservation:
        """Start a fresh episode (closing any running one) and return its first observation.

        Raises:
            UnknownTaskError: ``task_uid`` is not served (caller error).
            InvalidResetError: ``trial`` is not an integer >= 0 (caller error).
        """
        trial = check_trial(trial)
        await self._close_episode()
        task = self._services.pick_task(task_uid, seed)
        self._episode = self._services.new_episode(task, trial)
        self._loop = asyncio.get_running_loop()
        self._state = RewardboxState(
            episode_id=episode_id or str(uuid.uuid4()), task_uid=task.uid, trial=trial
        )
        self._shown = 0
        return self._observe(await self._episode.start(), with_tools=True)

    async def step_async(
        self, action: RewardboxAction, timeout_s: float | None = None, **kwargs: Any
    ) -> RewardboxObservation:
        """Play one agent turn. ``timeout_s`` is not used (the sandbox's tool timeout applies).

        Raises:
            EpisodeClosedError: no episode is waiting for an action (reset first).
        """
        pause = self._episode.pause if self._episode is not None else None
        if not isinstance(pause, AwaitingAction):
            raise EpisodeClosedError(
                "no episode is waiting for an action: call reset (again) first"
            )
        completion = action_completion(action, pause.request)
        self._state.step_count += 1
        return self._observe(await self._episode.act(completion))

    @property
    def state(self) -> RewardboxState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="rewardbox",
            description=f"rewardbox tasks ({len(self._services.tasks)}) graded on their terminal state",
            version="1",
        )

    # -- sync API (in-process use, no server) ---------------------------------------------

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> RewardboxObservation:
        return self._run_private(self.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    def step(
        self, action: RewardboxAction, timeout_s: float | None = None, **kwargs: Any
    ) -> RewardboxObservation:
        return self._run_private(self.step_async(action, timeout_s=timeout_s))

    def close(self) -> None:
        """End the running episode (its sandbox is torn down). Safe from any thread, idempotent."""
        episode, loop = self._episode, self._loop
        self._episode = None
        if episode is not None and loop is not None and not loop.is_closed():
            if loop is self._private_loop:
                loop.run_until_complete(episode.close())
            elif _running_loop() is loop:
                episode.cancel_soon()
            else:
                loop.call_soon_threadsafe(episode.cancel_soon)
        if self._private_loop is not None:
            self._private_loop.close()
            self._private_loop = None

    # -- helpers ------------------------------------------------------------------------

    def _run_private(self, coro: Any) -> RewardboxObservation:
        if self._private_loop is None:
            self._private_loop = asyncio.new_event_loop()
        return self._private_loop.run_until_complete(coro)

    async def _close_episode(self) -> None:
        if self._episode is not None:
            await self._episode.close()
            self._episode = None

    def _observe(self, pause: Pause, with_tools: bool = False) -> RewardboxObservation:
        task_uid = self._state.task_uid or ""
        query = self._episode.task.query if self._episode is not None else ""
        if isinstance(pause, AwaitingAction):
            messages = list(pause.request.messages)
            tools = [t.to_openai() for t in pause.request.tools] if with_tools else []
            fields: dict[str, Any] = {"status": "awaiting_action", "tools": tools}
        else:
            messages = [
                {k: v for k, v in m.items() if k not in _HIDDEN_KEYS} for m in pause.result.messages
            ]
            fields = finished_fields(pause)
        new_messages, self._shown = messages[self._shown :], len(messages)
        self._state.status = fields["status"]
        self._state.termination_reason = fields.get("termination_reason")
        return RewardboxObservation(
            task_uid=task_uid, query=query, messages=messages, new_messages=new_messages, **fields
        )


def finished_fields(pause: Finished) -> dict[str, Any]:
    """Observation fields of an ended episode: graded, or a system error (reward None, never 0)."""
    result = pause.result
    reason = None if result.termination_reason is None else str(result.termination_reason)
    common = {"done": True, "termination_reason": reason}
    if result.system_error is not None:
        return {
            **common,
            "status": "system_error",
            "reward": None,
            "system_error": result.system_error,
        }
    outcome = result.test_outcome
    message = outcome.message if outcome is not None and not result.passed else ""
    return {
        **common,
        "status": "finished",
        "reward": float(result.reward),
        "passed": bool(result.passed),
        "grading_message": message,
    }


def action_completion(action: RewardboxAction, request: ChatRequest) -> Completion:
    """The ``Completion`` the runner receives for ``action`` (see ``RewardboxAction``)."""
    if action.raw_text is not None:
        return completion_from_text(action.raw_text, request)
    message = action.message or ""
    if action.end_episode and not message.rstrip().endswith(DONE_MARKER):
        message = f"{message.rstrip()} {DONE_MARKER}"
    return completion_from_calls(
        message, [(c.name, c.arguments) for c in action.tool_calls], request
    )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
