"""Parser parity: the training path and the evaluation path read the same raw completion the same way.

A recorded raw completion is read by every path that turns model text into tool calls, and the well-formed
calls (tool name + typed arguments, in order) and the number of malformed calls must agree:

* ``training``: ``interpret`` on the raw text, as the local GRPO rollouts (``LocalPolicy``), the envserver's
  ``completion_from_text`` and the verl agent loop read it.
* ``endpoint_text``: the endpoint policy (``endpoint.combine``) when the server returns the text as
  ``content`` (no server-side tool parser).
* ``endpoint_hermes``: the endpoint policy behind ``vllm serve --tool-call-parser hermes``: the server splits
  the calls out as structured ``tool_calls`` (replayed here as vLLM's ``Hermes2ProToolParser.extract_tool_calls``
  does it: regex ``<tool_call>(.*?)</tool_call>|<tool_call>(.*)``, ``json.loads`` of each body, ``name`` and
  ``arguments`` required, any failure leaves the whole text as content; content is the text before the
  first ``<tool_call>``), and ``combine`` types them with ``type_tool_call``. With a reasoning parser the
  leading ``<think>`` block is split out first; without one the tool parser also sees the reasoning.
* ``replay``: ``interpret`` on the raw text the endpoint path records (what GRPO trains on when rollouts come
  from an endpoint).
* ``executed``: the calls the run itself dispatched (from its messages), when recorded.

Call ids and error messages are not compared: ids are per path, and a malformed call is a policy failure on
every path (its message may differ, its count may not).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from openai.types.chat import ChatCompletionMessage

from rewardbox import strict_json
from rewardbox.policy.base import Interpretation
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.endpoint_wire import combine
from rewardbox.policy.interpreter import interpret, split_reasoning
from rewardbox.policy.serving_config import HERMES_PARSER, ServingConfig
from rewardbox.sandbox.base import ToolSpec


class RecordedTurn(Protocol):
    """What the recorder reads of one agent turn (``rewardbox.episode.trajectory.AgentTurn`` has it)."""

    raw_text: str
    finish_reason: str


class RecordedEpisode(Protocol):
    """What the recorder reads of one episode (``rewardbox.episode.trajectory.EpisodeResult`` has it).

    The episode layer sits above ``policy``, so the type is named by what is read, not imported.
    """

    uid: str
    trial: int
    tools: Sequence[ToolSpec]
    messages: Sequence[dict[str, Any]]
    agent_turns: Sequence[RecordedTurn]
    system_error: Any


CORPUS_FILE = "parity_corpus.json"
_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
Reading = tuple[
    tuple[tuple[str, str], ...], int
]  # ((name, canonical arguments JSON), ...), malformed count


@dataclass(frozen=True)
class RecordedCompletion:
    """One raw completion with what it was read against.

    Attributes:
        source: where it comes from (``corpus:<name>`` or ``<uid>/<trial>/<turn>``).
        raw_text: the completion exactly as recorded (``AgentTurn.raw_text``).
        tools: the tools of its request (arguments are typed from their schemas).
        finish_reason: ``stop`` or ``length``.
        reasoning_open: the prompt had opened ``<think>`` (False for our template).
        executed: the run's own calls, ``(name, arguments)`` of well-formed ones, and the malformed count;
            None when not recorded.
    """

    source: str
    raw_text: str
    tools: tuple[ToolSpec, ...]
    finish_reason: str = "stop"
    reasoning_open: bool = False
    executed: Reading | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the corpus and recorded-file format); ``from_json`` reads it back."""
        out: dict[str, Any] = {
            "source": self.source,
            "raw_text": self.raw_text,
            "finish_reason": self.finish_reason,
            "reasoning_open": self.reasoning_open,
            "tools": [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in self.tools
            ],
        }
        if self.executed is not None:
            out["executed"] = {
                "calls": [list(c) for c in self.executed[0]],
                "malformed": self.executed[1],
            }
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordedCompletion:
        """Raises KeyError / TypeError on a malformed entry (a bad corpus file is a config error)."""
        executed = data.get("executed")
        return cls(
            source=str(data["source"]),
            raw_text=str(data["raw_text"]),
            tools=tuple(
                ToolSpec(
                    t["name"], t.get("description", ""), t.get("input_schema") or {"type": "object"}
                )
                for t in data["tools"]
            ),
            finish_reason=data.get("finish_reason", "stop"),
            reasoning_open=bool(data.get("reasoning_open", False)),
            executed=None
            if executed is None
            else (tuple(tuple(c) for c in executed["calls"]), int(executed["malformed"])),
        )


