"""Trial rows -> per-task clean counts (the one place that reads the row schema).

A *trial row* is one (uid, trial) outcome, as written by
``EpisodeResult.to_row``: ``uid``, ``trial``, ``reward``, ``passed``,
``system_error``, optional ``domain``, and token counts ``input_tokens``,
``cached_input_tokens``, ``output_tokens``.

``system_error`` may be a string column (None / "" for a scored trial, else
``"<kind>: <message>"``, the ``EpisodeResult`` convention) or a boolean column.
A system-error trial is not a failure: it is dropped from n and c and
counted in its own column. A clean trial succeeds when ``passed`` is true;
when the ``passed`` column is absent, when ``reward >= 1``.
"""

from __future__ import annotations

import polars as pl

REQUIRED_COLUMNS = ("uid", "trial", "system_error")
TOKEN_COLUMNS = ("input_tokens", "cached_input_tokens", "output_tokens")


def _check_columns(rows: pl.DataFrame, what: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if "passed" not in rows.columns and "reward" not in rows.columns:
        missing.append("passed (or reward)")
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing}; have {rows.columns}")


def system_error_expr(rows: pl.DataFrame) -> pl.Expr:
    """Boolean expression: the row is a system error (string or bool column)."""
    dtype = rows.schema["system_error"]
    col = pl.col("system_error")
    if dtype == pl.Boolean:
        return col.fill_null(False)
    if dtype == pl.Null:
        return pl.lit(False)
    return col.is_not_null() & (col.cast(pl.Utf8) != "")


def with_outcome(rows: pl.DataFrame, what: str = "trial rows") -> pl.DataFrame:
    """Add boolean columns ``is_system_error`` and ``success`` (null on system errors).

    Args:
        rows: trial rows (see module docstring).
        what: name of the table, used in error messages (for example a file path).

    Raises:
        ValueError: a required column is missing, a (uid, trial) key repeats, or a
            clean trial has no outcome (``passed``/``reward`` null); the message
            names the column and the first offending uid and trial.
    """
    _check_columns(rows, what)
    dupes = rows.group_by("uid", "trial").len().filter(pl.col("len") > 1)
    if dupes.height:
        first = dupes.row(0, named=True)
        raise ValueError(
            f"{what}: (uid, trial) = ({first['uid']!r}, {first['trial']}) appears {first['len']} times; "
            f"{dupes.height} key(s) repeat"
        )
    outcome = (
        pl.col("passed").cast(pl.Boolean) if "passed" in rows.columns else pl.col("reward") >= 1.0
    )
    out = rows.with_columns(is_system_error=system_error_expr(rows))
    out = out.with_columns(success=pl.when(pl.col("is_system_error")).then(None).otherwise(outcome))
    bad = out.filter(~pl.col("is_system_error") & pl.col("success").is_null())
    if bad.height:
        first = bad.row(0, named=True)
        field = "passed" if "passed" in rows.columns else "reward"
        raise ValueError(
            f"{what}: field {field!r} is null for clean trial (uid={first['uid']!r}, trial={first['trial']}); "
            f"{bad.height} row(s) affected. Mark infrastructure faults in 'system_error' instead."
        )
    return out


def task_counts(rows: pl.DataFrame, what: str = "trial rows") -> pl.DataFrame:
    """Per-task clean counts, sorted by uid.

    Returns:
        One row per uid: ``uid``, ``domain`` (if present; first value), ``n``
        (clean trials), ``c`` (successes), ``system_errors``, ``trials``
        (all rows), and token sums over clean trials (``input_tokens``,
        ``cached_input_tokens``, ``output_tokens``; 0 when the column is absent).
        A task whose every trial was a system error has ``n = 0``.
    """
    out = with_outcome(rows, what)
    aggs = [
        (~pl.col("is_system_error")).sum().cast(pl.Int64).alias("n"),
        pl.col("success").fill_null(False).sum().cast(pl.Int64).alias("c"),
        pl.col("is_system_error").sum().cast(pl.Int64).alias("system_errors"),
        pl.len().cast(pl.Int64).alias("trials"),
    ]
    if "domain" in out.columns:
        aggs.append(pl.col("domain").first())
    for name in TOKEN_COLUMNS:
        expr = pl.col(name).fill_null(0) if name in out.columns else pl.lit(0)
        clean_expr = pl.when(pl.col("is_system_error")).then(0).otherwise(expr)
        aggs.append(clean_expr.sum().cast(pl.Int64).alias(name))
    return out.group_by("uid").agg(aggs).sort("uid")
