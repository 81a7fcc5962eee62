"""The result row every benchmark returns (the convention is in ``benchmarks.__main__``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def alternated(ways: dict[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """``repeats`` rounds of each way's result, the ways in dict order, then reversed, and so on (so a
    load spike or a warm cache on this shared machine does not always favour the same way): each
    key's results in order, for paired ratios (``benchmarks.generation.paired_ratio``)."""
    keys = list(ways)
    runs: dict[str, list[T]] = {key: [] for key in keys}
    for repeat in range(repeats):
        for key in keys if repeat % 2 == 0 else keys[::-1]:
            runs[key].append(ways[key]())
    return runs


def load() -> str:
    """The machine load now: ``/proc/loadavg``'s 1-minute average over the CPU count, e.g. ``"0.52/2"``."""
    return f"{os.getloadavg()[0]:.2f}/{os.cpu_count()}"


def row(
    name: str,
    value: float,
    unit: str,
    anchor: float | None,
    anchor_label: str = "",
    *,
    ok: bool | None = None,
    goal: str = "",
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One result row; ``ratio = value / anchor`` (``None`` without an anchor), ``load`` taken now.

    Args:
        name: the row, as in the issue's table.
        value: today's figure, in ``unit``.
        unit: e.g. ``"ms"``, ``"s"``, ``"tokens/s"``.
        anchor: the anchor / naive figure in the same unit, or None.
        anchor_label: what the anchor is (e.g. ``"plain generate, this run"``).
        ok: whether the row meets its goal; False makes ``make bench`` fail.
        goal: the goal in words, with the figure it was judged on.
        detail: any other figures (medians per phase, counts), kept in the JSON.
    """
    return {
        "row": name,
        "value": float(value),
        "unit": unit,
        "anchor": anchor,
        "anchor_label": anchor_label,
        "ratio": None if not anchor else float(value) / float(anchor),
        "load": load(),
        "ok": ok,
        "goal": goal,
        "detail": detail or {},
    }
