"""Metadata helpers shared by the asset modules: tables, images, hashes."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from pathlib import Path

import dagster as dg
import polars as pl
from rewardbox.config.profile import Profile
from rewardbox.policy.parity import check_parity, load_recorded, served_paths, shipped_corpus
from rewardbox.report.tables import markdown_preview
from rewardbox.tasks.schema import Task


def md_table(df: pl.DataFrame, max_rows: int = 30) -> dg.MetadataValue:
    """A markdown table of the first ``max_rows`` rows (floats to 3 decimals), as metadata
    (``rewardbox.report.tables.markdown_preview``: the report's one table renderer)."""
    return dg.MetadataValue.md(markdown_preview(df, max_rows))


def md_image(png: bytes, alt: str) -> dg.MetadataValue:
    """A PNG embedded in markdown metadata (shown inline in the Dagster UI)."""
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})")


# Dagster's UI (1.13) shows a markdown metadata value in place when it is shorter than this;
# a longer one sits behind a "[Show Markdown]" button.
INLINE_MD_LIMIT = 1000


def md_inline(markdown: str) -> dict[str, dg.MetadataValue]:
    """``{"plot_inline": markdown}`` when it is short enough to show in place, else ``{}``."""
    return {"plot_inline": dg.MetadataValue.md(markdown)} if len(markdown) < INLINE_MD_LIMIT else {}


def tasks_hash(tasks: Iterable[Task]) -> str:
    """Short SHA-256 over the tasks' uids and content hashes (the input identity)."""
    digest = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.uid):
        digest.update(f"{task.uid}:{task.content_hash()}\n".encode())
    return digest.hexdigest()[:16]


def tasks_frame(tasks: Iterable[Task]) -> pl.DataFrame:
    rows = [{"uid": t.uid, "domain": t.domain, "golden_calls": len(t.golden_interactions()),
             "tags": ",".join(t.tags)} for t in tasks]
    return pl.DataFrame(rows, schema={"uid": pl.Utf8, "domain": pl.Utf8, "golden_calls": pl.Int64, "tags": pl.Utf8})


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
    return dg.AssetCheckResult(passed=report.passed, metadata={
        "completions": report.checked, "corpus": len(corpus), "recorded": len(recorded),
        "paths": dg.MetadataValue.json(list(report.paths)), "mismatches": len(report.mismatches),
        "examples": dg.MetadataValue.json(report.mismatches[:10]), "recorded_file": dg.MetadataValue.path(str(recorded_path)),
    })
