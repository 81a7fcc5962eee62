"""Completions cut by the token budget, per campaign (probe and evaluation metadata, the report).

A completion that ends because ``max_new_tokens`` ran out (``finish_reason ==
"length"``) usually loses its tool call; a high rate means the budget, not the
policy, decides rewards (see ``rewardbox.episode.budget``).
"""

from __future__ import annotations

import polars as pl


def truncation_summary(rows: pl.DataFrame) -> dict[str, float | int]:
    """Completions cut by the token budget in a campaign's trial rows.

    Args:
        rows: trial rows with ``turns`` and ``truncated_turns`` (``campaign.ROW_SCHEMA``);
            rows without ``truncated_turns`` (imported runs) count as unknown.

    Returns:
        ``truncated_completions``, ``completions`` (agent turns of rows that record
        truncation), ``truncated_completion_frac`` (0-1; 0.0 when there are none),
        ``truncated_trials`` (trials with at least one cut completion).
    """
    if "truncated_turns" not in rows.columns:
        return {
            "truncated_completions": 0,
            "completions": 0,
            "truncated_completion_frac": 0.0,
            "truncated_trials": 0,
        }
    known = rows.filter(pl.col("truncated_turns").is_not_null())
    cut, turns = int(known["truncated_turns"].sum()), int(known["turns"].sum())
    return {
        "truncated_completions": cut,
        "completions": turns,
        "truncated_completion_frac": round(cut / turns, 4) if turns else 0.0,
        "truncated_trials": int((known["truncated_turns"] > 0).sum()),
    }
