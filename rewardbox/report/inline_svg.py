"""A compact SVG of pass@k and pass^k against k, small enough to show inline in the Dagster UI.

Dagster's UI (1.13) renders a markdown metadata value in place only when it is shorter than 1,000
characters; a longer one (any PNG, any matplotlib SVG) hides behind a "[Show Markdown]" button.
This chart is written by hand, not by matplotlib, for that one reason: four polylines and a legend
fit in about 700 characters of base64. The full two-panel PNG (:func:`reliability_png`) stays the
reference plot.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 230, 96, 22, 6, 84
COLORS = {"base": "#888", "tuned": "#17c"}


def _points(values: Mapping[Any, float], ks: list[int]) -> str:
    span = max(ks[-1] - ks[0], 1)
    out = []
    for k in ks:
        if k in values and values[k] is not None:
            x = LEFT + (k - ks[0]) * (WIDTH - LEFT - 70) / span
            y = BOTTOM - float(values[k]) * (BOTTOM - TOP)
            out.append(f"{x:.0f},{y:.0f}")
    return " ".join(out)


def reliability_svg(summary_base: Mapping[str, Any], summary_tuned: Mapping[str, Any]) -> str:
    """pass@k (solid) and pass^k (dashed) against k, base (grey) and tuned (blue), y from 0 to 100 %.

    Args:
        summary_base, summary_tuned: ``rewardbox.metrics.summarise_campaign`` results
            (``pass_at_k`` and ``pass_hat_k``: dicts k -> fraction in [0, 1]).

    Returns:
        The SVG text (no XML declaration); an empty chart when no k has a value.
    """
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-size="9">',
             f'<text y="{TOP + 6}">100%</text><g fill="none"><path d="M{LEFT} {TOP}V{BOTTOM}H{WIDTH - 68}" stroke="#aaa"/>']
    for name, summary in (("base", summary_base), ("tuned", summary_tuned)):
        for key, dash in (("pass_at_k", ""), ("pass_hat_k", ' stroke-dasharray="3"')):
            values = {int(k): v for k, v in (summary.get(key) or {}).items()}
            ks = sorted(int(k) for k in {**(summary_base.get(key) or {}), **(summary_tuned.get(key) or {})})
            if values and ks:
                parts.append(f'<polyline points="{_points(values, ks)}" stroke="{COLORS[name]}"{dash}/>')
    parts.append(f'</g><text x="{WIDTH - 62}" y="{TOP + 10}" fill="{COLORS["tuned"]}">tuned</text>'
                 f'<text x="{WIDTH - 62}" y="{TOP + 22}" fill="{COLORS["base"]}">base</text>'
                 f'<text x="{WIDTH - 62}" y="{TOP + 40}">— pass@k</text>'
                 f'<text x="{WIDTH - 62}" y="{TOP + 52}">- - pass^k</text></svg>')
    return "".join(parts)


def svg_markdown(svg: str, alt: str) -> str:
    """Markdown that shows ``svg`` as an image (a base64 ``data:`` URI, which Dagster's UI allows)."""
    return f"![{alt}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"
