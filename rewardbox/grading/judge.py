"""The yes/no LLM judge that test code calls as ``judge`` (docs/thinkingbox.md, "Test code").

``Judge.text_yesno(text, question)`` asks an OpenAI-compatible chat endpoint
whether ``text`` satisfies ``question`` and parses a single-word Yes/No reply.
Any endpoint fault (connection, 4xx/5xx after the client's retries, an empty
reply) raises :class:`JudgeException`, which the test runner reports as a test
**system error**; it is never a silent pass or fail. With no judge configured
(the embedded default), calling the judge is a JudgeException too.

The config travels to grading workers as a plain dict (:meth:`JudgeConfig.to_dict`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from rewardbox.errors import EndpointError, check_reply, reply_cause

SYSTEM_TEXT_YESNO = (
    "You grade one message. The message is given between <message> and </message>; "
    "a question about it follows.\n"
    "Read the message, then answer the question with a single word: Yes or No."
)
USER_TEXT_YESNO = "<message>\n{message}\n</message>\n{question}"
SYSTEM_YESNO = "You are a judge. Answer the question with a single word: Yes or No."
SYSTEM_COMPARE_YESNO = (
    "You grade two messages, given between <first> and </first> and between <second> and </second>; "
    "a question about them follows.\n"
    "Read both, then answer the question with a single word: Yes or No."
)
USER_COMPARE_YESNO = "<first>\n{first}\n</first>\n<second>\n{second}\n</second>\n{question}"
QUESTION_REPEATS = "Does the first message repeat what the second message says?"
SYSTEM_TEXT_YESNO_MOTIVATION = (
    SYSTEM_TEXT_YESNO.rsplit("\n", 1)[0] + "\n"
    'Reply with one JSON object: {"motivation": "<one or two sentences>", "answer": "Yes" or "No"}.'
)

_PUNCTUATION = str.maketrans({c: " " for c in ".,;:\n"})


class JudgeException(EndpointError):
    """The judge could not give a verdict (a system error, never a reward of 0)."""

    kind = "judge"


@dataclass(frozen=True)
class JudgeConfig:
    """Where the judge runs and how it samples (defaults after ThinkingBox's
    ``config_o4mini.yaml`` judge: temperature 0, seed 42, 128 tokens).

    Attributes:
        base_url: OpenAI-compatible API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name sent as ``model``.
        api_key_env: name of the environment variable holding the API key
            (the key itself never enters a config or a log); unset -> ``"EMPTY"``.
        temperature, seed, max_tokens: sampling settings.
        timeout_s: per-request timeout in seconds.
        max_retries: retries of the OpenAI client (429, 5xx, connection errors).
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    seed: int | None = 42
    max_tokens: int = 128
    timeout_s: float = 60.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.base_url or not self.model:
            raise ValueError(
                "JudgeConfig needs base_url and model (e.g. http://127.0.0.1:8000/v1, a model name)"
            )
        if self.max_tokens < 1 or self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError(
                "JudgeConfig: max_tokens >= 1, timeout_s > 0 and max_retries >= 0 are required"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_value(cls, value: JudgeConfig | dict[str, Any] | None) -> JudgeConfig | None:
        """Accept a JudgeConfig, its dict form, or None (no judge)."""
        if value is None or isinstance(value, JudgeConfig):
            return value
        return cls(**value)


def escape_tags(text: str) -> str:
    """HTML-escape ``<`` and ``>`` so the text cannot close the ``<message>`` tag."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def parse_yesno(reply: str) -> bool:
    """True iff the first or last word of ``reply`` is "yes" (case-insensitive).

    ``.,;:`` and newlines count as spaces, so "Yes." and "... the answer is: yes"
    are yes; "No", "Yes and no, mostly no" are no (ThinkingBox ``_parse_yesno``).
    """
    tokens = reply.translate(_PUNCTUATION).split()
    return bool(tokens) and (tokens[0].lower() == "yes" or tokens[-1].lower() == "yes")


_CLIENTS: dict[JudgeConfig, Any] = {}


def _client(config: JudgeConfig) -> Any:
    """One OpenAI client per config per process (workers reuse it across tests)."""
    if config not in _CLIENTS:
        from openai import OpenAI  # imported lazily: most tests never call the judge

        _CLIENTS[config] = OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "EMPTY",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )
    return _CLIENTS[config]


class Judge:
    """The ``judge`` fixture. Records every decision for the test outcome's metadata."""

    def __init__(self, config: JudgeConfig | dict[str, Any] | None = None):
        self.config = JudgeConfig.from_value(config)
        self.decisions: list[dict[str, Any]] = []

    def complete(self, system: str, user: str) -> str:
        """One chat completion; returns the reply text.

        Raises:
            JudgeException: no judge configured, an endpoint error after the
                client's retries, or an empty reply.
        """
        if self.config is None:
            raise JudgeException(
                "this test calls the judge but no judge endpoint is configured (judge_config)",
                permanent=True,
            )
        body = {
            "model": self.config.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": self.config.temperature,
            "max_completion_tokens": self.config.max_tokens,
        }
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        try:
            response = _client(self.config).chat.completions.create(**body)
            check_reply(response)
            reply = response.choices[0].message.content or ""
        except Exception as exc:  # the SDK's errors, bad JSON (cause malformed_reply), no choices
            raise JudgeException(
                f"judge endpoint {self.config.base_url} failed: {type(exc).__name__}: {exc}",
                cause=reply_cause(exc),
            ) from exc
        if not reply.strip():
            raise JudgeException(f"judge endpoint {self.config.base_url} returned an empty reply")
        return reply

    def text_yesno(self, text: str, question: str) -> bool:
        """Does ``text`` (e.g. ``x.response``) satisfy the yes/no ``question``?

        Raises:
            JudgeException: see :meth:`complete` (a test system error).
        """
        user = USER_TEXT_YESNO.format(message=escape_tags(text), question=question)
        reply = self.complete(SYSTEM_TEXT_YESNO, user)
        answer = parse_yesno(reply)
        self.decisions.append({"question": question, "answer": answer, "reply": reply})
        return answer

    def yesno(self, question: str) -> bool:
        """A bare yes/no question (no message)."""
        reply = self.complete(SYSTEM_YESNO, question)
        answer = parse_yesno(reply)
        self.decisions.append({"question": question, "answer": answer, "reply": reply})
        return answer

    def evaluate_bool(self, system: str, user: str) -> bool:
        """Yes/no verdict for the caller's own prompts (used by the rubric judge).

        Raises:
            JudgeException: see :meth:`complete`.
        """
        reply = self.complete(system, user)
        answer = parse_yesno(reply)
        self.decisions.append({"question": user[-300:], "answer": answer, "reply": reply})
        return answer

    def compare_yesno(self, first: str, second: str, question: str) -> bool:
        """A yes/no ``question`` about two texts (both tag-escaped).

        Raises:
            JudgeException: see :meth:`complete`.
        """
        user = USER_COMPARE_YESNO.format(
            first=escape_tags(first), second=escape_tags(second), question=question
        )
        reply = self.complete(SYSTEM_COMPARE_YESNO, user)
        answer = parse_yesno(reply)
        self.decisions.append({"question": question, "answer": answer, "reply": reply})
        return answer

    def no_repeat(self, first: str, second_list: list[str]) -> bool:
        """True when ``first`` repeats none of ``second_list`` (one comparison each, stops at the first repeat).

        Raises:
            JudgeException: see :meth:`complete`.
        """
        return not any(
            self.compare_yesno(first, second, QUESTION_REPEATS) for second in second_list
        )

    def text_yesno_with_motivation(self, text: str, question: str) -> dict[str, Any]:
        """``{"answer": bool, "motivation": str}``; a reply that is not JSON reads as No.

        Raises:
            JudgeException: see :meth:`complete`.
        """
        user = USER_TEXT_YESNO.format(message=escape_tags(text), question=question)
        reply = self.complete(SYSTEM_TEXT_YESNO_MOTIVATION, user)
        try:
            parsed = json.loads(reply[reply.index("{") : reply.rindex("}") + 1])
            out = {
                "answer": parse_yesno(str(parsed.get("answer", ""))),
                "motivation": str(parsed.get("motivation", "")),
            }
        except (ValueError, AttributeError):
            out = {
                "answer": False,
                "motivation": "the judge's reply is not the JSON object asked for",
            }
        self.decisions.append({"question": question, **out, "reply": reply})
        return out

    def drain_decisions(self) -> list[dict[str, Any]]:
        """The decisions so far; the list is emptied."""
        out, self.decisions = self.decisions, []
        return out
