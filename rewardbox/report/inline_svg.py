"""Compact SVG charts small enough for the Dagster UI to show in place, as markdown.

Dagster's UI (1.13) renders a markdown metadata value in place only when it is shorter than
1,000 characters (``MarkdownMetadataEntry`` in its ``MetadataEntry.tsx``); a longer one (any
PNG, any matplotlib SVG) hides behind a "[Show Markdown]" button. These charts are written by
hand, not by matplotlib, for that one reason: a base64 ``data:`` URI costs 4/3 of the SVG, so
the SVG has about 700 characters. Each chart is built with fewer and fewer points until its
markdown fits (:func:`fitted_markdown`), so it is always shown; the full matplotlib PNGs
(``rewardbox.report.plots``) stay the reference plots.

Charts: :func:`reliability_svg` (pass@k, pass^k vs k), :func:`band_svg` (tasks per band),
:func:`training_svg` (mean reward and loss vs step, integer step labels).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from rewardbox.selection.bands import BANDS
from rewardbox.selection.difficulty import band_counts

WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 230, 96, 22, 6, 84
COLORS = {"base": "#888", "tuned": "#17c"}
INLINE_MD_LIMIT = 1000
"""Dagster's UI shows a markdown metadata value in place when it is shorter than this (characters)."""
POINT_BUDGETS = (40, 20, 12, 8, 5, 3, 2)
"""Points per line tried in turn by :func:`fitted_markdown`, most first."""


def thin(values: Sequence[Any], most: int) -> list[Any]:
    """At most ``most`` (>= 2) items of ``values``, evenly spaced, first and last always kept."""
    if len(values) <= most:
        return list(values)
    step = (len(values) - 1) / (most - 1)
    return [values[round(i * step)] for i in range(most)]


def _points(values: Mapping[Any, float], ks: list[int]) -> str:
    span = max(ks[-1] - ks[0], 1)
    out = []
    for k in ks:
        if k in values and values[k] is not None:
            x = LEFT + (k - ks[0]) * (WIDTH - LEFT - 70) / span
            y = BOTTOM - float(values[k]) * (BOTTOM - TOP)
            out.append(f"{x:.0f},{y:.0f}")
    return " ".join(out)


def reliability_svg(
    summary_base: Mapping[str, Any], summary_tuned: Mapping[str, Any], most: int = 40
) -> str:
    """pass@k (solid) and pass^k (dashed) against k, base (grey) and tuned (blue), y from 0 to 100 %.

    Args:
        summary_base, summary_tuned: ``rewardbox.metrics.summarise_campaign`` results
            (``pass_at_k`` and ``pass_hat_k``: dicts k -> fraction in [0, 1]).
        most: at most this many k per line (evenly spaced, first and last kept).

    Returns:
        The SVG text (no XML declaration); an empty chart when no k has a value.
    """
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-size="9">',
        f'<text y="{TOP + 6}">100%</text><g fill="none"><path d="M{LEFT} {TOP}V{BOTTOM}H{WIDTH - 68}" stroke="#aaa"/>',
    ]
    for name, summary in (("base", summary_base), ("tuned", summary_tuned)):
        for key, dash in (("pass_at_k", ""), ("pass_hat_k", ' stroke-dasharray="3"')):
            values = {int(k): v for k, v in (summary.get(key) or {}).items()}
            ks = sorted(
                int(k) for k in {**(summary_base.get(key) or {}), **(summary_tuned.get(key) or {})}
            )
            if values and ks:
                kept = thin(ks, most)
                parts.append(
                    f'<polyline points="{_points(values, kept)}" stroke="{COLORS[name]}"{dash}/>'
                )
    parts.append(
        f'</g><text x="{WIDTH - 62}" y="{TOP + 10}" fill="{COLORS["tuned"]}">tuned</text>'
        f'<text x="{WIDTH - 62}" y="{TOP + 22}" fill="{COLORS["base"]}">base</text>'
        f'<text x="{WIDTH - 62}" y="{TOP + 40}">— pass@k</text>'
        f'<text x="{WIDTH - 62}" y="{TOP + 52}">- - pass^k</text></svg>'
    )
    return "".join(parts)


