"""The text rule of the reward: whether the agent's reply *states* a value.

``rewardbox.grading.reward.validate_response`` (what generated test files and
YAML ``response_contains`` tests call) applies it: every expected answer must be
*stated* in the agent's last reply and no wrong candidate may be stated.

* A number is matched as a number on word boundaries: ``171`` states
  ``171.00`` (and ``$171.00``, ``171.00.``), ``1171.00`` or ``171.5`` do not;
  digits inside ids and dates (``ORD-6171``, ``2025-06-17``) are not numbers.
  A value with a leading zero (card digits ``0421``) is matched as text.
* Other text is matched case-insensitively on word boundaries (``shipped``
  is not in ``unshipped``); an ISO date also matches its written forms
  (``2025-06-20``, ``June 20, 2025``, ``20 June 2025``).
* A mention is *negated*, so it states nothing, when ``not``, ``no``,
  ``never``, ``cannot``, ``yet to`` or an ``n't`` word stands among the three words before
  it in the same clause: "not shipped yet" does not state ``shipped``, and
  "It has not been cancelled" does not state ``cancelled``.

A wrong candidate (another record's value, the other status) that is stated
fails the check, so an agent that lists every value it saw does not pass.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

Answer = str | Sequence[str]
"""One expected answer: a value, or a tuple of alternatives of which one must be stated."""

_NUMBER = re.compile(r"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?(?![\w\-/]|\.\d)")
_NUMERIC_VALUE = re.compile(r"\d+(?:\.\d+)?")
_CLAUSE_END = re.compile(r"[.;:!?,()]|\bbut\b|\bhowever\b", re.IGNORECASE)
_NEGATORS = frozenset({"not", "no", "never", "nor", "neither", "without", "cannot"})
_NEGATED_AFTER = 3
"""Words before a mention in which a negator negates it."""


def _is_number(value: str) -> bool:
    """A value compared as a number: digits with an optional decimal part, no leading zero."""
    return bool(_NUMERIC_VALUE.fullmatch(value)) and not (
        len(value) > 1 and value[0] == "0" and value[1] != "."
    )


def _as_decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def _negated(text: str, start: int) -> bool:
    """Whether a negator is among the few words before ``start`` in the same clause."""
    before = text[:start]
    clause = _CLAUSE_END.split(before)[-1]
    words = re.findall(r"[a-z']+", clause.lower().replace("\u2019", "'"))[-_NEGATED_AFTER:]
    if any(w in _NEGATORS or w.endswith("n't") for w in words):
        return True
    return ("yet", "to") in zip(words, words[1:])


def _text_patterns(value: str) -> list[re.Pattern[str]]:
    forms = [value]
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        day = None
    if day is not None and len(value) == 10:
        month = day.strftime("%B")
        forms += [
            f"{month} {day.day}, {day.year}",
            f"{month} {day.day} {day.year}",
            f"{day.day} {month} {day.year}",
        ]
    return [re.compile(r"(?<![\w-])" + re.escape(f) + r"(?![\w-])", re.IGNORECASE) for f in forms]


def _mention_starts(text: str, value: str) -> list[int]:
    """Where ``value`` is mentioned in ``text`` (negated mentions included)."""
    value = value.strip()
    if _is_number(value):
        want = Decimal(value)
        return [m.start() for m in _NUMBER.finditer(text) if _as_decimal(m.group()) == want]
    return [m.start() for pattern in _text_patterns(value) for m in pattern.finditer(text)]


def states(text: str, value: str) -> bool:
    """Whether ``text`` states ``value``: a mention that is not negated (see the module docstring).

    Args:
        text: the agent's reply.
        value: the value, e.g. ``"171.00"``, ``"shipped"``, ``"2025-06-20"``, ``"Tom Alvarez"``.

    Returns:
        True when some mention of the value is not negated.
    """
    return any(not _negated(text, start) for start in _mention_starts(text, value))


def _alternatives(answer: Answer) -> list[str]:
    return [answer] if isinstance(answer, str) else list(answer)


def response_problems(text: str, expect: Sequence[Answer], reject: Sequence[str] = ()) -> list[str]:
    """What is wrong with a reply: expected answers it does not state, wrong candidates it does.

    Args:
        text: the agent's last reply.
        expect: every answer the reply must state; a tuple is alternatives (one suffices).
        reject: values the reply must not state (another record's value, the other status).

    Returns:
        Problem lines (empty when the reply is right), e.g. ``["does not state 171.00"]``.
    """
    problems = []
    for answer in expect:
        options = _alternatives(answer)
        if not any(states(text, v) for v in options):
            problems.append("does not state " + " or ".join(options))
    problems += [f"states the wrong value {v}" for v in reject if states(text, v)]
    return problems


def check_candidates(expect: Sequence[Answer], reject: Sequence[str]) -> None:
    """Refuse a check that cannot discriminate: a reply with the expected values must not state a rejected one.

    Raises:
        ValueError: a rejected value is stated by the expected answers (e.g. fee
            and refund both ``171.00``), or an expected answer is empty.
    """
    values = [v for answer in expect for v in _alternatives(answer)]
    if any(not v.strip() for v in values):
        raise ValueError(f"an expected answer is empty: {list(expect)!r}")
    clash = [r for r in reject if any(states(v, r) or states(r, v) for v in values)]
    if clash:
        raise ValueError(f"wrong candidates {clash!r} equal an expected answer of {list(expect)!r}")
