"""A TRL ``GRPOTrainer`` environment class (``environment_factory``) backed by the environment server.

TRL's contract (``GRPOTrainer(environment_factory=...)``): a class whose
``__init__`` takes no argument; ``reset(**row)`` gets the dataset row's
columns at the start of each episode; every other public method is a tool,
its JSON schema read from the signature and the docstring's ``Args:``
section (``transformers.utils.get_json_schema``); the reward function gets
the instances as ``environments``. TRL runs the generate -> parse -> call
loop itself and stops when the model answers without a tool call.

``environment_class`` builds such a class for a running server: one typed
method per served tool (forwarded to the server as a ``ToolCallAction``),
``reply_to_user`` (the scripted user's answer comes back as the tool result),
and ``rewardbox_reward`` ends each episode with the model's final answer and
returns the grader's reward. ``task_rows`` lists the dataset rows (prompt =
the episode's opening messages, ``task_uid``) and the tool schemas.

TRL parses the model's tool calls only for chat templates it knows
(``trl.chat_template_utils.add_response_schema``: Qwen, Llama 3, GLM, ...); for any
other it stops with "Unrecognized chat template". ``trl_tokenizer`` loads a
checkpoint's tokenizer with ``RESPONSE_TEMPLATE`` set: how transformers'
``parse_response`` reads our template's turns (``rewardbox/policy/chat_template.jinja``:
ChatML, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), so TRL
trains the embedded SmolLM2 (or any checkpoint saved with our template).
"""

from __future__ import annotations

import inspect
import keyword
import logging
import typing
from collections.abc import Iterable
from typing import Any

from rewardbox.envserver.client import RewardboxEnv
from rewardbox.envserver.models import RewardboxAction, RewardboxObservation, ToolCallAction

