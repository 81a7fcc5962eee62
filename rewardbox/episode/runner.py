"""The agent-tools-user loop as an explicit state machine.

Behaviour follows docs/thinkingbox.md, "Episode loop" (``run_agent_user_loop`` and
``decode_turn_iter``): the user opens with the task's query; each agent
completion either calls tools (dispatched sequentially, results appended as
``tool`` messages) or writes visible text, which passes control to the user;
``<DONE>`` at the end of the agent's text ends the episode; an ``is_end_turn``
tool ends it; turn limits end it. One handler per state, each small:

    OPEN -> AGENT -> (TOOLS -> AGENT)* -> USER -> AGENT ... -> GRADE -> END

Infrastructure faults (``InfrastructureError``) abort the episode with
``termination_reason == TerminationReason.SYSTEM_ERROR``; they are never shown to
the policy and never scored. ``rewardbox.episode.trial.run_trial`` retries them
with a fresh sandbox.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.seeds import turn_seed
from rewardbox.episode.termination import TerminationReason
from rewardbox.episode.trajectory import AgentTurn, EpisodeResult, TestOutcome
from rewardbox.episode.user_simulator import UserSimulator, split_stop_marker
from rewardbox.errors import ContextLengthError, GraderError, InfrastructureError
from rewardbox.grading.tb_messages import DONE_MARKER
from rewardbox.policy.base import (
    ChatRequest,
    Completion,
    Interpretation,
    Policy,
    ToolCall,
    ToolCallError,
)
from rewardbox.policy.chat_template import assistant_message
from rewardbox.sandbox.base import Sandbox, SandboxFactory, ToolSpec
from rewardbox.tasks.schema import Task


class Grader(Protocol):
    """Runs a task's test code on a finished episode (see rewardbox.grading.testrunner)."""

    async def run(self, task: Task, context: dict[str, Any]) -> TestOutcome: ...


class State(enum.Enum):
    OPEN = "open"
    AGENT = "agent"
    TOOLS = "tools"
    USER = "user"
    GRADE = "grade"
    END = "end"


@dataclass
class EpisodeRun:
    """Mutable state of one episode; handlers read and update it."""

    task: Task
    trial: int
    sandbox: Sandbox
    tools: list[ToolSpec] = field(default_factory=list)
    init_result: dict[str, Any] = field(default_factory=dict)
    result: EpisodeResult | None = None
    last_completion: Completion | None = None
    user_turns: int = 0
    steps_this_user_turn: int = 0
    user_finished: bool = False
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))


