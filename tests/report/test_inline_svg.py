"""The inline reliability chart: valid SVG, right coordinates, short enough for Dagster to show in place."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

from assets.metadata import INLINE_MD_LIMIT, md_inline
from rewardbox.report.inline_svg import BOTTOM, LEFT, TOP, reliability_svg, svg_markdown

NS = "{http://www.w3.org/2000/svg}"


def summary(at: dict, hat: dict) -> dict:
    return {"pass_at_k": at, "pass_hat_k": hat}


def test_four_lines_with_the_values_at_their_coordinates():
    ks = [1, 2, 4, 8, 20]
    base = summary({k: 0.0 for k in ks}, {k: 0.0 for k in ks})
    tuned = summary({k: 1.0 for k in ks}, {1: 1.0, 2: 0.5, 4: 0.25, 8: 0.0, 20: 0.0})
    root = ET.fromstring(reliability_svg(base, tuned))
    lines = root.findall(f".//{NS}polyline")
    assert len(lines) == 4
    points = [[tuple(map(int, p.split(","))) for p in line.get("points").split()] for line in lines]
    assert points[0][0] == (LEFT, BOTTOM) and points[2][0] == (LEFT, TOP)  # base at 0 %, tuned at 100 %
    assert points[3][1][1] == (BOTTOM + TOP) // 2  # tuned pass^2 = 0.5 halfway up
    assert lines[1].get("stroke-dasharray") and not lines[0].get("stroke-dasharray")  # pass^k dashed
    markdown = svg_markdown(reliability_svg(base, tuned), "pass@k")
    assert len(markdown) < INLINE_MD_LIMIT and "plot_inline" in md_inline(markdown)
    assert base64.b64decode(markdown.split("base64,")[1].rstrip(")")).startswith(b"<svg")


def test_too_long_a_chart_is_left_out_rather_than_hidden_behind_a_button():
    ks = range(1, 41)
    many = summary({k: 0.5 for k in ks}, {k: 0.25 for k in ks})
    assert md_inline(svg_markdown(reliability_svg(many, many), "pass@k")) == {}