def band_svg(difficulty_df: pl.DataFrame) -> str:
    """Bars of tasks per difficulty band (all domains together), hardest band first, empty bands as 0.

    Args:
        difficulty_df: output of ``rewardbox.selection.task_difficulty`` (``band``; unbanded tasks get a bar).

    Returns:
        The SVG text: one bar per band (height proportional to its count), ``<band> <count>`` below it.
    """
    counts = band_counts(difficulty_df).group_by("band").agg(pl.col("tasks").sum())
    by_band = dict(zip(counts["band"].to_list(), counts["tasks"].to_list()))
    bands = list(BANDS) + [b for b in by_band if b not in BANDS]
    top = max([*by_band.values(), 1])
    bars, labels = [], []
    for i, band in enumerate(bands):
        n = int(by_band.get(band, 0))
        bars.append(f"M{60 * i + 6} 76h48v{-round(64 * n / top)}h-48z")
        labels.append(f'<text x="{60 * i + 30}" y="90">{band} {n}</text>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{60 * len(bands)}" height="96" font-size="10" '
        f'text-anchor="middle"><path d="{"".join(bars)}" fill="#17c"/>{"".join(labels)}</svg>'
    )


TRAINING_PANELS = (("mean_reward", "mean reward"), ("loss", "loss"))
"""The inline panels (the PNG of ``rewardbox.report.plots.training_curve_png`` has every metric)."""


def training_svg(step_metrics: Sequence[Mapping[str, Any]], most: int = 40) -> str:
    """Two small panels against step: mean reward and loss (those present).

    Args:
        step_metrics: one dict per step (``step`` optional: the row index otherwise) with any of the
            panel metrics; None values are skipped.
        most: at most this many points per panel (evenly spaced, first and last step kept).

    Returns:
        The SVG text. Each panel names its metric and its y range (min..max, to 3 significant digits)
        and labels its first and last step as integers (a one-step run: one dot at its step).

    Raises:
        ValueError: no step has any panel metric.
    """
    rows = list(step_metrics)
    steps = [int(r.get("step", i)) for i, r in enumerate(rows)]
    panels = [
        (key, title) for key, title in TRAINING_PANELS if any(r.get(key) is not None for r in rows)
    ]
    if not panels:
        raise ValueError(f"step_metrics has none of {[key for key, _ in TRAINING_PANELS]}")
    axes = "".join(f"M{170 * i + 4} 80h152" for i in range(len(panels)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{170 * len(panels)}" height="96" font-size="9">'
        f'<path d="{axes}" stroke="#aaa"/>'
    ]
    for i, (key, title) in enumerate(panels):
        points = thin(
            [(s, float(r[key])) for s, r in zip(steps, rows) if r.get(key) is not None], most
        )
        parts.append(_panel(170 * i, title, points))
    return "".join(parts) + "</svg>"


def _panel(x0: int, title: str, points: list[tuple[int, float]]) -> str:
    """One panel 160 wide: title and y range on top, the line (or a dot), first and last step below."""
    (first, _), (last, _) = points[0], points[-1]
    low, high = min(v for _, v in points), max(v for _, v in points)
    xy = [
        (
            x0 + 8 + 144 * (s - first) / max(last - first, 1),
            74 - 56 * (v - low) / ((high - low) or 1),
        )
        for s, v in points
    ]
    line = " ".join(f"{x:.0f},{y:.0f}" for x, y in xy)
    mark = (
        f'<polyline points="{line}" fill="none" stroke="#17c"/>'
        if len(xy) > 1
        else f'<circle cx="{xy[0][0]:.0f}" cy="{xy[0][1]:.0f}" r="3" fill="#17c"/>'
    )
    steps = f'<text x="{x0 + 4}" y="92">{first}</text>'
    if last != first:
        steps += f'<text x="{x0 + 152}" y="92" text-anchor="end">{last}</text>'
    return f'<text x="{x0 + 4}" y="10">{title} {low:.3g}..{high:.3g}</text>{mark}{steps}'


def svg_markdown(svg: str, alt: str) -> str:
    """Markdown that shows ``svg`` as an image (a base64 ``data:`` URI, which Dagster's UI allows)."""
    return f"![{alt}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"


def fitted_markdown(
    build: Callable[[int], str], alt: str, limit: int = INLINE_MD_LIMIT
) -> str | None:
    """The markdown of ``build(most)`` for the largest ``most`` of ``POINT_BUDGETS`` that fits under ``limit``.

    Args:
        build: points-per-line budget -> SVG text.
        alt: the image's alt text.
        limit: characters (Dagster's in-place limit by default).

    Returns:
        The markdown, or None when even two points per line do not fit (the caller leaves the chart out).
    """
    for most in POINT_BUDGETS:
        markdown = svg_markdown(build(most), alt)
        if len(markdown) < limit:
            return markdown
    return None