class EpisodeRunner:
    """Runs one episode of (policy, task, trial) against a fresh sandbox.

    Args:
        policy: the agent policy.
        sandbox_factory: zero-argument callable returning a fresh ``Sandbox``.
        user_simulator: answers as the user after the first turn, or None
            (the episode then ends with ``no_user_llm`` after the agent's first text).
        grader: runs the test code; a grader fault is a system error.
        config: turn limits and generation settings.
    """

    def __init__(
        self,
        policy: Policy,
        sandbox_factory: SandboxFactory,
        user_simulator: UserSimulator | None,
        grader: Grader,
        config: EpisodeConfig | None = None,
    ) -> None:
        self.policy = policy
        self.sandbox_factory = sandbox_factory
        self.user_simulator = user_simulator
        self.grader = grader
        self.config = config or EpisodeConfig()
        self._handlers = {
            State.OPEN: self._open,
            State.AGENT: self._agent,
            State.TOOLS: self._tools,
            State.USER: self._user,
            State.GRADE: self._grade,
        }

    async def run(self, task: Task, trial: int) -> EpisodeResult:
        """One episode. Never raises for policy behaviour or infrastructure faults.

        Returns:
            An ``EpisodeResult``; ``system_error`` is set (and ``reward`` None)
            when any ``InfrastructureError`` happened.
        """
        started = time.perf_counter()
        run = EpisodeRun(task=task, trial=trial, sandbox=self.sandbox_factory())
        run.result = EpisodeResult(uid=task.uid, trial=trial)
        state = State.OPEN
        try:
            while state is not State.END:
                state = await self._handlers[state](run)
        except InfrastructureError as exc:
            _mark_system_error(run.result, exc)
        finally:
            await run.sandbox.close()
            run.result.duration_s = time.perf_counter() - started
        return run.result

    # -- handlers -----------------------------------------------------------------

    async def _open(self, run: EpisodeRun) -> State:
        task = run.task
        t0 = time.perf_counter()
        run.init_result = await run.sandbox.start(task.world_state, task.available_tools)
        run.result.events.extend(
            getattr(run.sandbox, "events", ())
        )  # e.g. a server's reuse retired here
        server_tools = await run.sandbox.list_tools()
        run.result.time_tool_s += time.perf_counter() - t0
        run.tools = _builtin_specs(task) + _apply_overrides(task, server_tools)
        run.result.tools = list(run.tools)
        messages = run.result.messages
        messages.append({"role": "system", "content": task.system_instructions})
        if task.bot_instructions:
            messages.append({"role": "system", "content": task.bot_instructions})
        messages.append({"role": "user", "content": task.query})
        return State.AGENT

    async def _agent(self, run: EpisodeRun) -> State:
        cfg, result = self.config, run.result
        limit = min(run.task.max_agent_turns, cfg.max_agent_turns)
        if result.turns >= limit or run.steps_this_user_turn >= cfg.max_agent_steps_per_user_turn:
            return _finish(result, TerminationReason.AGENT_LIMIT)
        request = ChatRequest(
            messages=[_visible(m) for m in result.messages],
            tools=run.tools,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            seed=None if cfg.seed is None else cfg.seed + run.trial,
            sampling_seed=None
            if cfg.seed is None
            else turn_seed(cfg.seed, run.task.uid, run.trial, result.turns),
            task=run.task,
        )
        t0 = time.perf_counter()
        try:
            completion = await self.policy.complete(request)
        except ContextLengthError:
            return _finish(result, TerminationReason.CONTEXT_LIMIT)
        finally:
            result.time_agent_s += time.perf_counter() - t0
        run.last_completion = completion
        run.steps_this_user_turn += 1
        _record_turn(result, completion)
        return self._after_completion(run, completion)

    def _after_completion(self, run: EpisodeRun, completion: Completion) -> State:
        interp, result = completion.interpretation, run.result
        calls = ordered_calls(interp)
        result.messages.append(assistant_message(interp))
        end_turn = {t.name for t in run.tools if t.is_end_turn}
        if any(isinstance(c, ToolCall) and c.name in end_turn for c in calls):
            for c in calls:
                result.messages.append(_tool_message(c, ""))
            return _finish(result, TerminationReason.END_TURN_TOOL)
        if calls:
            return State.TOOLS
        if not interp.content.strip():
            return _finish(result, TerminationReason.AGENT_ERROR)
        if interp.content.strip().endswith(DONE_MARKER):
            return _finish(result, TerminationReason.DONE)
        return State.USER

    async def _tools(self, run: EpisodeRun) -> State:
        interp = run.last_completion.interpretation
        known = {t.name for t in run.tools}
        t0 = time.perf_counter()
        for call in ordered_calls(interp):
            if isinstance(call, ToolCallError):
                output = call.message
            elif call.name not in known:
                output = f"Error: function '{call.name}' does not exist"
            else:
                output = await run.sandbox.call_tool(call.name, dict(call.arguments))
            run.result.messages.append(_tool_message(call, output))
            run.result.tool_calls.append(
                {"tool_call": _call_message(call)["function"], "tool_response": output}
            )
        run.result.time_tool_s += time.perf_counter() - t0
        return State.AGENT

    async def _user(self, run: EpisodeRun) -> State:
        result = run.result
        if run.user_finished:
            return _finish(result, TerminationReason.USER_DONE)
        if self.user_simulator is None or not run.task.user_context.strip():
            return _finish(result, TerminationReason.NO_USER_LLM)
        run.user_turns += 1
        if run.user_turns > min(run.task.max_user_turns, self.config.max_user_turns):
            return _finish(result, TerminationReason.USER_LIMIT)
        t0 = time.perf_counter()
        reply = await self.user_simulator.reply(run.task, result.messages, run.user_turns)
        result.time_user_s += time.perf_counter() - t0
        text, stopped = split_stop_marker(reply)
        if stopped and not text:
            return _finish(result, TerminationReason.USER_DONE)
        run.user_finished = stopped
        result.messages.append({"role": "user", "content": text, "is_user_llm": True})
        run.steps_this_user_turn = 0
        return State.AGENT

    async def _grade(self, run: EpisodeRun) -> State:
        result = run.result
        t0 = time.perf_counter()
        result.effects = await run.sandbox.get_effects()
        result.time_tool_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        outcome = await self.grader.run(run.task, build_test_context(run))
        result.time_test_s = time.perf_counter() - t0
        result.test_outcome = outcome
        if outcome.is_system_error:
            raise GraderError(
                outcome.message or "test raised a non-assertion exception",
                error_kind=outcome.system_error_kind or "grader_error",
                permanent=outcome.permanent,
            )
        result.reward = float(outcome.reward)
        result.passed = bool(outcome.result)
        return State.END


