"""Run one task test in this process: fixtures, the reward rule and the located failure.

:func:`evaluate_test_code` is what each grading worker of
:class:`rewardbox.grading.testrunner.TestRunner` calls; the outcome table is in that module's
docstring (docs/thinkingbox.md, "Test code").
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import linecache
import math
import numbers
import traceback
from typing import Any

from rewardbox import strict_json
from rewardbox.errors import InfrastructureError
from rewardbox.grading.context import TestContext, install_thinkingbox_shim
from rewardbox.grading.judge import Judge, JudgeConfig
from rewardbox.grading.outcome import TEST_FN_BINDING, TestOutcome

PERMANENT_EXCEPTIONS = (ImportError, SyntaxError)
"""Test-code faults that a retry cannot fix (besides any exception with ``permanent = True``)."""


def system_error(message: str, kind: str = "grader_error", **fields: Any) -> TestOutcome:
    """A test system error outcome (not scored; the caller retries or refills unless ``permanent``).

    ``kind`` is the system error kind (``grader_crash``, ``grader_timeout``,
    ``judge_timeout``...; see :class:`rewardbox.errors.InfrastructureError`).
    """
    return TestOutcome(
        result=False,
        reward=0.0,
        is_system_error=True,
        message=message,
        system_error_kind=kind,
        **fields,
    )


def is_permanent(exc: BaseException) -> bool:
    """True for a fault a retry cannot fix: an import or syntax error in the test code,
    or an error marked ``permanent`` (e.g. the judge called with no endpoint configured)."""
    return isinstance(exc, PERMANENT_EXCEPTIONS) or bool(getattr(exc, "permanent", False))


def _import_dotted(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    if not module:
        raise ImportError(f"fixture type {path!r} must be a dotted path 'package.module.attr'")
    return getattr(importlib.import_module(module), attr)


def _required_params(fn: Any) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: no injection
        return []
    return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


class _Fixtures:
    """Builds fixtures on demand by name (``x``, ``judge``, then configured ones).

    A configured fixture is ``{type: "pkg.mod.attr", **kwargs}``; its required
    parameters that are not in kwargs are injected by name, recursively. A
    context manager is entered and closed after the test.
    """

    def __init__(
        self, specs: dict[str, dict[str, Any]], runtime: dict[str, Any], stack: contextlib.ExitStack
    ):
        self.specs, self.built, self.stack = specs, dict(runtime), stack
        self.building: set[str] = set()

    def get(self, name: str) -> Any:
        if name in self.built:
            return self.built[name]
        if name not in self.specs:
            raise LookupError(f"test parameter {name!r} is not x, judge or a configured fixture")
        if name in self.building:
            raise RuntimeError(f"fixture dependency cycle at {name!r}")
        self.building.add(name)
        spec = dict(self.specs[name])
        target = _import_dotted(str(spec.pop("type", "")))
        for param in _required_params(target):
            if param.name not in spec and param.default is param.empty:
                spec[param.name] = self.get(param.name)
        value = target(**spec)
        if hasattr(value, "__enter__") and hasattr(value, "__exit__"):
            value = self.stack.enter_context(value)
        self.built[name] = value
        return value

    def kwargs_for(self, fn: Any) -> dict[str, Any]:
        """Keyword arguments for the test function, by parameter name."""
        sig = inspect.signature(fn)
        kwargs = {}
        for param in sig.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                kwargs.update({k: self.built[k] for k in ("x", "judge")})
            elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) and (
                param.name in self.built or param.name in self.specs or param.default is param.empty
            ):
                kwargs[param.name] = self.get(param.name)
        return kwargs


def _reward_outcome(value: Any) -> TestOutcome:
    if value is None:
        return TestOutcome(result=True, reward=1.0)
    if (
        isinstance(value, numbers.Real)
        and math.isfinite(float(value))
        and 0.0 <= float(value) <= 1.0
    ):
        return TestOutcome(result=True, reward=float(value))
    return system_error(f"test returned {value!r}; a reward must be None or a number in [0, 1]")


def _exception_outcome(exc: BaseException, code: str, filename: str) -> TestOutcome:
    """Failure (AssertionError) or system error, located in the test code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lineno = frames[-1].lineno if frames else None
    lines = code.splitlines()
    line_content = lines[lineno - 1] if lineno and lineno <= len(lines) else ""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    fields = {"tb": tb, "lineno": lineno, "line_content": line_content}
    if isinstance(exc, AssertionError):
        message = str(exc) or f"assertion failed: {line_content.strip()}"
        return TestOutcome(result=False, reward=0.0, message=message, **fields)
    kind = exc.error_kind if isinstance(exc, InfrastructureError) else "grader_error"
    return system_error(f"{type(exc).__name__}: {exc}", kind, permanent=is_permanent(exc), **fields)


def _jsonable(value: Any) -> Any:
    return json.loads(strict_json.dumps(value, default=repr))


def evaluate_test_code(
    code: str,
    context: dict[str, Any] | TestContext,
    *,
    judge_config: JudgeConfig | dict[str, Any] | None = None,
    fixtures: dict[str, dict[str, Any]] | None = None,
    uid: str = "",
) -> TestOutcome:
    """Run one test **in this process** (the workers call this). Never raises.

    Installs the ``thinkingbox.common`` shim in this process. No timeout and no
    isolation: prefer :class:`TestRunner` for anything but debugging.

    Args:
        code: test code that binds ``__tb_test_fn`` (``Task.test_code``).
        context: a context payload (dict) or a TestContext.
        judge_config: the judge endpoint, or None (calling the judge is then a system error).
        fixtures: ``Task.fixtures``.
        uid: used in the traceback's file name.
    """
    install_thinkingbox_shim()
    ctx = context if isinstance(context, TestContext) else TestContext.from_dict(context)
    judge = Judge(judge_config)
    filename = f"<test {uid or 'code'}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__tb_test__"}
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(out),
            contextlib.ExitStack() as stack,
        ):
            exec(compile(code, filename, "exec"), namespace, namespace)  # noqa: S102 - task test code
            fn = namespace.get(TEST_FN_BINDING)
            if not callable(fn):
                raise NameError(f"test code does not bind a function to {TEST_FN_BINDING}")
            kwargs = _Fixtures(fixtures or {}, {"x": ctx, "judge": judge}, stack).kwargs_for(fn)
            outcome = _reward_outcome(fn(**kwargs))
    except (Exception, SystemExit) as exc:
        outcome = _exception_outcome(exc, code, filename)
    finally:
        linecache.cache.pop(filename, None)
    outcome.prints = out.getvalue()
    outcome.metadata = _jsonable(
        {**ctx.metadata, **({"judge_decisions": judge.decisions} if judge.decisions else {})}
    )
    return outcome
