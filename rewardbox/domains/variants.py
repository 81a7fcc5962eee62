"""Order independence of golden states: replay a golden's writes permuted and split.

Two agents that follow the policy and reach the same business outcome must
reach the same graded state, whatever the order of their writes and however
they batch a list (one ``return_items`` call with two items, or two calls). The
tools derive the ids of new rows from their business key
(``toolkit.keyed_id``) for that reason; this module checks it per task.

A *variant* of a golden is its write calls (reads never change the state) in
another order, optionally with every splittable list (``Domain.splittable``)
sent one element per call. A variant whose replay hits a tool error is not a
valid way to do the task (the tools refuse that order, e.g. a grant before
its request) and is skipped; a variant that replays cleanly and reaches another
state is a *divergence*: the task would score a policy-compliant agent 0, so
the generator refuses to write it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewardbox.domains.base import Domain, ToolRunner
from rewardbox.domains.golden import build_golden_state
from rewardbox.grading.canonical import diff_states, format_diff, primary_keys, state_hash

EXHAUSTIVE_MAX_WRITES = 5
"""Up to this many writes every order is replayed (5! = 120); above it a seeded sample."""

SAMPLED_ORDERS = 60
"""Orders replayed (besides the golden's and its reverse) when a golden has more writes."""


def _orders(n: int, seed: str) -> list[tuple[int, ...]]:
    """Every permutation of ``range(n)``, or the identity, the reverse and a seeded sample."""
    if n <= EXHAUSTIVE_MAX_WRITES:
        return list(itertools.permutations(range(n)))
    rng = random.Random(seed)
    picks = {tuple(range(n)), tuple(reversed(range(n)))}
    while len(picks) < SAMPLED_ORDERS + 2:
        picks.add(tuple(rng.sample(range(n), n)))
    return sorted(picks)


def _split(call: Mapping[str, Any], splittable: Mapping[str, str]) -> list[dict[str, Any]]:
    """``call`` as one call per element of its splittable list (itself when there is none)."""
    param = splittable.get(call["tool"])
    values = (call.get("parameters") or {}).get(param) if param else None
    if not isinstance(values, list) or len(values) < 2:
        return [dict(call)]
    return [
        {"tool": call["tool"], "parameters": {**call["parameters"], param: [v]}} for v in values
    ]


def write_variants(
    domain: Domain, interactions: Sequence[Mapping[str, Any]], seed: str = ""
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Every variant of a golden: its writes in each order, unsplit and split.

    Args:
        domain: the domain (read-only tools, splittable lists).
        interactions: the golden ``tool_interactions`` (``{tool, parameters}``).
        seed: seeds the sample of orders when there are more than
            ``EXHAUSTIVE_MAX_WRITES`` writes.

    Yields:
        ``(label, calls)``, e.g. ``("order 1,0 split", [...])``; the label names
        the permutation of the writes (golden positions among the writes).
    """
    writes = [dict(i) for i in interactions if i["tool"] not in domain.readonly_tools]
    splittable = domain.splittable
    can_split = any(len(_split(w, splittable)) > 1 for w in writes)
    for order in _orders(len(writes), seed):
        calls = [writes[i] for i in order]
        label = "order " + ",".join(map(str, order))
        yield label, calls
        if can_split:
            yield label + " split", [piece for c in calls for piece in _split(c, splittable)]


@dataclass
class VariantReport:
    """What replaying a golden's variants found.

    Attributes:
        replayed: variants the tools accepted (each compared with the golden state).
        refused: variants a tool refused (not a valid way to do the task; skipped).
        divergences: one line per accepted variant that reached another state,
            ``"order 1,0: <diff>"``; or one ``"golden: <why>"`` line when the
            golden itself cannot be replayed.
    """

    replayed: int = 0
    refused: int = 0
    divergences: list[str] = field(default_factory=list)


def replay_variants(
    runner: ToolRunner,
    data_patch: Mapping[str, Any] | None,
    interactions: Sequence[Mapping[str, Any]],
    seed: str = "",
) -> VariantReport:
    """Replay every variant of a golden (``write_variants``) and compare each with the golden state.

    Args:
        runner: the domain's tool runner.
        data_patch: the task's data patch.
        interactions: the golden ``tool_interactions``.
        seed: seeds the sample of orders of long goldens.
    """
    report = VariantReport()
    golden, error = build_golden_state(runner, data_patch, list(interactions))
    if golden is None:
        report.divergences.append(f"golden: {error}")
        return report
    golden_hash = state_hash(golden)
    keys = primary_keys(runner.domain.metadata)
    for label, calls in write_variants(runner.domain, interactions, seed):
        state, _ = build_golden_state(runner, data_patch, calls)
        if state is None:  # the tools refuse this order: not a valid way to do the task
            report.refused += 1
            continue
        report.replayed += 1
        if state_hash(state) != golden_hash:
            diff = format_diff(diff_states(state, golden, keys=keys), limit=3)
            report.divergences.append(f"{label}: {diff}")
    return report


def order_divergences(
    runner: ToolRunner,
    data_patch: Mapping[str, Any] | None,
    interactions: Sequence[Mapping[str, Any]],
    seed: str = "",
) -> list[str]:
    """The divergences of ``replay_variants``: empty when every valid variant reaches the golden state."""
    return replay_variants(runner, data_patch, interactions, seed).divergences