# -- small pure helpers --------------------------------------------------------------


def _finish(result: EpisodeResult, reason: TerminationReason) -> State:
    result.termination_reason = reason
    return State.GRADE


def _mark_system_error(result: EpisodeResult, exc: InfrastructureError) -> None:
    result.system_error = f"{exc.kind}: {exc}"
    result.system_error_kind = getattr(exc, "error_kind", f"{exc.kind}_error")
    result.system_error_permanent = exc.permanent
    result.termination_reason = TerminationReason.SYSTEM_ERROR
    result.reward = None
    result.passed = None


def _record_turn(result: EpisodeResult, completion: Completion) -> None:
    interp = completion.interpretation
    result.agent_turns.append(
        AgentTurn(
            raw_text=completion.raw_text,
            finish_reason=completion.finish_reason,
            raw_finish_reason=completion.raw_finish_reason,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cached_input_tokens=completion.cached_input_tokens,
            prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=completion.completion_token_ids,
            completion_logprobs=completion.completion_logprobs,
            events=tuple(interp.events),
        )
    )
    result.events.extend(interp.events)


def ordered_calls(interp: Interpretation) -> list[ToolCall | ToolCallError]:
    """Well-formed and malformed calls in the order the model wrote them (dispatched sequentially)."""
    by_id: dict[str, ToolCall | ToolCallError] = {c.id: c for c in interp.tool_calls}
    by_id.update({e.id: e for e in interp.errors})
    order = [i for i in interp.call_order if i in by_id]
    return [by_id[i] for i in order] + [c for i, c in by_id.items() if i not in order]


def _call_message(call: ToolCall | ToolCallError) -> dict[str, Any]:
    if isinstance(call, ToolCall):
        fn = {"name": call.name, "arguments": dict(call.arguments)}
    else:
        fn = {"name": call.name or "", "arguments": {}, "raw": call.raw, "error": call.message}
    return {"id": call.id, "type": "function", "function": fn}


def _tool_message(call: ToolCall | ToolCallError, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name or "", "content": output}


def _visible(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the policy sees it: no simulator flags, no hidden reasoning."""
    return {k: v for k, v in message.items() if k not in ("is_user_llm", "reasoning_content")}


def _builtin_specs(task: Task) -> list[ToolSpec]:
    specs = []
    for tool in task.builtin_tools:
        schema = (
            tool.get("input_schema")
            or tool.get("parameters")
            or {"type": "object", "properties": {}}
        )
        specs.append(
            ToolSpec(
                tool["name"], tool.get("description", ""), schema, bool(tool.get("is_end_turn"))
            )
        )
    return specs


def _apply_overrides(task: Task, server_tools: list[ToolSpec]) -> list[ToolSpec]:
    """Scenario overrides: description, per-argument descriptions, end-turn flag
    (docs/thinkingbox.md, "Dataset layout")."""
    by_name = {t.name: t for t in task.tools}
    out = []
    for spec in server_tools:
        entry = by_name.get(spec.name)
        if entry is None:
            out.append(spec)
            continue
        schema = spec.input_schema
        if entry.override_arg_description:
            props = {k: dict(v) for k, v in (schema.get("properties") or {}).items()}
            for arg, text in entry.override_arg_description.items():
                props.setdefault(arg, {})["description"] = text
            schema = {**schema, "properties": props}
        description = entry.override_description or spec.description
        out.append(ToolSpec(spec.name, description, schema, entry.is_end_turn or spec.is_end_turn))
    return out


def build_test_context(run: EpisodeRun) -> dict[str, Any]:
    """The JSON test context (docs/thinkingbox.md, "Test code") sent to the grading worker."""
    result = run.result
    return {
        "response": result.response,
        "effects": result.effects,
        "tool_calls": result.tool_calls,
        "tool_direct_responses": [],
        "messages": result.messages,
        "init_result": run.init_result,
        "session_id": run.session_id,
        "metadata": {
            "uid": run.task.uid,
            "repetition": run.trial,
            # the ThinkingBox test context names the termination reason "finish_reason"
            "finish_reason": None
            if result.termination_reason is None
            else str(result.termination_reason),
            **{
                k: v for k, v in run.task.metadata.items() if isinstance(v, (str, int, float, bool))
            },
        },
    }