@dataclass
class ParityReport:
    """The outcome over a set of recorded completions.

    Attributes:
        checked: completions read.
        paths: the path names compared (``training`` is the reference).
        mismatches: one dict per disagreement: source, path, the training reading and the path's reading.
    """

    checked: int = 0
    paths: tuple[str, ...] = ()
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.mismatches


def reading(interpretation: Interpretation) -> Reading:
    """The comparable part of an interpretation: well-formed calls in order, and the malformed count."""
    calls = tuple((c.name, _canonical(c.arguments)) for c in interpretation.tool_calls)
    return calls, len(interpretation.errors)


def read_training(rec: RecordedCompletion) -> Reading:
    """The training path's reading (``interpret``)."""
    return reading(
        interpret(
            rec.raw_text,
            rec.tools,
            finish_reason=rec.finish_reason,
            reasoning_open=rec.reasoning_open,
        )
    )


def read_endpoint_text(rec: RecordedCompletion) -> Reading:
    """The endpoint policy's reading when the server returns the whole text as ``content``."""
    interpretation, _ = combine(
        rec.raw_text, "", [], list(rec.tools), rec.finish_reason, reasoning_open=rec.reasoning_open
    )
    return reading(interpretation)


def served_hermes(rec: RecordedCompletion, *, reasoning_parser: bool) -> tuple[Interpretation, str]:
    """The endpoint policy's interpretation and recorded raw text behind vLLM's hermes tool parser."""
    reasoning, text = "", rec.raw_text
    if reasoning_parser:
        reasoning, text, closed = split_reasoning(rec.raw_text, reasoning_open=rec.reasoning_open)
        if not closed:
            reasoning, text = (
                "",
                rec.raw_text,
            )  # no closed block: the parser leaves the text as content
    content, calls = hermes_extract(text)
    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": f"chatcmpl-tool-{i}",
                    "type": "function",
                    "function": {"name": n, "arguments": a},
                }
                for i, (n, a) in enumerate(calls)
            ]
            or None,
        }
    )
    return combine(
        message.content or "",
        reasoning,
        list(message.tool_calls or []),
        list(rec.tools),
        rec.finish_reason,
        reasoning_open=rec.reasoning_open and not reasoning_parser,
    )


