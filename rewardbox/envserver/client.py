"""``RewardboxEnv``: the typed OpenEnv client (an ``EnvClient`` subclass; WebSocket ``/ws``).

    async with RewardboxEnv(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(task_uid="retail_cancel.py:test_retail_cancel_explicit_01")
        result = await env.step(RewardboxAction(tool_calls=[ToolCallAction(name="get_order", arguments={...})]))

``env.sync()`` gives OpenEnv's blocking wrapper. ``GenericEnvClient`` works too
(actions and observations as plain dicts).
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from rewardbox.envserver.models import RewardboxAction, RewardboxObservation, RewardboxState


class RewardboxEnv(EnvClient[RewardboxAction, RewardboxObservation, RewardboxState]):
    """Client of the rewardbox environment server; one instance is one session (one episode at a time)."""

    def _step_payload(self, action: RewardboxAction) -> dict[str, Any]:
        return action.model_dump(exclude_defaults=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RewardboxObservation]:
        observation = RewardboxObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> RewardboxState:
        return RewardboxState(**payload)