logger = logging.getLogger(__name__)

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""transformers' response template (``tokenizer.response_template``, transformers >= 5.13) for the project's
chat template: visible text, then ``<tool_call>`` JSON objects, up to ``<|im_end|>``."""

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}


class EpisodeOverError(RuntimeError):
    """A tool was called after the episode ended; TRL shows the message to the model as the tool output."""


def trl_tokenizer(checkpoint_dir: str) -> Any:
    """The checkpoint's tokenizer with ``RESPONSE_TEMPLATE`` set, for ``GRPOTrainer(processing_class=...)``.

    Raises:
        ValueError: the checkpoint's chat template is not the project's (a ``<tool_call>`` ChatML one), so the
            response template would misread its turns; TRL's own ``add_response_schema`` may know it.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir)
    template = tokenizer.chat_template or ""
    if "<tool_call>" not in template or "<|im_start|>" not in template:
        raise ValueError(
            f"{checkpoint_dir}: its chat template is not the project's <tool_call> ChatML template; "
            "use a checkpoint converted by rewardbox (base_checkpoint) or TRL's add_response_schema"
        )
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def task_rows(
    base_url: str, task_uids: Iterable[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Dataset rows and tool schemas for ``GRPOTrainer``, read from the server by resetting each task once.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        task_uids: tasks to include; None = every served task (``GET /tasks``).

    Returns:
        ``(rows, tools)``: rows ``{"prompt": opening messages, "task_uid": uid}``;
        tools the union of the tasks' OpenAI-format schemas (first definition wins).

    Raises:
        RuntimeError: a task could not start (its observation is a system error) or is unknown.
    """
    import httpx

    uids = (
        list(task_uids)
        if task_uids is not None
        else [
            t["uid"] for t in httpx.get(f"{base_url}/tasks", timeout=30).raise_for_status().json()
        ]
    )
    rows, tools = [], {}
    with RewardboxEnv(base_url=base_url).sync() as env:
        for uid in uids:
            observation = env.reset(task_uid=uid).observation
            if observation.status != "awaiting_action":
                raise RuntimeError(f"task {uid} could not start: {observation.system_error}")
            rows.append({"prompt": observation.messages, "task_uid": uid})
            for tool in observation.tools:
                tools.setdefault(tool["function"]["name"], tool)
    return rows, list(tools.values())


class RewardboxToolEnv:
    """Base of the generated classes: one server session, one episode per ``reset``.

    Attributes:
        reward: the grader's reward once the episode is graded (None before, and for a system error).
        system_error: ``'<kind>: <message>'`` when an infrastructure fault ended the episode.
        observation: the latest observation.
    """

    base_url: str = ""

    def __init__(self) -> None:
        self._client = RewardboxEnv(base_url=self.base_url).sync()
        self.reward: float | None = None
        self.system_error: str | None = None
        self.observation: RewardboxObservation | None = None

    def reset(self, **kwargs: Any) -> str | None:
        """Start the row's task (column ``task_uid``); the prompt already holds its opening messages."""
        self.reward, self.system_error = None, None
        self.observation = self._client.reset(task_uid=kwargs["task_uid"]).observation
        self._note_end()
        return None

    def reply_to_user(self, message: str) -> str:
        """
        Send a message to the user and get their reply.

        Args:
            message: What to tell or ask the user.

        Returns:
            The user's reply.
        """
        observation = self._act_as_tool(RewardboxAction(message=message))
        return _last_content(observation, "user") or "The user has ended the conversation."

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        observation = self._act_as_tool(
            RewardboxAction(tool_calls=[ToolCallAction(name=name, arguments=arguments)])
        )
        return _last_content(observation, "tool")

    def _act_as_tool(self, action: RewardboxAction) -> RewardboxObservation:
        """``_act`` for a tool method: an infrastructure fault never reaches the model as text."""
        observation = self._act(action)
        if observation.status == "system_error":
            raise EpisodeOverError("The episode is over; answer without calling tools.")
        return observation

    def _act(self, action: RewardboxAction) -> RewardboxObservation:
        if self.observation is None or self.observation.done:
            raise EpisodeOverError("The episode is over; answer without calling tools.")
        self.observation = self._client.step(action).observation
        self._note_end()
        return self.observation

    def _finish(self, final_answer: str) -> float | None:
        """End the episode with the model's final answer (if still open); the reward, or None on a system error."""
        if self.observation is not None and not self.observation.done:
            self._act(RewardboxAction(message=final_answer or "(no answer)", end_episode=True))
        return self.reward

    def _note_end(self) -> None:
        observation = self.observation
        if observation.status == "finished":
            self.reward = float(observation.reward)
        elif observation.status == "system_error":
            self.system_error = observation.system_error
            logger.warning(
                "rewardbox episode %s ended with a system error: %s",
                observation.task_uid,
                observation.system_error,
            )


def rewardbox_reward(
    environments: list[RewardboxToolEnv], completions: list[Any], **kwargs: Any
) -> list[float | None]:
    """TRL reward function: end each episode with the completion's final answer; the grader's reward.

    Returns:
        One reward per environment in [0, 1], or None where the episode ended in
        a system error (TRL treats None as "not applicable"; see the docs on
        how TRL aggregates it).
    """
    return [
        env._finish(_final_text(completion)) for env, completion in zip(environments, completions)
    ]


def environment_class(
    base_url: str, tools: list[dict[str, Any]], name: str = "RewardboxTrlEnv"
) -> type:
    """A ``RewardboxToolEnv`` subclass with one typed tool method per OpenAI-format schema in ``tools``.

    Raises:
        ValueError: a tool or argument name is not a Python identifier, or clashes with
            ``reset``/``reply_to_user`` (TRL needs a method per tool).
    """
    namespace: dict[str, Any] = {"base_url": base_url}
    for tool in tools:
        fn = tool["function"]
        if (
            not fn["name"].isidentifier()
            or keyword.iskeyword(fn["name"])
            or fn["name"] in ("reset", "reply_to_user")
        ):
            raise ValueError(
                f"tool name {fn['name']!r} cannot be a method of a TRL environment class"
            )
        namespace[fn["name"]] = _tool_method(
            fn["name"], fn.get("description", ""), fn.get("parameters") or {}
        )
    return type(name, (RewardboxToolEnv,), namespace)


def _tool_method(name: str, description: str, schema: dict[str, Any]) -> Any:
    """A method ``name(self, **arguments) -> str`` whose signature and docstring describe ``schema``."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = [description.strip() or f"Call the {name} tool.", "", "Args:"]
    for arg in sorted(
        properties, key=lambda a: a not in required
    ):  # required first, as Python needs
        if not arg.isidentifier() or keyword.iskeyword(arg):
            raise ValueError(f"argument {arg!r} of tool {name!r} is not a Python identifier")
        spec = properties[arg]
        annotation = _python_type(spec)
        default = inspect.Parameter.empty if arg in required else spec.get("default")
        if arg not in required and default is None:
            annotation = typing.Optional[annotation]  # noqa: UP045 - built at run time from a schema
        annotations[arg] = annotation
        params.append(
            inspect.Parameter(
                arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation
            )
        )
        lines.append(f"    {arg}: {spec.get('description') or arg.replace('_', ' ')}")
    lines += ["", "Returns:", "    The tool's output (JSON text)."]

    def method(self: RewardboxToolEnv, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != "self" and v is not None}
        return self._call_tool(name, arguments)

    signature = inspect.Signature(params, return_annotation=str)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__signature__ = signature
    method.__annotations__ = annotations
    return method


def _python_type(spec: dict[str, Any]) -> Any:
    if "enum" in spec:
        return typing.Literal[tuple(spec["enum"])]
    if spec.get("type") == "array":
        return list[_python_type(spec.get("items") or {})] if spec.get("items") else list
    return _JSON_TYPES.get(spec.get("type"), str)


def _last_content(observation: RewardboxObservation, role: str) -> str:
    for message in reversed(observation.new_messages):
        if message.get("role") == role:
            return str(message.get("content") or "")
    return ""


def _final_text(completion: Any) -> str:
    """The last assistant text of a TRL completion (a string, or a list of messages)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if message.get("role") == "assistant" and str(message.get("content") or "").strip():
            return str(message["content"])
    return ""
