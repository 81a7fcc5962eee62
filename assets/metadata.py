"""Metadata helpers shared by the asset modules: tables, images, task counts, the parser-parity check."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.policy.parity import check_parity, load_recorded, served_paths, shipped_corpus
from rewardbox.report import training_curve_png
from rewardbox.report.inline_svg import fitted_markdown, training_svg
from rewardbox.report.tables import markdown_preview
from rewardbox.tasks.schema import Task


def md_table(df: pl.DataFrame, max_rows: int = 30) -> dg.MetadataValue:
    """A markdown table of the first ``max_rows`` rows (floats to 3 decimals), as metadata
    (``rewardbox.report.tables.markdown_preview``: the report's one table renderer)."""
    return dg.MetadataValue.md(markdown_preview(df, max_rows))


def md_image(png: bytes, alt: str) -> dg.MetadataValue:
    """A PNG embedded in markdown metadata (shown inline in the Dagster UI)."""
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})")


def md_chart(key: str, markdown: str | None) -> dict[str, dg.MetadataValue]:
    """``{key: markdown}`` for a chart of ``rewardbox.report.inline_svg.fitted_markdown`` (short enough for the
    Dagster UI to show in place), ``{}`` when it did not fit."""
    return {key: dg.MetadataValue.md(markdown)} if markdown is not None else {}


def training_curve_metadata(step_rows: list[dict]) -> dict[str, dg.MetadataValue]:
    """``training_curve``: mean reward and loss vs step, shown in place; ``training_curve_png``: every metric
    (``rewardbox.report.training_curve_png``, sized for the UI's metadata dialog at 1600 px)."""
    inline = fitted_markdown(
        lambda most: training_svg(step_rows, most), "mean reward and loss per step"
    )
    return {
        **md_chart("training_curve", inline),
        "training_curve_png": md_image(training_curve_png(step_rows), "training curve"),
    }


def as_metadata(values: dict[str, Any]) -> dict[str, Any]:
    """A stage's plain metadata as Dagster metadata: tables as markdown, dicts and lists as JSON, paths as paths."""

    def wrap(value: Any) -> Any:
        if isinstance(value, pl.DataFrame):
            return md_table(value)
        if isinstance(value, (dict, list, tuple)):
            return dg.MetadataValue.json(value)
        return dg.MetadataValue.path(str(value)) if isinstance(value, Path) else value

    return {key: wrap(value) for key, value in values.items()}


_TABLE_TYPES = {pl.Int64: "int", pl.Int32: "int", pl.Float64: "float", pl.Boolean: "bool"}


def table_value(df: pl.DataFrame, max_rows: int = 50) -> dg.MetadataValue:
    """The first ``max_rows`` rows as Dagster table metadata: named, typed columns, shown in place in the UI
    (a table entry never hides behind a button, unlike markdown over 1,000 characters); floats to 3 decimals."""
    df = df.head(max_rows).with_columns(pl.col(pl.Float64, pl.Float32).round(3))
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn(name, _TABLE_TYPES.get(dtype, "string"))
            for name, dtype in df.schema.items()
        ]
    )
    records = [
        dg.TableRecord(
            {
                k: (v if isinstance(v, (int, float, bool)) or v is None else str(v))
                for k, v in row.items()
            }
        )
        for row in df.iter_rows(named=True)
    ]
    return dg.MetadataValue.table(records, schema)


def tasks_frame(tasks: Iterable[Task]) -> pl.DataFrame:
    rows = [
        {
            "uid": t.uid,
            "domain": t.domain,
            "golden_calls": len(t.golden_interactions()),
            "tags": ",".join(t.tags),
        }
        for t in tasks
    ]
    return pl.DataFrame(
        rows, schema={"uid": pl.Utf8, "domain": pl.Utf8, "golden_calls": pl.Int64, "tags": pl.Utf8}
    )


def per_domain(tasks: Iterable[Task]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.domain] = counts.get(task.domain, 0) + 1
    return dict(sorted(counts.items()))


def parser_parity_result(profile: Profile, recorded_path: Path) -> dg.AssetCheckResult:
    """The parser-parity gate: the shipped corpus and the run's recorded completions read alike on every path.

    Fails (blocking) when any path (local training reading, endpoint text, vLLM hermes, replay, what the run
    executed) reads different tool names or arguments than the training path (``rewardbox.policy.parity``).
    """
    corpus, recorded = shipped_corpus(), load_recorded(recorded_path)
    report = check_parity(corpus + recorded, **served_paths(profile.serving, profile.policy))
    return dg.AssetCheckResult(
        passed=report.passed,
        metadata={
            "completions": report.checked,
            "corpus": len(corpus),
            "recorded": len(recorded),
            "paths": dg.MetadataValue.json(list(report.paths)),
            "mismatches": len(report.mismatches),
            "examples": dg.MetadataValue.json(report.mismatches[:10]),
            "recorded_file": dg.MetadataValue.path(str(recorded_path)),
        },
    )
