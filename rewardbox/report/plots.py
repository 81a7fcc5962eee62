"""Report plots as PNG bytes (matplotlib Agg; no pyplot state, no files).

Each function builds a ``matplotlib.figure.Figure`` on an Agg canvas, so it is
safe to call from worker threads and never opens a window.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rewardbox.selection.bands import BANDS
from rewardbox.selection.difficulty import band_counts

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRAINING_CURVE_KEYS = ("mean_reward", "zero_variance_frac", "loss", "clip_frac", "logprob_gap_max")
"""Per-step metric names :func:`training_curve_png` plots (those present)."""


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def band_histogram_png(difficulty_df: pl.DataFrame) -> bytes:
    """Stacked bars: tasks per difficulty band (x), one colour per domain.

    Args:
        difficulty_df: output of ``rewardbox.selection.task_difficulty``
            (``band`` and optional ``domain``; unbanded tasks get their own bar).

    Returns:
        PNG bytes.
    """
    counts = band_counts(difficulty_df)
    bands = [b for b in counts["band"].unique(maintain_order=True).to_list()]
    bands = [b for b in BANDS if b in bands] + [b for b in bands if b not in BANDS]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    bottom = [0] * len(bands)
    for domain in sorted(counts["domain"].unique().to_list()):
        sub = counts.filter(pl.col("domain") == domain)
        by_band = dict(zip(sub["band"].to_list(), sub["tasks"].to_list()))
        heights = [by_band.get(b, 0) for b in bands]
        ax.bar(bands, heights, bottom=bottom, label=domain)
        bottom = [a + h for a, h in zip(bottom, heights)]
    ax.set_xlabel("difficulty band (Jeffreys posterior, base policy)")
    ax.set_ylabel("tasks")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Tasks per difficulty band")
    ax.legend(title="domain", fontsize="small")
    return _png(fig)


def reliability_png(summary_base: Mapping[str, Any], summary_tuned: Mapping[str, Any]) -> bytes:
    """pass@k and pass^k (unbiased) against k, base vs tuned, in two panels.

    Args:
        summary_base, summary_tuned: ``rewardbox.metrics.summarise_campaign``
            results (``pass_at_k`` and ``pass_hat_k`` dicts k -> fraction).

    Returns:
        PNG bytes of :func:`reliability_figure`. Omitted k are simply not plotted.
    """
    return _png(reliability_figure(summary_base, summary_tuned))


def reliability_figure(summary_base: Mapping[str, Any], summary_tuned: Mapping[str, Any]) -> Figure:
    """The figure behind :func:`reliability_png`; the k axis has integer ticks only."""
    return arms_figure([("base", summary_base), ("tuned", summary_tuned)])


def arms_png(arms: Sequence[tuple[str, Mapping[str, Any]]]) -> bytes:
    """:func:`reliability_png` for any number of labelled arms (e.g. base, warm start, warm start +
    GRPO: docs/warm_start.md), in the given order; PNG bytes of :func:`arms_figure`."""
    return _png(arms_figure(arms))


def arms_figure(arms: Sequence[tuple[str, Mapping[str, Any]]]) -> Figure:
    """pass@k and pass^k against k, one curve per ``(label, summary)`` arm, in two panels."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    styles = ("o--", "s-", "^-.", "d:")
    for ax, key, title in (
        (axes[0], "pass_at_k", "pass@k (at least one of k)"),
        (axes[1], "pass_hat_k", "pass^k (all k)"),
    ):
        for i, (label, summary) in enumerate(arms):
            style = styles[i % len(styles)]
            points = sorted((int(k), v) for k, v in summary[key].items())
            if points:
                ax.plot([p[0] for p in points], [100 * p[1] for p in points], style, label=label)
        ax.set_xlabel("k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # k counts trials: no 2.5
        ax.set_ylabel("% of tasks")
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    FigureCanvasAgg(fig)
    return fig


def _step_columns(step_metrics: pl.DataFrame | Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    df = (
        step_metrics if isinstance(step_metrics, pl.DataFrame) else pl.DataFrame(list(step_metrics))
    )
    if df.height == 0:
        raise ValueError("step_metrics is empty; nothing to plot")
    present = [
        key for key in TRAINING_CURVE_KEYS if key in df.columns and df[key].is_not_null().any()
    ]
    if not present:
        raise ValueError(
            f"step_metrics has none of {list(TRAINING_CURVE_KEYS)}; columns are {df.columns}"
        )
    steps = df["step"].to_list() if "step" in df.columns else list(range(df.height))
    return {
        "step": steps,
        **{key: [float("nan") if v is None else v for v in df[key].to_list()] for key in present},
    }


PANELS_PER_ROW = 3
PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 3.4, 2.8
"""Training-curve panel size (inches, at 110 dpi: 3 panels = about 1,130 px, inside the Dagster UI's
metadata dialog, which is at most 80 % of a 1600 px window)."""


def training_curve_png(step_metrics: pl.DataFrame | Sequence[Mapping[str, Any]]) -> bytes:
    """One panel per training metric against step: mean reward, zero-variance share, loss, clip share, log-prob gap.

    Args:
        step_metrics: one row per step (DataFrame or list of dicts) with
            ``step`` (optional; row index otherwise) and any of
            ``mean_reward`` (0-1), ``zero_variance_frac`` (0-1), ``loss``,
            ``clip_frac`` (0-1), ``logprob_gap_max`` (nats); all-null columns are skipped.

    Returns:
        PNG bytes of :func:`training_curve_figure`.

    Raises:
        ValueError: no rows, or none of the metric columns.
    """
    return _png(training_curve_figure(step_metrics))


def training_curve_figure(step_metrics: pl.DataFrame | Sequence[Mapping[str, Any]]) -> Figure:
    """The figure behind :func:`training_curve_png`: at most three panels a row (about 1,130 px wide at
    110 dpi), integer step ticks only (a one-step run shows its one step, not -0.04..0.04)."""
    columns = _step_columns(step_metrics)
    keys = [key for key in TRAINING_CURVE_KEYS if key in columns]
    cols = min(len(keys), PANELS_PER_ROW)
    rows = -(-len(keys) // cols)
    fig = Figure(figsize=(PANEL_WIDTH_IN * cols, PANEL_HEIGHT_IN * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    titles = {
        "mean_reward": "mean reward",
        "zero_variance_frac": "zero-variance groups (share)",
        "loss": "loss",
        "clip_frac": "clipped tokens (share)",
        "logprob_gap_max": "max |sampler - trainer| log-prob",
    }
    steps = [int(s) for s in columns["step"]]
    for ax, key in zip(axes, keys):
        ax.plot(steps, columns[key], "-", marker=".")
        ax.set_xlabel("step")
        ax.set_title(titles[key], fontsize="medium")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if min(steps) == max(steps):  # one step: matplotlib would pad the axis to +-0.04 around it
            ax.set_xlim(steps[0] - 1, steps[0] + 1)
            ax.set_xticks([steps[0]])
        ax.grid(alpha=0.3)
    for ax in axes[len(keys) :]:
        ax.set_axis_off()
    FigureCanvasAgg(fig)
    return fig
