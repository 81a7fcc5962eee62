"""The result row every benchmark returns (the convention is in ``benchmarks.__main__``)."""

from __future__ import annotations

import os
from typing import Any


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
