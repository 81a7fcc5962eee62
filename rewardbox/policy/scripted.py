"""Scripted policies: the golden replay (oracle) and the null agent.

Both write raw text and pass it through ``interpret`` exactly like a model, so
the oracle test (golden replay passes, doing nothing fails where a write is
expected; docs/method.md, "Conventions") exercises the same parsing path as real episodes.
"""

from __future__ import annotations

from typing import Any

from rewardbox import strict_json
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.interpreter import CALL_CLOSE, CALL_OPEN, interpret

NULL_ANSWER = "I cannot help with that. <DONE>"
DONE_ANSWER = "All done."


def _estimate(request: ChatRequest, raw_text: str) -> dict[str, Any]:
    """A rough size estimate (characters / 4); token counts stay 0 (no model ran)."""
    prompt_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    return {
        "scripted": True,
        "estimated_input_tokens": prompt_chars // 4,
        "estimated_output_tokens": len(raw_text) // 4,
    }


def _complete(request: ChatRequest, raw_text: str) -> Completion:
    return Completion(
        raw_text=raw_text,
        interpretation=interpret(
            raw_text, request.tools, reasoning_open=False
        ),  # scripted text opens no reasoning
        finish_reason="stop",
        extra=_estimate(request, raw_text),
    )


class GoldenReplayPolicy:
    """Replays the task's reference actions, one call per turn, then answers.

    The number of calls already made is the number of ``tool`` messages in the
    history; the next golden call is written as Hermes text. When all are done,
    the answer names every value in ``task.metadata["response_values"]`` (or, for
    tasks loaded from a dataset, which carry none, quotes the golden calls' tool
    outputs, where a value the user must be told comes from) and ends with ``<DONE>``. A task without golden interactions gets the answer at once.
    """

    name = "golden"

    async def complete(self, request: ChatRequest) -> Completion:
        """Next golden step. Raises ValueError when the request carries no task."""
        return _complete(request, self.next_text(request))

    def next_text(self, request: ChatRequest) -> str:
        """The raw text this policy writes for ``request``."""
        task = request.task
        if task is None:
            raise ValueError("GoldenReplayPolicy needs ChatRequest.task (the task being run)")
        golden = task.golden_interactions()
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done < len(golden):
            _server, tool, parameters = golden[done]
            body = strict_json.dumps({"name": tool, "arguments": parameters}, ensure_ascii=False)
            return f"{CALL_OPEN}{body}{CALL_CLOSE}"
        values = [
            str(v) for v in (getattr(task, "metadata", None) or {}).get("response_values", [])
        ]
        if not values:  # tasks loaded from a dataset: report what the golden calls returned
            values = [
                f"Results: {m.get('content')}" for m in request.messages if m.get("role") == "tool"
            ]
        told = (" " + " ".join(values)) if values else ""
        return f"{DONE_ANSWER}{told} <DONE>"

    async def aclose(self) -> None:
        return None


class NullPolicy:
    """Does nothing: answers ``I cannot help with that. <DONE>`` with no calls."""

    name = "null"

    async def complete(self, request: ChatRequest) -> Completion:
        return _complete(request, NULL_ANSWER)

    async def aclose(self) -> None:
        return None


class ScriptedMixPolicy:
    """Per episode, the golden replay with probability ``golden_frac``, else the null policy.

    For tests and CI: it gives tasks a spread of outcomes (so difficulty bands,
    the training pool and zero-variance filtering all have something to do)
    without a model. The choice is a pure function of (task uid, request seed),
    so one episode never mixes the two, and trial t of a task is reproducible.
    """

    def __init__(self, golden_frac: float = 0.5) -> None:
        if not 0.0 <= golden_frac <= 1.0:
            raise ValueError(f"golden_frac must be in [0, 1], got {golden_frac}")
        self.golden_frac = golden_frac
        self.name = f"scripted-mix-{golden_frac:g}"
        self._golden, self._null = GoldenReplayPolicy(), NullPolicy()

    def picks_golden(self, uid: str, seed: int | None) -> bool:
        import hashlib

        digest = hashlib.sha256(f"{uid}#{seed}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.golden_frac

    async def complete(self, request: ChatRequest) -> Completion:
        uid = getattr(request.task, "uid", "")
        chosen = self._golden if self.picks_golden(uid, request.seed) else self._null
        return await chosen.complete(request)

    async def aclose(self) -> None:
        return None
