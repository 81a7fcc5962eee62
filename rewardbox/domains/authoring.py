"""What the domains' task templates share: the family record, golden calls, task specs, user facts, rows.

A domain's ``templates.py`` lists ``Family`` records; each family's ``build``
makes one task from a world builder (a ``RowBuilder`` subclass that adds the
domain's own entities) and a variant number ``k``, and returns a ``task_spec``.
``dataset_writer.DatasetRecipe`` turns the specs into a ThinkingBox dataset.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rewardbox.grading.checks import check_candidates

Template = Callable[[Any, int], dict[str, Any]]
"""``build(builder, k) -> task_spec(...)``: one task of a family from a fresh world builder."""

GIVE_UP = "If the agent says the request is not possible, accept it and say goodbye."
"""The simulated user's default answer to a refusal."""


@dataclass(frozen=True)
class Family:
    """A task template: its name, test file, difficulty and how many variants to make.

    ``held_out`` keeps every task of the template out of training (all in the
    benchmark): the out-of-distribution share is then new templates, not only
    new instances of templates the trainer has seen.
    """

    name: str
    file: str
    difficulty: str
    build: Template
    count: int = 4
    held_out: bool = False


def call(tool: str, **parameters: Any) -> dict[str, Any]:
    """One golden tool interaction."""
    return {"tool": tool, "parameters": parameters}


def task_spec(
    query: str,
    ctx: str,
    golden: list[dict[str, Any]],
    *,
    write: bool,
    values: list[str | tuple[str, ...]] | None = None,
    reject: list[str] | None = None,
) -> dict[str, Any]:
    """What a template returns: first message, user facts, golden calls, write flag, values to tell.

    Args:
        query: the user's first message.
        ctx: the simulated user's facts (``user_context_text``).
        golden: the golden tool interactions (``call``).
        write: whether the golden changes the database.
        values: answers the agent's last reply must state; a tuple holds
            alternatives (one suffices). Checked by ``rewardbox.grading.checks.validate_response``.
        reject: wrong candidates the reply must not state (another record's
            value, the other status); empty or None when no value is told.

    Raises:
        ValueError: a wrong candidate equals an expected answer (the check could
            not tell them apart), or ``reject`` is given without ``values``.
    """
    values, reject = list(values or []), list(reject or [])
    if reject and not values:
        raise ValueError("wrong candidates need expected values")
    check_candidates(values, reject)
    return {
        "query": query,
        "user_context": ctx,
        "golden": golden,
        "expects_write": write,
        "response_values": values,
        "response_reject": reject,
    }


def short_ask(request: str, k: int) -> str:
    """A first message that is the request alone, e.g. "Please cancel my booking BK-6011."

    The trivial families ask this way: the request first and nothing before it.
    Measured on the embedded SmolLM2-135M (first turn, temperature 0.7, 16
    samples, tool names guided): "Please cancel my booking BK-6011." gave the
    right call 9/16 times; the same ask after "Hi, I'm <name> (<email>)." 3/16.
    Who is asking stays in the simulated user's facts (the agent may ask).
    Variant ``k`` alternates "Please ..." and "Hi, please ...".
    """
    return f"{'Please' if k % 2 == 0 else 'Hi, please'} {request}."


def user_context_text(
    facts: list[str],
    goal: str,
    *,
    agrees: bool = True,
    extra: list[str] | None = None,
    give_up: str = GIVE_UP,
) -> str:
    """The simulated user's private facts, one ``Key: value`` per line.

    Args:
        facts: who the user is (the domain's identity lines), first.
        goal: what the user wants, after ``extra``.
        agrees: whether the user agrees to proceed when the agent asks.
        extra: more facts (ids, factors, amounts) between identity and goal.
        give_up: how the user answers a refusal.
    """
    lines = [
        *facts,
        *(extra or []),
        f"Goal: {goal}",
        f"Agrees to proceed: {'yes' if agrees else 'no'}",
        give_up,
        "Do not invent facts; if asked something not listed here, say you don't know.",
    ]
    return "\n".join(lines)


@dataclass
class RowBuilder:
    """The rows of one task's ``data_patch``, and the task's numbered ids.

    Args:
        index: the task's global number (1..999); it fixes the id ranges.
        rng: the generator's seeded random source.
    """

    index: int
    rng: random.Random
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _serial: int = 0

    def _add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).append(row)

    def _number(self) -> int:
        """The current id number: ``6000 + 10 * index + serial`` (ten ids a task)."""
        return 6000 + self.index * 10 + self._serial

    def _next(self, prefix: str) -> str:
        """A new id ``prefix + number``, e.g. ``"BK-6123"``."""
        self._serial += 1
        return f"{prefix}{self._number()}"
