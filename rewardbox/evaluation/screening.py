"""Kept for users of the old path: task screening now lives in ``rewardbox.selection.screening``."""

from rewardbox.selection.screening import (
    NO_WRITE_TAG,
    SCREEN_SCHEMA,
    WRITE_TAG,
    expects_write,
    refused_golden_action,
    screen_tasks,
    screen_verdict,
    ungradable,
    write_evidence_counts,
    write_tag_mismatch,
)

__all__ = ["NO_WRITE_TAG", "SCREEN_SCHEMA", "WRITE_TAG", "expects_write", "refused_golden_action", "screen_tasks",
           "screen_verdict", "ungradable", "write_evidence_counts", "write_tag_mismatch"]
