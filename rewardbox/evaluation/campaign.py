"""Kept for users of the old path: campaigns now live in ``rewardbox.episode.campaign``."""

from rewardbox.episode.campaign import (
    LEGACY_COLUMNS,
    ROW_SCHEMA,
    AttemptFn,
    TrialFn,
    campaign_keys,
    coverage_problems,
    merge_repair,
    repair_keys,
    result_row,
    results_frame,
    rows_frame,
    run_campaign,
    system_error_counts,
    upgrade_rows,
)

__all__ = ["LEGACY_COLUMNS", "ROW_SCHEMA", "AttemptFn", "TrialFn", "campaign_keys", "coverage_problems", "merge_repair",
           "repair_keys", "result_row", "results_frame", "rows_frame", "run_campaign", "system_error_counts",
           "upgrade_rows"]
