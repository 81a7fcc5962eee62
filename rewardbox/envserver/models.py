"""The wire types of the environment server, on OpenEnv's own base classes.

``RewardboxAction``, ``RewardboxObservation`` and ``RewardboxState`` subclass
``openenv.core.env_server.types.Action``/``Observation``/``State`` (pydantic
models), so OpenEnv's server serialises them and its clients
(``EnvClient``, ``GenericEnvClient``) read them unchanged.

OpenEnv's ``serialize_observation`` drops an observation's ``metadata``, so
everything a client needs (status, system error, grading detail) is a field.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

EpisodeStatus = Literal["awaiting_action", "finished", "system_error"]
"""``awaiting_action``: the agent's turn; ``finished``: graded, ``reward`` set;
``system_error``: an infrastructure fault ended the episode, ``reward`` None (never 0)."""


class ToolCallAction(BaseModel):
    """One tool call: the tool's name and its arguments (a JSON object)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        ..., min_length=1, description="Tool name, as listed in the observation's tools"
    )
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments, a JSON object")


class RewardboxAction(Action):
    """One agent turn: tool calls, a text reply to the user, or raw model text.

    Exactly one form:

    * ``tool_calls`` (optionally with ``message``, visible text written before
      the calls): the calls run in order in the episode's sandbox; the next
      observation carries their outputs.
    * ``message`` alone: a reply to the user. With ``end_episode`` (or a reply
      that ends with ``<DONE>``) the episode ends and is graded; otherwise the
      task's scripted user simulator answers and the episode goes on.
    * ``raw_text``: a completion exactly as a model wrote it, read by the
      project's output interpreter (Hermes ``<tool_call>`` markup, ``<think>``
      blocks, ``<DONE>``), as in evaluation.
    """

    tool_calls: list[ToolCallAction] = Field(
        default_factory=list, description="Tool calls, run in order"
    )
    message: str | None = Field(None, description="Visible reply to the user")
    end_episode: bool = Field(
        False, description="End the episode after this reply (appends <DONE>)"
    )
    raw_text: str | None = Field(
        None, description="A raw model completion, parsed by the project's interpreter"
    )

    @model_validator(mode="after")
    def _one_form(self) -> RewardboxAction:
        # PydanticCustomError, not ValueError: OpenEnv sends ``errors()`` as JSON, and a
        # ValueError's context (the exception object) cannot be serialised (the session would end).
        if self.raw_text is not None and (
            self.tool_calls or self.message is not None or self.end_episode
        ):
            raise PydanticCustomError(
                "action_form", "raw_text excludes tool_calls, message and end_episode"
            )
        if self.raw_text is None and not self.tool_calls and not (self.message or "").strip():
            raise PydanticCustomError(
                "action_form", "an action needs tool_calls, a non-empty message, or raw_text"
            )
        if self.end_episode and self.tool_calls:
            raise PydanticCustomError(
                "action_form", "end_episode applies to a reply without tool calls"
            )
        return self


class RewardboxObservation(Observation):
    """What the agent sees after ``reset`` or ``step`` (``reward`` and ``done`` are OpenEnv's fields).

    ``reward`` is set only when ``status == "finished"``: the grader's reward in
    [0, 1] (the task's test on the terminal state, as in evaluation). It is
    None while the episode runs and when ``status == "system_error"``.
    """

    status: EpisodeStatus = Field(..., description="awaiting_action, finished or system_error")
    task_uid: str = Field(..., description="The task being played")
    query: str = Field("", description="The task's first user message")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI-format tool schemas; sent by reset only"
    )
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The visible conversation so far"
    )
    new_messages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Messages added by the last action: tool results, the user's reply",
    )
    termination_reason: str | None = Field(
        None,
        description="Why the episode ended (rewardbox.episode.termination.TerminationReason value)",
    )
    passed: bool | None = Field(None, description="The task's test passed (finished episodes only)")
    system_error: str | None = Field(
        None, description="'<kind>: <message>' of an infrastructure fault"
    )
    grading_message: str = Field("", description="The test's failure message, if any")


class RewardboxState(State):
    """Server-side state of one session's episode (``episode_id`` and ``step_count`` are OpenEnv's)."""

    task_uid: str | None = None
    status: EpisodeStatus | None = None
    trial: int = 0
    termination_reason: str | None = None
