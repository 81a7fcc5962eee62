"""The inline charts: valid SVG, right coordinates, always short enough for Dagster to show in place."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from assets.metadata import md_chart
from rewardbox.report.inline_svg import (
    BOTTOM,
    INLINE_MD_LIMIT,
    LEFT,
    TOP,
    band_svg,
    fitted_markdown,
    reliability_svg,
    svg_markdown,
    thin,
    training_svg,
)

NS = "{http://www.w3.org/2000/svg}"


def summary(at: dict, hat: dict) -> dict:
    return {"pass_at_k": at, "pass_hat_k": hat}


def decoded(markdown: str) -> ET.Element:
    return ET.fromstring(base64.b64decode(markdown.split("base64,")[1].rstrip(")")))


def test_four_lines_with_the_values_at_their_coordinates():
    ks = [1, 2, 4, 8, 20]
    base = summary({k: 0.0 for k in ks}, {k: 0.0 for k in ks})
    tuned = summary({k: 1.0 for k in ks}, {1: 1.0, 2: 0.5, 4: 0.25, 8: 0.0, 20: 0.0})
    root = ET.fromstring(reliability_svg(base, tuned))
    lines = root.findall(f".//{NS}polyline")
    assert len(lines) == 4
    points = [[tuple(map(int, p.split(","))) for p in line.get("points").split()] for line in lines]
    assert points[0][0] == (LEFT, BOTTOM) and points[2][0] == (
        LEFT,
        TOP,
    )  # base at 0 %, tuned at 100 %
    assert points[3][1][1] == (BOTTOM + TOP) // 2  # tuned pass^2 = 0.5 halfway up
    assert lines[1].get("stroke-dasharray") and not lines[0].get(
        "stroke-dasharray"
    )  # pass^k dashed
    markdown = fitted_markdown(lambda most: reliability_svg(base, tuned, most), "pass@k")
    assert len(markdown) < INLINE_MD_LIMIT and "plot" in md_chart("plot", markdown)
    assert decoded(markdown).tag == f"{NS}svg"


def test_a_long_k_range_is_thinned_to_fit_rather_than_hidden_behind_a_button():
    ks = range(1, 41)
    many = summary({k: 0.5 for k in ks}, {k: 0.25 for k in ks})
    assert (
        len(svg_markdown(reliability_svg(many, many), "pass@k")) > INLINE_MD_LIMIT
    )  # all 40 points do not fit
    markdown = fitted_markdown(lambda most: reliability_svg(many, many, most), "pass@k")
    assert len(markdown) < INLINE_MD_LIMIT
    first = decoded(markdown).find(f".//{NS}polyline").get("points").split()
    assert 2 <= len(first) < 40 and first[0].startswith(f"{LEFT},")  # first k kept
    assert md_chart("plot", None) == {}


def test_thin_keeps_the_ends_and_spacing():
    assert thin(list(range(10)), 4) == [0, 3, 6, 9]
    assert thin([1, 2], 5) == [1, 2]


def test_band_chart_has_every_band_in_order_with_counts_and_fits_for_large_campaigns():
    difficulty = pl.DataFrame(
        {
            "uid": [str(i) for i in range(3000)],
            "domain": ["a", "b", "c"] * 1000,
            "band": ["hard"] * 2000 + ["too_easy"] * 999 + [None],
        }
    )
    markdown = svg_markdown(band_svg(difficulty), "bands")
    assert len(markdown) < INLINE_MD_LIMIT
    labels = [t.text for t in decoded(markdown).findall(f"{NS}text")]
    assert labels == ["too_hard 0", "hard 2000", "medium 0", "easy 0", "too_easy 999", "unbanded 1"]


def test_training_chart_labels_integer_steps_and_fits_for_long_runs():
    rows = [
        {"step": i + 1, "mean_reward": (0.37 * i) % 1, "loss": -0.001 * i, "clip_frac": 0.1}
        for i in range(500)
    ]
    markdown = fitted_markdown(lambda most: training_svg(rows, most), "training")
    assert markdown is not None and len(markdown) < INLINE_MD_LIMIT
    texts = [t.text for t in decoded(markdown).findall(f"{NS}text")]
    assert texts[0].startswith("mean reward 0..") and "1" in texts and "500" in texts
    one = decoded(
        svg_markdown(training_svg([{"step": 3, "mean_reward": 0.5, "loss": 0.2}]), "one step")
    )
    assert len(one.findall(f"{NS}circle")) == 2  # one dot per panel, no line
    assert [t.text for t in one.findall(f"{NS}text")] == [
        "mean reward 0.5..0.5",
        "3",
        "loss 0.2..0.2",
        "3",
    ]
    with pytest.raises(ValueError, match="none of"):
        training_svg([{"step": 0, "clip_frac": 0.1}])
