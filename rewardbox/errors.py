"""Error taxonomy: system errors versus policy failures.

A *system error* is an infrastructure fault (a backend that dies or hangs, an
endpoint that returns 5xx, a grader that crashes). It is never a reward of 0,
never shown to the policy as text, and is retried or refilled by the caller.
A *policy failure* is the agent doing the wrong thing; it is an ordinary
reward of 0 and is not an exception at all.
"""

from __future__ import annotations


class InfrastructureError(Exception):
    """Base class of every system error. Callers retry or refill; never score."""

    kind: str = "system"


class SandboxError(InfrastructureError):
    """A tool backend failed: spawn, init, crash mid-call, timeout, effects."""

    kind = "sandbox"


class EndpointError(InfrastructureError):
    """A model, user-simulator or judge endpoint failed after its retries."""

    kind = "endpoint"


class GraderError(InfrastructureError):
    """The test code could not produce a verdict (crash, timeout, bad effects)."""

    kind = "grader"


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
