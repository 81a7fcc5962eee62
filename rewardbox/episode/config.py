"""Episode config: limits and sampling of one episode, where episodes run, and the simulated user.

Composed by the profile under ``episode:``, ``executor:`` and ``user:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class EpisodeConfig(BaseModel):
    """Limits of one episode.

    Attributes:
        max_user_turns: simulated user replies after the query (docs/method.md, "Episode": default 10);
            the task's own ``max_user_sim_turns`` applies too (the smaller wins).
        max_agent_turns: agent completions over the whole episode (as ThinkingBox
            counts them, docs/thinkingbox.md, "Episode loop"); the task's limit applies too.
        max_agent_steps_per_user_turn: agent completions between two user messages
            (docs/method.md, "Episode": ``max_agent_turns`` per user message); stops tool loops.
        max_new_tokens: generation budget per completion, tokens.
        temperature: the policy's sampling temperature in probe, screening and evaluation
            episodes (0 = greedy). GRPO rollouts sample at ``grpo.temperature`` instead
            (the trainer scores at that one); nothing else overrides either.
        seed: base sampling seed; trial ``t`` sends ``seed + t`` as the request's
            episode seed, and agent turn j of trial t of task u draws its tokens with
            ``episode.seeds.turn_seed(seed, u, t, j)`` (local policy). None = unseeded.
        max_system_error_retries: fresh tries after a system error before the
            trial is recorded as a system error (never as a reward of 0).
        concurrency: episodes in flight at once (the local policy batches them).
    """

    model_config = ConfigDict(extra="forbid")

    max_user_turns: int = Field(10, ge=0)
    max_agent_turns: int = Field(sys.maxsize, ge=1)
    max_agent_steps_per_user_turn: int = Field(8, ge=1)
    max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    seed: int | None = 0
    max_system_error_retries: int = Field(2, ge=0)
    concurrency: int = Field(8, ge=1)


class ExecutorConfig(BaseModel):
    """Where episodes run: in this process (``local``) or as Ray actors (``ray``).

    Both executors keep at most ``EpisodeConfig.concurrency`` sandboxes open at
    once (the one bound, with backpressure: a key waits for a free slot).

    Attributes:
        kind: ``local`` (asyncio in this process, the laptop default) or ``ray``.
        address: ray only; None or ``local`` starts a private Ray in this process
            (``ray.init(address="local")``), whatever ``RAY_ADDRESS`` says or whichever
            ``ray start`` head runs on the machine; ``auto`` joins the cluster Ray discovers
            (``RAY_ADDRESS``, else the local ``ray start`` head); any other address
            (``ray://head:10001``, ``head:6379``) joins that cluster.
        num_cpus: ray only, private Ray only (None or ``local``); CPUs Ray may schedule on.
            A joined cluster has its own.
        workers: ray only; episode actors, each with its own policy copy, user
            simulator, grader pool and sandboxes. The concurrency bound is shared
            between them.
        worker_num_cpus: ray only; CPUs reserved per worker actor (fractions allowed).
        runtime_env: ray only; Ray's ``runtime_env`` (``working_dir``, ``pip``,
            ``env_vars``) for a real cluster whose nodes lack this checkout.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "ray"] = "local"
    address: str | None = None
    num_cpus: int = Field(2, ge=1)
    workers: int = Field(2, ge=1)
    worker_num_cpus: float = Field(1.0, ge=0.0)
    runtime_env: dict[str, Any] = Field(default_factory=dict)


class UserSimulatorConfig(BaseModel):
    """The simulated user: ``scripted`` answers from the task's user_context; ``endpoint`` uses an LLM.

    Attributes:
        kind: ``scripted`` or ``endpoint``.
        base_url, model: endpoint only (both required); an OpenAI-compatible server.
        api_key_env: endpoint only; the environment variable holding the key (never the key itself).
        temperature: the user simulator's sampling temperature (ThinkingBox example config: 0.3);
            the policy's own temperature is ``episode.temperature``.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "endpoint"] = "scripted"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.3

    @field_validator("model")
    @classmethod
    def _needs_model(cls, v, info):
        if info.data.get("kind") == "endpoint" and not (v and info.data.get("base_url")):
            raise ValueError("user.kind=endpoint needs user.base_url and user.model")
        return v
