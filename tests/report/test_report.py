"""Report tables carry the right numbers; plots are PNGs; the document links them."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.metrics import ModelPrice, PriceTable, compute_reliability, summarise_campaign
from rewardbox.report import (
    PNG_MAGIC,
    band_histogram_png,
    band_table,
    markdown_preview,
    markdown_table,
    reliability_png,
    reliability_tables,
    render_report_markdown,
    training_curve_figure,
    training_curve_png,
)
from rewardbox.report.domain_tables import domain_frames
from rewardbox.selection import task_difficulty
from rewardbox.selection.difficulty import band_summary

_PRICE = ModelPrice(
    usd_per_1m_input_tokens=1.0, usd_per_1m_cached_input_tokens=0.5, usd_per_1m_output_tokens=4.0
)
PRICES = PriceTable(version="test-v1", models={"base-model": _PRICE, "tuned-model": _PRICE})


def make_rows(spec: dict[str, tuple[str, list]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "uid": uid,
                "trial": t,
                "domain": domain,
                "reward": None if o is None else float(o),
                "passed": None if o is None else bool(o),
                "system_error": "endpoint: 503" if o is None else None,
                "input_tokens": 1000,
                "cached_input_tokens": 200,
                "output_tokens": 100,
            }
            for uid, (domain, outs) in spec.items()
            for t, o in enumerate(outs)
        ]
    )


BASE = make_rows(
    {"a": ("retail", [1, 1, 0, 0]), "b": ("retail", [0, 0, 0, 0]), "c": ("airline", [1, 1, 1, 1])}
)
TUNED = make_rows(
    {"a": ("retail", [1, 1, 1, 1]), "b": ("retail", [1, 0, 1, 0]), "c": ("airline", [1, 1, 1, 0])}
)


def _row(table: str, label: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_overall_table_numbers():
    tables = reliability_tables(
        BASE, TUNED, 4, PRICES, base_model="base-model", tuned_model="tuned-model"
    )
    overall = tables["overall"]
    # pass@1: base 6/12, tuned 9/12.
    assert _row(overall, "pass@1")[1].startswith("50.00% [")
    assert _row(overall, "pass@1")[2].startswith("75.00% [")
    # Three tasks: the paired task-level bootstrap cannot tell +25 pts from noise.
    assert _row(overall, "pass@1")[0] == "pass@1 (95% task-level bootstrap)"
    assert _row(overall, "pass@1")[3].startswith("+25.00 pts [")
    assert _row(overall, "pass@1")[3].endswith(", within noise")  # three tasks: resamples disagree
    # pass@4 at k = n: tasks solved at least once; base a, c; tuned a, b, c.
    assert [cell.split(" [")[0] for cell in _row(overall, "pass@4")[1:3]] == ["66.67%", "100.00%"]
    # pass^4 at k = n: observed 4/4 share; base c; tuned a.
    assert [cell.split(" [")[0] for cell in _row(overall, "pass^4 (all")[1:3]] == [
        "33.33%",
        "33.33%",
    ]
    # plug-in (c/n)^4: base (0.0625 + 0 + 1)/3; tuned (1 + 0.0625 + 0.3164)/3.
    plug = _row(overall, "pass^4 plug-in")
    assert plug[1:3] == [f"{100 * 1.0625 / 3:.2f}%", f"{100 * (1 + 0.0625 + 0.75**4) / 3:.2f}%"]
    assert _row(overall, "observed 4/4 tasks")[1:4] == ["1 of 3", "1 of 3", "+0"]
    assert _row(overall, "system errors")[1:3] == ["0", "0"]
    assert _row(overall, "input tokens")[1:3] == ["12,000", "12,000"]
    # Attempt cost: (800 x 1 + 200 x 0.5 + 100 x 4) / 1e6 = $0.0013.
    # Per successful trial: 3 x 0.0013 / (3 x pass@1).
    assert _row(overall, "cost per successful trial")[1:3] == ["$0.0026", f"${0.0039 / 2.25:.4f}"]
    assert _row(overall, "cost per dependable task")[1:3] == ["$0.0156", "$0.0156"]
    assert "prices test-v1" in overall
    p_tuned = float(_row(overall, "P(tuned better)")[2])
    assert 0.5 < p_tuned <= 1.0


def test_domain_and_task_tables():
    tables = reliability_tables(
        BASE, TUNED, 4, PRICES, base_model="base-model", tuned_model="tuned-model"
    )
    retail = _row(tables["per_domain"], "retail")  # the pass@1 table: one row per domain and policy
    assert (
        retail[1:3] == ["base", "25.00%"] and retail[3].startswith("[") and retail[4] == "2"
    )  # 2 clean tasks
    assert "| retail | tuned | 75.00% |" in tables["per_domain"]
    # both retail tasks gained 2 of 4: every resample agrees, but 2 tasks both up give p = 1/4 (issue #23 item 7)
    assert "| retail | +50.00 [+50.00, +50.00] | within noise |" in tables["per_domain"]
    task_a = _row(tables["per_task"], "a")
    assert task_a[1:4] == ["retail", "2/4", "4/4"]
    assert float(task_a[4]) > 0.9
    assert float(_row(tables["per_task"], "c")[4]) < 0.5


def test_omitted_k_and_missing_prices_are_explained():
    tuned = make_rows(
        {
            "a": ("retail", [1, None, 1, 1]),
            "b": ("retail", [1, 0, 1, 0]),
            "c": ("airline", [1, 1, 1, 0]),
        }
    )
    tables = reliability_tables(BASE, tuned, 4, None)
    overall = tables["overall"]
    assert "n/a (k = 4 exceeds the smallest clean trial count n = 3)" in _row(overall, "pass@4")[2]
    assert _row(overall, "system errors")[2] == "1"
    assert _row(overall, "tasks passing all their clean trials")[2] == "1 of 3"
    assert "no price table" in overall


def test_unmatched_tasks_are_listed_and_missing_price_raises():
    tuned = TUNED.filter(pl.col("uid") != "b")
    result = compute_reliability(BASE, tuned, 4, None)
    assert result.comparison["unmatched_tasks"] == ["b"]
    with pytest.raises(KeyError, match="base"):
        reliability_tables(BASE, TUNED, 4, PRICES)  # default model names are not in the table


def test_markdown_table_escapes_pipes():
    text = markdown_table(pl.DataFrame({"x": ["a|b", None]}))
    assert text.splitlines() == ["| x |", "|---|", "| a\\|b |", "|  |"]


def test_plots_are_png():
    difficulty = task_difficulty(BASE)
    assert band_histogram_png(difficulty).startswith(PNG_MAGIC)
    assert band_histogram_png(difficulty.drop("domain")).startswith(PNG_MAGIC)
    base, tuned = summarise_campaign(BASE, [1, 2, 4]), summarise_campaign(TUNED, [1, 2, 4])
    assert reliability_png(base, tuned).startswith(PNG_MAGIC)
    steps = [
        {"step": i, "mean_reward": 0.1 * i, "zero_variance_frac": 0.5, "loss": 0.01 * i}
        for i in range(5)
    ]
    assert training_curve_png(steps).startswith(PNG_MAGIC)
    assert training_curve_png(pl.DataFrame(steps).drop("loss", "step")).startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="empty"):
        training_curve_png([])
    with pytest.raises(ValueError, match="none of"):
        training_curve_png([{"step": 0, "other": 1.0}])


def test_band_table_and_document():
    difficulty = task_difficulty(BASE)
    bands = band_table(difficulty)
    assert bands.splitlines()[0] == "| domain | too_hard | hard | medium | easy | too_easy |"
    assert _row(bands, "retail")[1:] == ["1", "0", "1", "0", "0"]  # b 0/4 too_hard, a 2/4 medium
    tables = reliability_tables(BASE, TUNED, 4, None)
    doc = render_report_markdown(
        tables, {"pass curves": "reliability.png"}, extra_sections={"Difficulty": bands}
    )
    assert doc.startswith("# Reliability report\n")
    assert "![pass curves](reliability.png)" in doc
    order = [
        doc.index(h)
        for h in ("## Overall", "![pass curves]", "## Per domain", "## Per task", "## Difficulty")
    ]
    assert order == sorted(order)
    assert tables["per_task"] in doc


def test_k_axis_has_integer_ticks_only():
    from rewardbox.report import reliability_figure

    base, tuned = summarise_campaign(BASE, [1, 2, 3, 4]), summarise_campaign(TUNED, [1, 2, 3, 4])
    fig = reliability_figure(base, tuned)
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_markdown_preview_rounds_floats_and_says_what_it_left_out():
    frame = pl.DataFrame(
        {"uid": [f"t{i}" for i in range(5)], "pass_at_1": [0.12345, None, 1.0, 0.5, 0.25]}
    )
    text = markdown_preview(frame, max_rows=3)
    assert text.splitlines()[:5] == [
        "| uid | pass_at_1 |",
        "|---|---|",
        "| t0 | 0.123 |",
        "| t1 |  |",
        "| t2 | 1.000 |",
    ]
    assert (
        text.endswith("… 2 more rows") and markdown_preview(frame).count("\n") == 6
    )  # all rows: no note


def test_training_curve_has_integer_step_ticks_and_fits_the_ui_dialog():
    one = training_curve_figure([{"step": 1, "mean_reward": 0.5, "loss": 0.1}])
    for ax in one.axes:
        assert list(ax.get_xticks()) == [1.0]  # not -0.04 .. 0.04 around the one step
    steps = [
        {
            "step": i,
            "mean_reward": 0.1,
            "zero_variance_frac": 0.2,
            "loss": 0.3,
            "clip_frac": 0.0,
            "logprob_gap_max": 0.01,
        }
        for i in range(7)
    ]
    fig = training_curve_figure(steps)
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(visible) == 5
    assert all(float(t).is_integer() for ax in visible for t in ax.get_xticks())
    width_px = fig.get_size_inches()[0] * 110  # the PNG's dpi
    assert (
        width_px <= 0.8 * 1600 - 40
    )  # Dagster's dialog: at most 80 % of the window, 20 px padding a side


def test_band_summary_lists_every_band_in_order_with_named_columns():
    difficulty = task_difficulty(BASE)
    summary = band_summary(difficulty)
    assert summary.columns[:2] == ["band", "tasks"] and "len" not in summary.columns
    assert summary["band"].to_list() == ["too_hard", "hard", "medium", "easy", "too_easy"]
    assert summary["tasks"].sum() == difficulty.height
    assert band_summary(difficulty.drop("domain")).columns == ["band", "tasks"]


def test_per_domain_tables_are_narrow_and_keep_the_numbers():
    rel = compute_reliability(
        BASE, TUNED, 4, PRICES, base_model="base-model", tuned_model="tuned-model"
    )
    frames = domain_frames(rel)
    assert list(frames) == [
        "pass@1",
        "pass@1 change",
        "pass@4",
        "pass^4",
        "cost (USD, prices test-v1)",
    ]
    retail = frames["pass@1 change"].filter(pl.col("domain") == "retail").row(0, named=True)
    # every resample agrees, but 2 tasks both up give a sign-flip p of 1/4: within noise (issue #23 item 7)
    assert (retail["tuned - base (pts)"], retail["verdict"]) == (
        "+50.00 [+50.00, +50.00]",
        "within noise",
    )
    cost = frames["cost (USD, prices test-v1)"].filter(
        (pl.col("domain") == "retail") & (pl.col("policy") == "base")
    )
    assert (
        cost.row(0, named=True)["total"] == f"${2 * 4 * 0.0013:.4f}"
    )  # 2 retail tasks x 4 trials x $0.0013
    assert "cost (USD" not in domain_frames(compute_reliability(BASE, TUNED, 4, None))
    # Fits the Dagster UI's metadata value column at a 1600 px window: about 560 px, 12 px monospace at about
    # 7.3 px a character, 24 px of padding a cell (measured in tests/ui/test_dagster_ui.py's screenshots).
    for frame in frames.values():
        widths = [max(len(name), *(len(str(v)) for v in frame[name])) for name in frame.columns]
        assert 7.3 * sum(widths) + 24 * len(widths) <= 520, (frame.columns, widths)