def hermes_extract(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """What vLLM's hermes tool parser returns for ``text``: ``(content, [(name, arguments JSON)])``.

    Follows ``vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py`` (non-streaming path); any body that
    fails to load, or lacks ``name`` or ``arguments``, leaves no calls and the whole text as content.
    """
    if "<tool_call>" not in text:
        return text, []
    try:
        bodies = [json.loads(a or b) for a, b in _HERMES_CALL.findall(text)]
        calls = [
            (body["name"], strict_json.dumps(body["arguments"], ensure_ascii=False))
            for body in bodies
        ]
    except Exception:  # noqa: BLE001 - vLLM catches every error here the same way
        return text, []
    return text[: text.find("<tool_call>")] or None, calls


def read_paths(
    rec: RecordedCompletion, *, hermes: bool, reasoning_parser: bool
) -> dict[str, Reading]:
    """Every path's reading of ``rec`` (``training`` first); ``endpoint_hermes`` and ``replay`` need ``hermes``."""
    out = {"training": read_training(rec), "endpoint_text": read_endpoint_text(rec)}
    if hermes:
        interpretation, raw_text = served_hermes(rec, reasoning_parser=reasoning_parser)
        out["endpoint_hermes"] = reading(interpretation)
        out["replay"] = reading(
            interpret(raw_text, rec.tools, finish_reason=rec.finish_reason, reasoning_open=False)
        )
    if rec.executed is not None:
        out["executed"] = rec.executed
    return out


def check_parity(
    records: Iterable[RecordedCompletion], *, hermes: bool = True, reasoning_parser: bool = False
) -> ParityReport:
    """Read every record on every path and list where a path disagrees with the training path.

    Args:
        records: recorded completions (a corpus, a run's recording).
        hermes: include the vLLM hermes-parser path and its replay (a served checkpoint or an endpoint).
        reasoning_parser: the server splits reasoning out before its tool parser (``serving.reasoning_parser``).

    Returns:
        A ``ParityReport``; ``passed`` is False when any path read any record differently.
    """
    report = ParityReport()
    for rec in records:
        readings = read_paths(rec, hermes=hermes, reasoning_parser=reasoning_parser)
        report.checked += 1
        report.paths = tuple(dict.fromkeys(report.paths + tuple(readings)))
        reference = readings["training"]
        for path, value in readings.items():
            if value != reference:
                report.mismatches.append(
                    {
                        "source": rec.source,
                        "path": path,
                        "raw_text": rec.raw_text[:300],
                        "training": _show(reference),
                        path: _show(value),
                    }
                )
    return report


def shipped_corpus() -> list[RecordedCompletion]:
    """The corpus shipped with the package (``policy/parity_corpus.json``): edge cases of the call format."""
    text = resources.files("rewardbox.policy").joinpath(CORPUS_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    return [
        RecordedCompletion.from_json({"tools": data["tools"], **entry})
        for entry in data["completions"]
    ]


def recorded_turns(result: RecordedEpisode, limit: int | None = None) -> list[RecordedCompletion]:
    """The agent turns of one episode as recorded completions, with the calls the run executed.

    Turn ``i`` is the ``i``-th assistant message (as ``training.local.chat_tokenizer`` pairs them); a turn whose
    message is missing is recorded without ``executed``. The prompt never opened reasoning (our template).
    """
    messages = [m for m in result.messages if m.get("role") == "assistant"]
    out = []
    for index, turn in enumerate(result.agent_turns[:limit]):
        executed = _executed(messages[index]) if index < len(messages) else None
        out.append(
            RecordedCompletion(
                f"{result.uid}/{result.trial}/{index}",
                turn.raw_text,
                tuple(result.tools),
                turn.finish_reason,
                False,
                executed,
            )
        )
    return out


class ParityRecorder:
    """Keeps up to ``limit`` agent turns of a campaign (those with call markup first) for the parity check.

    ``record`` is an ``on_result`` hook of ``run_trials``; ``write`` stores them as JSON.
    """

    def __init__(self, limit: int = 256):
        self.limit = limit
        self.with_calls: list[RecordedCompletion] = []
        self.without_calls: list[RecordedCompletion] = []

    def record(self, result: RecordedEpisode) -> None:
        if result.system_error is not None:
            return
        for rec in recorded_turns(result):
            bucket = self.with_calls if "<tool_call>" in rec.raw_text else self.without_calls
            if len(bucket) < self.limit:
                bucket.append(rec)

    @property
    def records(self) -> list[RecordedCompletion]:
        return (self.with_calls + self.without_calls)[: self.limit]

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            strict_json.dumps(
                {"completions": [r.to_json() for r in self.records]}, ensure_ascii=False
            )
        )
        return path


def load_recorded(path: str | Path) -> list[RecordedCompletion]:
    """A file written by ``ParityRecorder.write``; ``[]`` when there is none (a run that recorded nothing)."""
    path = Path(path)
    if not path.exists():
        return []
    return [
        RecordedCompletion.from_json(e)
        for e in json.loads(path.read_text(encoding="utf-8"))["completions"]
    ]


def _executed(message: dict[str, Any]) -> Reading:
    calls = message.get("tool_calls") or []
    good = tuple(
        (c["function"]["name"], _canonical(c["function"]["arguments"]))
        for c in calls
        if "raw" not in c
    )
    return good, sum(1 for c in calls if "raw" in c)


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        arguments = strict_json.loads(arguments)
    return strict_json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _show(value: Reading) -> dict[str, Any]:
    return {
        "calls": [f"{name}({arguments})" for name, arguments in value[0]],
        "malformed": value[1],
    }


def served_paths(serving: ServingConfig, policy: PolicyConfig) -> dict[str, bool]:
    """``check_parity``'s options for a profile: the hermes path where a server parses the calls.

    The hermes path is compared when vLLM serves the checkpoint with the hermes parser, or when the policy is an
    endpoint (any OpenAI-compatible server; vLLM with hermes is the usual one). A local-only profile compares
    the training path with the text endpoint path and with what the run executed.
    """
    served = serving.kind == "vllm" and serving.parser == HERMES_PARSER
    return {
        "hermes": served or policy.kind == "endpoint",
        "reasoning_parser": served and serving.reasoning_parser is not None,
    }
