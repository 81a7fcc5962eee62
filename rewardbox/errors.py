"""Error taxonomy: system errors versus policy failures.

A *system error* is an infrastructure fault (a backend that dies or hangs, an
endpoint that returns 5xx, a grader that crashes). It is never a reward of 0,
never shown to the policy as text, and is retried or refilled by the caller.
A *policy failure* is the agent doing the wrong thing; it is an ordinary
reward of 0 and is not an exception at all.
"""

from __future__ import annotations

import json
from typing import Any


class InfrastructureError(Exception):
    """Base class of every system error. Callers retry or refill; never score.

    Every system error has an ``error_kind``, ``"<component>_<cause>"``, counted per
    kind in a campaign's rows (``system_error_kind``) and metadata. Components:
    ``sandbox``, ``endpoint`` (the policy's model), ``user_simulator``, ``judge``,
    ``grader``. Causes: ``crash`` (a server or worker died), ``timeout``,
    ``http_5xx``, ``http_429``, ``connection``, ``malformed_reply`` (a 2xx reply that is not
    a chat completion), ``error`` (anything else).

    Args:
        message: what failed, for people.
        cause: one of the causes above (default ``error``).
        error_kind: the whole kind, when it is not ``<kind>_<cause>`` (a judge
            timeout surfacing through the grader keeps ``judge_timeout``).
        permanent: a fault that a retry cannot fix (no judge endpoint
            configured, test code that cannot be imported): reported at once,
            not retried. Defaults to the class attribute (False).
    """

    kind: str = "system"
    permanent: bool = False

    def __init__(
        self,
        message: str = "",
        *,
        cause: str = "error",
        error_kind: str | None = None,
        permanent: bool | None = None,
    ):
        super().__init__(message)
        self.cause = cause
        self.error_kind = error_kind or f"{self.kind}_{cause}"
        if permanent is not None:
            self.permanent = permanent


class SandboxError(InfrastructureError):
    """A tool backend failed: spawn, init, crash mid-call, timeout, effects."""

    kind = "sandbox"


class EndpointError(InfrastructureError):
    """A model, user-simulator or judge endpoint failed after its retries."""

    kind = "endpoint"


class UserSimulatorError(EndpointError):
    """The user simulator's endpoint failed after its retries."""

    kind = "user_simulator"


class GraderError(InfrastructureError):
    """The test code could not produce a verdict (crash, timeout, bad effects)."""

    kind = "grader"


def endpoint_cause(exc: BaseException) -> str:
    """The cause of an HTTP client error: ``http_429``, ``http_5xx``, ``timeout``, ``connection`` or ``error``.

    Duck-typed (``status_code``, the class name) so that this module imports no client library;
    works for the ``openai`` SDK's ``RateLimitError``, ``APIStatusError``, ``APITimeoutError`` and
    ``APIConnectionError`` and for ``httpx`` errors.
    """
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "response", None), "status_code", None
    )
    if status == 429:
        return "http_429"
    if isinstance(status, int) and status >= 500:
        return "http_5xx"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, TimeoutError) or any("Timeout" in name for name in names):
        return "timeout"
    if any("Connect" in name for name in names):
        return "connection"
    return "error"


class MalformedReplyError(ValueError):
    """An endpoint answered 2xx with something that is not a chat completion (transient: retried)."""


def check_reply(response: Any) -> None:
    """Raise :class:`MalformedReplyError` unless ``response`` (a chat completion) has a first choice with a message.

    Duck-typed, as :func:`endpoint_cause` is: the policy, the user simulator and the judge call it on the
    ``openai`` SDK's reply inside their error handling, so a bad reply is a system error, never a crash.
    """
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise MalformedReplyError(f"the reply has no choices: {str(response)[:200]}")
    message = getattr(choices[0], "message", None)
    if message is None or not hasattr(message, "content"):
        raise MalformedReplyError(
            f"the reply's first choice has no message: {str(choices[0])[:200]}"
        )


def reply_cause(exc: BaseException) -> str:
    """``malformed_reply`` for a reply that is not JSON or not a chat completion, else :func:`endpoint_cause`."""
    if isinstance(exc, (json.JSONDecodeError, MalformedReplyError)):
        return "malformed_reply"
    return endpoint_cause(exc)


class TaskFormatError(ValueError):
    """A task file is malformed. The message names the file, line and field.

    Loaders collect these per file so the other tasks still load.
    """

    def __init__(self, path: str, message: str, line: int | None = None, field: str | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        detail = f" (field {field!r})" if field else ""
        super().__init__(f"{where}{detail}: {message}")
        self.path = str(path)
        self.line = line
        self.field = field


class TaskSetLoadError(ValueError):
    """A task set failed to load under its load policy (not a system error).

    Raised instead of returning a silently smaller set. ``errors`` holds one
    ``"<file>:<line> (field ...): <message>"`` string per broken file or test.
    """

    def __init__(self, split: str, errors: list[str], reason: str):
        shown = "\n".join(f"  {e}" for e in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(f"{split} task set did not load ({reason}):\n{shown}{more}")
        self.split = split
        self.errors = list(errors)
        self.reason = reason


class ContextLengthError(Exception):
    """The conversation no longer fits the policy's context window.

    Not a system error: the episode grew too long for this policy, which is the
    policy's own limit. The episode ends (``finish_reason == "context_limit"``)
    and is graded on the state it reached.
    """


class LogprobLengthError(ValueError):
    """A sampled turn whose log-probs do not match its tokens one for one (the sampler broke its contract).

    Never repaired (no cut, no padding): the turn's tokens could not be scored against the
    distribution that sampled them. Raised by the token stream a trainer scores
    (``rewardbox.training.verl.tokens``: verl then drops the rollout, as for any rollout that
    raised) and by the local trainer's sample builder (``rewardbox.training.trainer``).

    Attributes:
        uid, trial: the episode; turn: the agent turn, 0-based; tokens, logprobs: both lengths.
    """

    def __init__(
        self, uid: str, trial: int, turn: int, tokens: int, logprobs: int, where: str = ""
    ) -> None:
        self.uid, self.trial, self.turn, self.tokens, self.logprobs = (
            uid,
            trial,
            turn,
            tokens,
            logprobs,
        )
        super().__init__(
            f"{uid} trial {trial} turn {turn}: {logprobs} log-probs for {tokens} tokens"
            + (f" ({where})" if where else "")
        )
