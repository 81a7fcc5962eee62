"""Figures of the embedded task sets: tasks per family and split, golden depth, query variety.

``python -m rewardbox.domains.stats`` prints, per domain, the number of
families and tasks, the mean golden tool calls and writes per task, the most
writes in one task, and how many first messages stay distinct once the parts a
template fills in are masked (``mask_query``): a family whose queries differ
only in ids, names and amounts counts once per wording. ``--markdown`` prints
the tables of ``docs/embedded_tasks.md`` (a test keeps the page in step).
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

DOMAINS = ("retail", "hotel", "helpdesk")
"""The embedded domains, in the order of the page."""

_EMAIL = re.compile(r"[\w.+-]+@[\w.-]+")
_ID = re.compile(r"\b[A-Z]{1,4}(?:-[A-Z0-9]+)+\b")
_NUMBER = re.compile(r"\d+(?:[.,:-]\d+)*")


def _names() -> set[str]:
    """Every first and last name the builders draw, and the seed people's names."""
    names: set[str] = set()
    for domain in DOMAINS:
        builder = importlib.import_module(f"rewardbox.domains.{domain}.builder")
        names.update(getattr(builder, "FIRST_NAMES", ()), getattr(builder, "LAST_NAMES", ()))
        for full in getattr(builder, "SEED_NAMES", {}).values():
            names.update(full.split())
    return names


def mask_query(query: str, names: Iterable[str]) -> str:
    """``query`` with emails, ids, numbers (amounts, dates) and person names replaced by placeholders.

    Args:
        query: a first user message.
        names: the person names to mask (``_names()``).

    Returns:
        e.g. ``"Hi, I'm <name> <name> (<email>). Cancel order <id>."``.
    """
    text = _EMAIL.sub("<email>", query)
    text = _ID.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    words = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    return re.sub(rf"\b(?:{words})\b", "<name>", text)


@dataclass(frozen=True)
class DomainStats:
    """The figures of one domain's generated tasks."""

    domain: str
    families: int
    tasks: int
    mean_calls: float
    mean_writes: float
    max_writes: int
    tasks_3plus_writes: int
    distinct_masked_queries: int
    per_family: list[dict[str, Any]]


def domain_stats(domain: str, names: set[str] | None = None) -> DomainStats:
    """Figures of one domain, from its recipe's ``generate_tasks()`` (the checked-in seed)."""
    recipe = importlib.import_module(f"rewardbox.domains.{domain}.generator").RECIPE
    readonly = recipe.domain.readonly_tools
    tasks = recipe.generate_tasks()
    names = _names() if names is None else names
    calls = [
        t["init"][recipe.domain.server_name]["golden_test_case"]["tool_interactions"] for t in tasks
    ]
    writes = [sum(c["tool"] not in readonly for c in cs) for cs in calls]
    per_family = []
    for family in recipe.families:
        members = [t for t in tasks if t["family"] == family.name]
        per_family.append(
            {
                "family": family.name,
                "difficulty": family.difficulty,
                "tasks": len(members),
                "benchmark": sum(t["split"] == "benchmark" for t in members),
                "candidate": sum(t["split"] == "candidate" for t in members),
                "held_out_template": family.held_out or recipe.held_out,
            }
        )
    return DomainStats(
        domain,
        len(recipe.families),
        len(tasks),
        sum(map(len, calls)) / len(tasks),
        sum(writes) / len(tasks),
        max(writes),
        sum(w >= 3 for w in writes),
        len({mask_query(t["query"], names) for t in tasks}),
        per_family,
    )


def render_markdown(stats: Sequence[DomainStats]) -> str:
    """The tables of ``docs/embedded_tasks.md``: one summary table, then one per domain."""
    lines = [
        "| domain | families | tasks | golden calls / task | writes / task | most writes | tasks with 3+ "
        "writes | distinct masked queries |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in stats:
        lines.append(
            f"| {s.domain} | {s.families} | {s.tasks} | {s.mean_calls:.2f} | {s.mean_writes:.2f} | "
            f"{s.max_writes} | {s.tasks_3plus_writes} | {s.distinct_masked_queries} |"
        )
    for s in stats:
        lines += [
            "",
            f"### {s.domain}",
            "",
            "| family | difficulty | tasks | benchmark | candidates | held-out template |",
            "|---|---|---|---|---|---|",
        ]
        for f in s.per_family:
            lines.append(
                f"| {f['family']} | {f['difficulty']} | {f['tasks']} | {f['benchmark']} | "
                f"{f['candidate']} | {'yes' if f['held_out_template'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """CLI: the summary per domain, or ``--markdown`` for the page's tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables of docs/embedded_tasks.md"
    )
    args = parser.parse_args(argv)
    names = _names()
    stats = [domain_stats(d, names) for d in DOMAINS]
    if args.markdown:
        print(render_markdown(stats), end="")
        return
    for s in stats:
        print(
            f"{s.domain}: {s.families} families, {s.tasks} tasks, {s.mean_calls:.2f} golden calls and "
            f"{s.mean_writes:.2f} writes per task, most writes {s.max_writes}, {s.tasks_3plus_writes} tasks "
            f"with 3+ writes, {s.distinct_masked_queries}/{s.tasks} distinct masked queries"
        )
    total = sum(s.tasks for s in stats)
    print(
        f"all: {sum(s.families for s in stats)} families, {total} tasks, "
        f"{sum(s.mean_calls * s.tasks for s in stats) / total:.2f} calls and "
        f"{sum(s.mean_writes * s.tasks for s in stats) / total:.2f} writes per task, "
        f"{sum(s.distinct_masked_queries for s in stats)}/{total} distinct masked queries"
    )


if __name__ == "__main__":
    main()
