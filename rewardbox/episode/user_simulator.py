"""User simulators: the scripted one (embedded default) and an LLM one.

The LLM simulator follows docs/thinkingbox.md, "User simulator": stateless each turn,
``[system: SYSTEM_PROMPT, user: USER_PROMPT]`` with the visible conversation,
the user context, and the last assistant message; output cleanup strips role
prefixes and quotes, and an empty reply becomes "I don't know.". Its prompt
says plainly that agreeing to an action is not the action being done, so a
user who agrees and stops in the same message still lets the agent act
(see ``split_stop_marker`` and the runner's ``user_finished`` flag).
"""

from __future__ import annotations

import html
import re
from typing import Any, Protocol

from rewardbox.errors import UserSimulatorError, check_reply, reply_cause
from rewardbox.tasks.schema import Task

STOP_MARKER = "<DONE>"

SYSTEM_PROMPT = """You play a customer talking to a support agent. Rules:
- Use only the facts in USER_CONTEXT. Copy names, ids, emails and numbers verbatim from it.
  If you are asked for something that is not there, say "I don't know".
- Answer the agent's last message briefly, in the first person, as the customer. Never act as the agent.
- Agreeing to an action is not the action being done. When you agree ("Yes, please go ahead"),
  the agent still has to do it; do not end the conversation in the same message unless you are sure
  the agent has already reported that it is done.
- When the agent has reported that your request is completed (or that it cannot be done) and nothing
  is left to ask, reply with "Thanks, that solves it. <DONE>".
- Put <DONE> only at the very end of a message, and only to end the conversation."""

USER_PROMPT = """CONVERSATION_HISTORY:
{history}

USER_CONTEXT:
{context}

LAST_ASSISTANT_MESSAGE:
{last}

TASK: Generate the next user message. Output only the message text."""


class UserSimulator(Protocol):
    async def reply(self, task: Task, messages: list[dict[str, Any]], user_turn: int) -> str:
        """The user's next message (may end with ``<DONE>``). Raises EndpointError on faults."""


def split_stop_marker(reply: str) -> tuple[str, bool]:
    """Split a user reply into (text before the stop marker, whether it stopped).

    ``"Yes, please go ahead. <DONE>"`` -> ``("Yes, please go ahead.", True)``:
    the text still reaches the agent, which gets one more turn before the end.
    """
    text = reply.strip()
    if text.endswith(STOP_MARKER):
        return text[: -len(STOP_MARKER)].strip(), True
    return text, False


class ScriptedUser:
    """Answers from the task's ``user_context``; needs no endpoint (embedded default).

    Turn 1 gives the facts of ``user_context`` the user may share (see
    ``shareable_facts``), turn 2 agrees to proceed, turn 3 and later end the
    conversation with a bare ``<DONE>``. Deterministic; the agent must do the
    work from the facts.
    """

    async def reply(self, task: Task, messages: list[dict[str, Any]], user_turn: int) -> str:
        if user_turn == 1:
            return shareable_facts(task.user_context) or "I don't know."
        if user_turn == 2:
            return "Yes, please go ahead."
        return STOP_MARKER


def shareable_facts(user_context: str) -> str:
    """The ``Key: value`` facts of a user context that the user would say unprompted, as one message.

    Kept: ``Key: value`` lines. Dropped: lines that are instructions to the
    simulator rather than facts (no ``Key:`` form, e.g. "You are ...", "If the
    agent says ..."), rule headers, ``Agrees to proceed``, and facts marked
    ``(give it only if asked)``. A context with no ``Key: value`` line at all
    (free prose) is given whole, minus rule headers. The raw context once reached the agent whole,
    and SmolLM2-135M then copied "CUS-2009 (give it only if needed)" into an
    order id.
    """
    lines = [ln.strip(" -\t") for ln in user_context.splitlines()]
    lines = [ln for ln in lines if ln and not ln.lower().startswith("rules")]
    facts = []
    for line in lines:
        key, sep, value = line.partition(":")
        if (
            not sep or not value.strip() or len(key.split()) > 3
        ):  # not a fact: an instruction with a colon
            continue
        if key.lower().startswith("agrees") or "only if asked" in value:
            continue
        facts.append(line.rstrip(".") + ".")
    return " ".join(facts or lines)


def render_history(messages: list[dict[str, Any]]) -> str:
    """Visible user/assistant texts only, as ``User: ...`` / ``Assistant: ...``
    (docs/thinkingbox.md, "User simulator")."""
    out = []
    for m in messages:
        if m.get("role") not in ("user", "assistant") or not m.get("content"):
            continue
        who = "User" if m["role"] == "user" else "Assistant"
        out.append(f"{who}: {_escape(m['content'])}")
    return "\n".join(out)


def _escape(text: str) -> str:
    return html.escape(text.replace(STOP_MARKER, "[done]"), quote=False)


_ROLE_PREFIX = re.compile(r"^\s*(user|customer)\s*:\s*", re.IGNORECASE)


def clean_reply(text: str) -> str:
    """Strip role prefixes and surrounding quotes; empty becomes "I don't know."."""
    text = _ROLE_PREFIX.sub("", (text or "").strip())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text or "I don't know."


class EndpointUser:
    """A user simulator backed by any OpenAI-compatible chat endpoint.

    Args:
        base_url, model: the endpoint. api_key_env: env var holding the key.
        temperature: sampling temperature (ThinkingBox example config: 0.3).
        timeout_s, max_retries: per request; 429/5xx/timeouts retried by the client.

    Raises:
        UserSimulatorError: the endpoint failed after its retries (a system error; kind
            ``user_simulator_<cause>``, e.g. ``user_simulator_http_429``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.3,
        timeout_s: float = 60.0,
        max_retries: int = 5,
    ) -> None:
        import os

        from openai import AsyncOpenAI

        self.model = model
        self.temperature = temperature
        self.base_url = base_url
        self._client = AsyncOpenAI(
            base_url=base_url,
            api_key=os.environ.get(api_key_env, "EMPTY"),
            timeout=timeout_s,
            max_retries=max_retries,
        )

    async def reply(self, task: Task, messages: list[dict[str, Any]], user_turn: int) -> str:
        last = next(
            (
                m["content"]
                for m in reversed(messages)
                if m.get("role") == "assistant" and m.get("content")
            ),
            "",
        )
        prompt = USER_PROMPT.format(
            history=render_history(messages),
            context=task.user_context or "(none)",
            last=_escape(last),
        )
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                temperature=self.temperature,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": prompt},
                ],
            )
            check_reply(
                response
            )  # a reply that is not a chat completion: malformed_reply, never a crash
        except Exception as exc:  # the openai client already retried 429/5xx/timeouts
            raise UserSimulatorError(
                f"user simulator endpoint {self.base_url} ({self.model}) failed: "
                f"{type(exc).__name__}: {exc}",
                cause=reply_cause(exc),
            ) from exc
        return clean_reply(response.choices[0].message.content or "")
