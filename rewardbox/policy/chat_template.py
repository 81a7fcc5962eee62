"""The tool-calling chat template shared by prompting, training and saved checkpoints.

SmolLM2-135M-Instruct's own template knows no tools. ``chat_template.jinja``
(next to this module) is the one source: ``render_prompt`` renders it with
transformers' own Jinja renderer (the code behind
``tokenizer.apply_chat_template``), and ``convert_gguf_to_safetensors`` stores
the same text as the checkpoint's chat template, so a vLLM server started on a
merged checkpoint builds the very same prompts.

Layout (ChatML, as SmolLM2 uses it)::

    <|im_start|>system
    {system messages, joined}

    # Tools
    {one compact JSON object per tool}
    Tool names: {names}.
    {how to write <tool_call>{"name": ..., "arguments": {...}}</tool_call>}<|im_end|>
    {one worked example: user ask -> call to pause_subscription -> <result> -> plain answer}
    {the conversation; tool results as user turns of <result>...</result> blocks}
    <|im_start|>assistant

Why ``<result>`` and not Hermes' ``<tool_response>`` (measured on the embedded
SmolLM2-135M, three support asks, 48 new tokens, full-distribution sampling):
with ``<tool_response>`` the model opens its reply by copying
``<tool_response>`` (greedy: 0/3 replies try a call; temperature 0.7: 0/9),
because after ``<tool_`` it continues with the more recent tag. With ``<result>``
and this template: greedy 3/3 replies are well-formed ``<tool_call>`` JSON (1/3
names a real tool); temperature 0.7: 6/9 open a call; 1.0: 4/18. Without the
worked example: 0/9.

Why the example's answer has no ``<DONE>`` (the agent's own instructions still
describe the marker): with it, the model copies the marker as its whole first
reply. "Hi, please cancel my order 6021." at temperature 0.7, 16 samples, with
tool names guided (``guided.py``): example ending in ``<DONE>``: 10/16 replies
are a bare ``<DONE>``, 6/16 the right call; without it: 16/16 the right call.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from rewardbox import strict_json
from rewardbox.policy.base import Interpretation, ToolCall, ToolCallError
from rewardbox.sandbox.base import ToolSpec

TEMPLATE_FILE = "chat_template.jinja"
EXAMPLE_TOOL_NAME = "pause_subscription"
TURN_START = "<|im_start|>"
#: The token that closes every turn (ChatML); a sampled turn that ends with it stopped on its own.
END_OF_TURN = "<|im_end|>"


class ChatTemplateError(ValueError):
    """A message the template cannot render faithfully (bad input, never rendered half-way).

    Attributes:
        message_index: index of the offending message in the list given.
        call_index: index of the offending tool call in that message.
    """

    def __init__(self, message_index: int, call_index: int, reason: str):
        self.message_index = message_index
        self.call_index = call_index
        super().__init__(f"message {message_index}, tool call {call_index}: {reason}")


@functools.cache
def chat_template() -> str:
    """The Jinja chat template text (the file shipped in this package)."""
    return resources.files("rewardbox.policy").joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")


def render_prompt(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[ToolSpec | dict[str, Any]] | None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """Render a conversation into the prompt text the local model continues.

    Deterministic: the same messages and tools always give the same string,
    equal to ``tokenizer.apply_chat_template(messages, tools=..., tokenize=False)``
    on a checkpoint written by ``convert_gguf_to_safetensors``.

    Args:
        messages: OpenAI-format history (``system``/``user``/``assistant``/``tool``);
            assistant ``tool_calls[].function.arguments`` may be a dict or a JSON
            string (decoded here so it is rendered once, as an object).
        tools: ``ToolSpec`` objects or OpenAI ``{type: function, function}`` dicts;
            None or empty renders no tool section and no worked example.
        add_generation_prompt: end with the opened assistant turn.

    Returns:
        The prompt text, special tokens written out (tokenise it with
        ``add_special_tokens=False``).

    Raises:
        ChatTemplateError: an assistant tool call's arguments are not a JSON object
            (see ``normalise_messages``); the message names the message index.
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    tool_dicts = [_tool_dict(t) for t in tools] if tools else None
    rendered, _ = render_jinja_template(
        conversations=[normalise_messages(messages)],
        tools=tool_dicts,
        chat_template=chat_template(),
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]


