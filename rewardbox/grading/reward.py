"""The reward rule: the one pass/fail rule of both task formats.

Generated test files (``rewardbox/domains/*/dataset/test_case/*.py``) and the
declarative YAML tests (``rewardbox.tasks.yamlfile``) both call these checks;
neither carries a copy. A task passes (reward 1) when every check it calls
passes; a check that fails raises ``AssertionError`` (a policy failure, reward 0).

* **Terminal state** (``validate_database``): for each server checked, the hash
  of the terminal state equals the hash of the golden state
  (``result_db_hash == golden_db_hash``, both from the server's effects,
  docs/thinkingbox.md, "Effects"); a failure lists the first differences of
  ``diff``. A server that reports ``golden_error`` has no golden state: the task
  is invalid, which is a permanent system error (``GoldenStateError``), never a 0.
* **Final response** (``validate_response``): the agent's last reply states every
  expected answer and no wrong candidate, by the one text rule of
  ``rewardbox.grading.checks``: case-insensitive, on word boundaries, numbers
  compared as numbers (``171`` states ``171.00``), ISO dates also in their
  written forms, negated mentions ("not shipped") state nothing.
* **Rubrics** (``validate_rubrics_yesno``): the judge answers yes to every question.

This module needs only the standard library (and ``rewardbox.grading.checks``,
``rewardbox.errors`` and ``rewardbox.strict_json``, which do too), so a test file that imports it runs in any
Python that can import the ``rewardbox`` package, including the upstream
harness's test worker (docs/thinkingbox.md, "Running our domains under tb infer").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewardbox import strict_json
from rewardbox.errors import GraderError
from rewardbox.grading.checks import Answer, response_problems

DIFF_LINES_SHOWN = 20
"""How many differences of a server's ``diff`` a failure message lists."""


class GoldenStateError(GraderError, RuntimeError):
    """The golden state of a task cannot be built: the task is invalid (a permanent system error)."""

    def __init__(self, message: str):
        super().__init__(message, cause="invalid_task", permanent=True)


def _servers(effects: Mapping[str, Any], servers: str | Sequence[str] | None) -> list[str]:
    if isinstance(servers, str):
        return [servers]
    if servers is not None:
        return list(servers)
    if not effects:
        raise KeyError("no effects: the episode returned no server effects")
    return list(effects)


def _diff_line(d: Mapping[str, Any]) -> str:
    golden, result = (strict_json.dumps(d.get(k), default=str) for k in ("golden", "result"))
    return f"{d.get('path')}: {d.get('type')} result={result} golden={golden}"


def database_problems(
    effects: Mapping[str, Any], servers: str | Sequence[str] | None = None
) -> list[str]:
    """Why the terminal state differs from the golden state, per server (empty when it equals it).

    Args:
        effects: ``{server: effects}``; each effects mapping holds ``result_db_hash``,
            ``golden_db_hash`` and ``diff`` (a list of ``{path, type, result, golden}``),
            or ``golden_error``.
        servers: one server name, several, or None for every server in ``effects``.

    Returns:
        One line per server whose hashes differ, with its first ``DIFF_LINES_SHOWN`` differences.

    Raises:
        GoldenStateError: a server reports ``golden_error`` (an invalid task: a
            permanent system error, never a reward of 0).
        KeyError: no effects at all, or a named server or a hash key is missing
            (a system error, never a pass).
    """
    problems = []
    for server in _servers(effects, servers):
        server_effects = effects[server]
        if server_effects.get("golden_error"):
            raise GoldenStateError(
                f"invalid task, the golden state of {server} cannot be built: "
                + str(server_effects["golden_error"])
            )
        if server_effects["result_db_hash"] != server_effects["golden_db_hash"]:
            lines = [_diff_line(d) for d in (server_effects.get("diff") or [])[:DIFF_LINES_SHOWN]]
            problems.append(
                f"{server}: terminal state differs from the golden state: " + "; ".join(lines)
            )
    return problems


def validate_database(x: Any, servers: str | Sequence[str] | None = None) -> None:
    """The terminal state equals the golden state on every server checked (``database_problems``).

    Args:
        x: the test context; ``x.effects`` is ``{server: effects}``.
        servers: a server name (``"rewardbox_retail"``), several, or None for all servers.

    Raises:
        AssertionError: some hashes differ (a policy failure: reward 0).
        GoldenStateError: the golden state cannot be built (a permanent system error).
        KeyError: effects are missing (a system error).
    """
    problems = database_problems(x.effects or {}, servers)
    assert not problems, "; ".join(problems)


def validate_response(x: Any, expect: Sequence[Answer], reject: Sequence[str] = ()) -> None:
    """The agent's last reply states every expected answer and no wrong candidate.

    The text rule is ``rewardbox.grading.checks.states`` (module docstring there).

    Args:
        x: the test context; ``x.response`` is the agent's last reply (None counts as empty).
        expect: answers to state; a tuple holds alternatives of which one suffices.
        reject: wrong candidates that must not be stated.

    Raises:
        AssertionError: the reply misses an answer or states a wrong candidate (a policy failure).
    """
    reply = x.response or ""
    problems = response_problems(reply, expect, reject)
    assert not problems, f"reply {'; '.join(problems)}: {reply!r}"


def rubric_questions(effects: Mapping[str, Any]) -> list[str]:
    """The yes/no rubric questions of every server whose effects hold ``rubrics_yesno``.

    Raises:
        KeyError: no server holds ``rubrics_yesno`` (a system error: the task asks for
            rubrics its servers do not provide).
    """
    found = [s for s in _servers(effects, None) if "rubrics_yesno" in effects[s]]
    if not found:
        raise KeyError("rubrics_yesno: no server effects hold rubrics_yesno")
    return [q for s in found for q in effects[s]["rubrics_yesno"] or []]


def validate_rubrics_yesno(x: Any, judge: Any, questions: Sequence[str] | None = None) -> None:
    """The judge answers yes to every rubric question about the agent's last reply.

    Args:
        x: the test context (``x.response``, ``x.effects``).
        judge: the test's judge (``judge.text_yesno(text, question) -> bool``).
        questions: the questions, or None for ``rubric_questions(x.effects)``.

    Raises:
        AssertionError: a question is answered no (a policy failure).
        KeyError: no questions given and no server provides them (a system error).
        JudgeException: the judge failed (a system error, raised by the judge).
    """
    for question in rubric_questions(x.effects or {}) if questions is None else questions:
        assert judge.text_yesno(x.response, question), f"rubric not met: {question}"
