"""verl's agent loop for rewardbox episodes: our sandbox, tools, user, parser and grader inside verl's rollout.

verl (0.9.x) runs one ``AgentLoopBase.run(sampling_params, **row)`` per rollout; ``row``
is a dataset row written by ``rewardbox.training.verl.rows.pool_to_verl_rows``. The
:class:`RewardboxAgentLoop` registered here as ``rewardbox_agent`` rebuilds the task from
``extra_info.task_json`` and plays it with ``rewardbox.training.verl.tokens`` against
verl's LLM server manager (``server_manager.generate(request_id, prompt_ids=...,
sampling_params=...)``, token ids and log-probs back). It returns verl's
``AgentLoopOutput``:

- ``prompt_ids`` / ``response_ids`` / ``response_mask`` (1 on policy tokens, 0 on tool, user
  and template tokens) / ``response_logprobs`` (the server's sampled log-probs);
- ``reward_score``: our grader's reward on the terminal state (verl's reward manager is not
  called when it is set); ``extra_fields.reward_extra_info``: ``passed``, ``tries``,
  ``truncated`` (1.0 when any agent turn was cut) and ``truncated_turns``;
  ``extra_fields.rewardbox_truncated_turns`` / ``rewardbox_agent_turns``;
- ``num_turns``: user, assistant and tool messages; ``metrics``: generation and tool seconds.

**System errors.** After ``episode.max_system_error_retries`` fresh episodes (sampled
again), a rollout that still ends in a system error raises :class:`EpisodeSystemError`
instead of returning a reward. verl's V1 rollout (``trainer.use_v1``, the default) then
marks the prompt's group ``failure`` and stores no trajectory for that rollout: it never
enters the advantage or the loss. A group left with no trajectory is evicted and refilled
from the dataset with ``trainer.v1.sampler.sync_refill_failed_groups=true``, which
:func:`build_agent_loop_config` sets. A reward of 0 is never written for it.

**Truncation.** A turn without an end-of-turn token was cut (by ``max_tokens``, the
response budget or the engine's context ``rollout.max_model_len``) and is ``length``:
counted, and its tool calls never run (``rewardbox.training.verl.tokens``, "Truncated
turns"). verl's own ``response_length/clip_ratio`` counts only responses that filled
``response_length``, so a turn cut by the context is invisible there; the
``reward_extra_info`` keys above reach verl's validation metrics
(``val-aux/<data_source>/truncated/mean@N``) on both trainers, and the V1 trainer's step
line through rewardbox's replay buffer (``rewardbox/truncated_frac``,
``rewardbox.training.verl.sampler``). Each turn's ``max_tokens`` is capped to the context
room left, so verl's server never gets a request without room (it raises for one).

**Trials.** Every rollout of a group gets its own trial (:func:`rollout_trial`): half of the
episode's key (uid, trial), from which the runner derives its seeds and which the test context
gets as ``repetition``. verl's V1 rollout passes ``session_id``, the rollout's index in its
group. The legacy rollout (``trainer.use_v1=false``) passes none; it passes ``priority``, which
``AgentLoopManager.generate_sequences`` numbers 0, 1, ... over a batch the trainer built with
``repeat(n, interleave=True)``, so rollout j of the p-th prompt has ``priority = p * n + j``
and its trial is ``priority % n`` (n: the larger of ``rollout.n`` and ``rollout.val_kwargs.n``).

verl is imported only when present: this module imports in our own environment, where
:func:`build_agent_loop_config` and the services are used; the class exists (and is
registered) only where verl is importable (``make verl-env``, or the cluster's image).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import yaml

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import Grader
from rewardbox.episode.stepwise import StepwiseEpisode
from rewardbox.episode.user_simulator import UserSimulator
from rewardbox.errors import EndpointError
from rewardbox.sandbox.base import SandboxFactory
from rewardbox.training.verl.rows import AGENT_NAME, task_from_extra_info
from rewardbox.training.verl.tokens import Sampled, TokenTrajectory, TurnTokens, play_with_retries

DEFAULT_SERVICES = "rewardbox.runtime.verl_services:verl_loop_services"
AGENT_LOOP_FILE = "rewardbox_agent_loops.yaml"
FALLBACK_GROUPS = 65536
"""Groups the fallback trial counter remembers per process (the oldest is forgotten first)."""

logger = logging.getLogger(__name__)
_fallback_trials: OrderedDict[str, int] = OrderedDict()

try:  # verl's own environment only
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError:  # our default environment: no verl, no class
    AgentLoopBase = None


class EpisodeSystemError(RuntimeError):
    """A rollout ended in a system error on every try: verl must drop it (never score it).

    Attributes:
        uid: the task; kind: ``system_error_kind`` (``sandbox_crash``, ...); tries: episodes played.
    """

    def __init__(self, uid: str, kind: str, message: str, tries: int) -> None:
        self.uid, self.kind, self.tries = uid, kind, tries
        super().__init__(f"rewardbox system error on {uid} after {tries} tries: {message}")


@dataclass
class LoopServices:
    """What every rollout of one verl worker process shares.

    Attributes:
        sandbox_factory: one fresh sandbox per episode.
        user_simulator: the scripted (or endpoint) user, or None.
        grader: the task's test runner (``rewardbox.grading.testrunner.TestRunner``).
        config: episode limits; ``max_system_error_retries`` bounds the re-plays.
    """

    sandbox_factory: SandboxFactory
    user_simulator: UserSimulator | None
    grader: Grader
    config: EpisodeConfig


@functools.cache
def resolve_services(path: str) -> LoopServices:
    """Call the zero-argument factory at ``"module:function"`` once per process (verl builds a loop per rollout).

    Raises:
        ValueError: ``path`` is not ``module:function`` or names nothing callable (a config error).
    """
    module_name, _, attr = path.partition(":")
    factory = getattr(importlib.import_module(module_name), attr, None) if attr else None
    if not callable(factory):
        raise ValueError(f"services_factory {path!r} must name a function as 'module:function'")
    return factory()


def build_agent_loop_config(
    out_dir: str | Path, services_factory: str = DEFAULT_SERVICES
) -> dict[str, Any]:
    """Write verl's agent-loop file for ``rewardbox_agent`` and return the overrides that use it.

    Merge the result into ``verl_config.verl_overrides(...)`` before ``launch_command``.

    Args:
        out_dir: where ``rewardbox_agent_loops.yaml`` is written (must be readable by verl's workers).
        services_factory: ``"module:function"`` building each worker's :class:`LoopServices`.

    Returns:
        ``{dotted key: value}``: the agent-loop file and default loop, sampler log-probs kept,
        failed groups refilled (see the module docstring on system errors).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / AGENT_LOOP_FILE
    entry = {
        "name": AGENT_NAME,
        "_target_": f"{__name__}.RewardboxAgentLoop",
        "services_factory": services_factory,
    }
    path.write_text(yaml.safe_dump([entry], sort_keys=False))
    agent = "actor_rollout_ref.rollout.agent"
    return {
        f"{agent}.agent_loop_config_path": str(path.resolve()),
        f"{agent}.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "trainer.v1.sampler.sync_refill_failed_groups": True,
    }


def rollout_trial(row: Mapping[str, Any], group_span: int) -> int:
    """The trial of one verl rollout: distinct among the rollouts of its group (same ``uid``).

    Args:
        row: the keyword arguments verl passed ``run`` (the dataset row and verl's own keys).
        group_span: the largest group verl samples, ``max(rollout.n, rollout.val_kwargs.n)``.

    Returns:
        - ``session_id`` (verl V1, ``AgentLoopWorkerTQ._run_prompt``): the index in the group, 0 to n-1;
        - else ``priority % group_span`` (legacy ``AgentLoopManager.generate_sequences``, see the
          module docstring): j for rollout j when the group has ``group_span`` rollouts; a group
          of k <= ``group_span`` rollouts holds k consecutive priorities, so k distinct trials;
        - else (a caller that passes neither) a per-process count per ``uid``: 0, 1, ... in the
          order the rollouts start, distinct among the rollouts of a group that one worker process
          runs (verl V1 runs a whole group in one worker), and not reproducible across runs.

    Raises:
        ValueError: ``group_span`` < 1.
    """
    if group_span < 1:
        raise ValueError(f"group_span must be >= 1, got {group_span}")
    if row.get("session_id") is not None:
        return int(row["session_id"])
    if row.get("priority") is not None:
        return int(row["priority"]) % group_span
    key = str(row.get("uid") or _extra(row).get("uid") or "")
    trial = _fallback_trials.pop(key, -1) + 1
    _fallback_trials[key] = trial
    while len(_fallback_trials) > FALLBACK_GROUPS:
        _fallback_trials.popitem(last=False)
    if trial == 0:
        logger.warning(
            "verl passed neither session_id nor priority: trials of group %r counted per process",
            key,
        )
    return trial


def _extra(row: Mapping[str, Any]) -> Mapping[str, Any]:
    info = row.get("extra_info")
    return info if isinstance(info, Mapping) else {}


def server_generate(server_manager: Any, request_id: str, sampling_params: dict[str, Any]):
    """A ``verl_tokens.Generate`` over verl's server manager (sticky ``request_id``, per-turn ``max_tokens``)."""

    async def generate(context_ids: list[int], max_new_tokens: int) -> Sampled:
        params = {**sampling_params, "max_tokens": max_new_tokens}
        out = await server_manager.generate(
            request_id=request_id, prompt_ids=context_ids, sampling_params=params
        )
        stop_reason = getattr(out, "stop_reason", None)
        if stop_reason == "aborted":  # verl paused the engine mid-request: nothing the policy did
            raise EndpointError(
                f"verl's generation server aborted request {request_id}", cause="aborted"
            )
        return Sampled(
            list(out.token_ids), None if out.log_probs is None else list(out.log_probs), stop_reason
        )

    return generate


def output_fields(trajectory: TokenTrajectory, trial: int = 0) -> dict[str, Any]:
    """verl ``AgentLoopOutput`` fields of a scored trajectory (the caller raises for a system error).

    ``extra_fields.rewardbox_trial`` is the episode's trial (verl keeps it per row of the batch).
    """
    result = trajectory.result
    truncated = sum(t.finish_reason == "length" for t in result.agent_turns)
    return {
        "prompt_ids": trajectory.prompt_ids,
        "response_ids": trajectory.response_ids,
        "response_mask": trajectory.response_mask,
        "response_logprobs": trajectory.response_logprobs,
        "reward_score": trajectory.reward,
        "num_turns": sum(1 for m in result.messages if m.get("role") != "system"),
        "extra_fields": {
            "turn_scores": [],
            "tool_rewards": [],
            "reward_extra_info": {
                "passed": float(bool(result.passed)),
                "tries": trajectory.tries,
                "truncated": float(truncated > 0),
                "truncated_turns": float(truncated),
            },
            "rewardbox_termination_reason": None
            if result.termination_reason is None
            else str(result.termination_reason),
            "rewardbox_trial": trial,
            "rewardbox_truncated_turns": truncated,
            "rewardbox_agent_turns": len(result.agent_turns),
        },
    }


if AgentLoopBase is not None:

    @register(AGENT_NAME)
    class RewardboxAgentLoop(AgentLoopBase):
        """One rewardbox episode per ``run``; see the module docstring.

        Args:
            services_factory: ``"module:function"`` returning :class:`LoopServices` (cached per process).
            *args, **kwargs: verl's ``AgentLoopBase`` arguments (config, server manager, tokenizer, ...).
        """

        def __init__(
            self, *args: Any, services_factory: str = DEFAULT_SERVICES, **kwargs: Any
        ) -> None:
            super().__init__(*args, **kwargs)
            self.services = resolve_services(services_factory)
            self.turns = TurnTokens(self.tokenizer)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            """Play the row's task; ``AgentLoopOutput`` with our reward, or :class:`EpisodeSystemError`.

            The episode's trial is :func:`rollout_trial` (distinct within the group on both of
            verl's paths); a prompt longer than ``rollout.prompt_length`` raises
            ``PromptTooLongError`` (never cut).
            """
            task = task_from_extra_info(kwargs["extra_info"])
            config = self.rollout_config
            trial = rollout_trial(kwargs, max(int(config.n), int(config.val_kwargs.n)))
            services = self.services

            def new_episode() -> StepwiseEpisode:
                return StepwiseEpisode(
                    task,
                    trial,
                    sandbox_factory=services.sandbox_factory,
                    user_simulator=services.user_simulator,
                    grader=services.grader,
                    config=services.config,
                )

            generate = server_generate(self.server_manager, uuid4().hex, sampling_params)
            context = getattr(
                config, "max_model_len", None
            )  # None: the model's position limit (dry run checks it)
            trajectory = await play_with_retries(
                new_episode,
                generate,
                self.turns,
                int(config.response_length),
                services.config.max_system_error_retries,
                int(config.prompt_length),
                None if context is None else int(context),
            )
            result = trajectory.result
            if trajectory.system_error:
                raise EpisodeSystemError(
                    task.uid,
                    result.system_error_kind or "system_error",
                    result.system_error,
                    trajectory.tries,
                )
            metrics = AgentLoopMetrics(
                generate_sequences=trajectory.generate_s, tool_calls=result.time_tool_s
            )
            return AgentLoopOutput(metrics=metrics, **output_fields(trajectory, trial))