def normalise_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy ``messages`` with every tool call's arguments as a JSON object (a dict).

    A string holding a JSON object becomes that object, so it is rendered once
    and never double-encoded. A call written back verbatim (``raw``, a malformed
    call the model produced) is left as it is.

    Raises:
        ChatTemplateError: arguments that are an empty string, malformed JSON, JSON
            other than an object, or neither a string nor a mapping. Rendering them
            would put broken JSON into the prompt; the error names the message and
            call index. Bad input: the caller's history is wrong, nothing is rendered.
    """
    out = copy.deepcopy(list(messages))
    for message_index, message in enumerate(out):
        for call_index, call in enumerate(message.get("tool_calls") or []):
            if call.get("raw") is not None:
                continue
            fn = call.get("function", call)
            if "arguments" in fn:
                fn["arguments"] = _arguments_object(
                    fn["arguments"], message_index, call_index, fn.get("name")
                )
    return out


def _arguments_object(args: Any, message_index: int, call_index: int, name: Any) -> dict[str, Any]:
    """The arguments of one call as a dict, or ``ChatTemplateError``."""
    where = f"arguments of {name!r}"
    if isinstance(args, dict):
        return args
    if not isinstance(args, str):
        raise ChatTemplateError(
            message_index,
            call_index,
            f"{where} must be a JSON object or a string holding one, got {type(args).__name__}",
        )
    if not args.strip():
        raise ChatTemplateError(
            message_index,
            call_index,
            f"{where} are an empty string; write '{{}}' for a call without arguments",
        )
    try:
        decoded = strict_json.loads(args)
    except ValueError as exc:
        raise ChatTemplateError(
            message_index, call_index, f"{where} are not valid JSON ({exc}): {args[:120]!r}"
        ) from exc
    if not isinstance(decoded, dict):
        raise ChatTemplateError(
            message_index,
            call_index,
            f"{where} must be a JSON object, got {type(decoded).__name__}: {args[:120]!r}",
        )
    return decoded


def prompt_opens_reasoning(prompt: str) -> bool:
    """True when the prompt's last turn (the generation prompt) opened ``<think>`` and did not close it.

    This is the ``reasoning_open`` state the interpreter needs. Only the text of
    the last ChatML turn counts (after the last ``<|im_start|>`` and its role
    line), so a user who typed ``<think>`` earlier does not open anything.
    rewardbox's own template never opens reasoning: False for its prompts.
    """
    start = prompt.rfind(TURN_START)
    tail = prompt if start < 0 else prompt[start + len(TURN_START) :].partition("\n")[2]
    tail = tail.lstrip()
    return tail.startswith("<think>") and "</think>" not in tail


def _tool_dict(tool: ToolSpec | dict[str, Any]) -> dict[str, Any]:
    if isinstance(tool, ToolSpec):
        return tool.to_openai()
    return dict(tool)


def assistant_message(interpretation: Interpretation) -> dict[str, Any]:
    """The history entry for one interpreted completion (OpenAI format).

    ``content`` is the visible text; ``tool_calls`` lists well-formed calls
    (``arguments`` a dict) and malformed ones (``raw`` holds the body the model
    wrote, rendered back verbatim) in the order the model wrote them.
    Reasoning is kept under ``reasoning_content`` and never rendered.
    """
    by_id: dict[str, ToolCall | ToolCallError] = {c.id: c for c in interpretation.tool_calls}
    by_id.update({e.id: e for e in interpretation.errors})
    order = [i for i in interpretation.call_order if i in by_id] or list(by_id)
    message: dict[str, Any] = {"role": "assistant", "content": interpretation.content}
    if interpretation.reasoning:
        message["reasoning_content"] = interpretation.reasoning
    if order:
        message["tool_calls"] = [_history_call(by_id[i]) for i in order]
    return message


def _history_call(call: ToolCall | ToolCallError) -> dict[str, Any]:
    if isinstance(call, ToolCall):
        return {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": dict(call.arguments)},
        }
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name or "", "arguments": {}},
        "raw": call.raw,
    }
