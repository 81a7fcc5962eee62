"""The clean-trial gate on every campaign asset (``rewardbox.episode.clean_trials``).

A campaign whose trials are mostly system errors fails its asset: nothing is stored, the last good
materialisation stays current, downstream assets do not run, and the failure names the counts
per kind and sample causes. The campaign's journal is kept, so a rerun plays only the trials that
were not clean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import dagster as dg
import polars as pl

from rewardbox.episode.clean_trials import clean_trial_verdict
from rewardbox.config.profile import Profile


def require_clean_trials(rows: pl.DataFrame, profile: Profile, label: str,
                         expected_uids: Iterable[str] | None = None) -> dict[str, dg.MetadataValue]:
    """Fail the step when ``rows`` break the profile's ``system_errors`` bound.

    Returns:
        ``{"clean_trial_gate": ...}`` metadata for the asset when the gate passes.

    Raises:
        dagster.Failure: the bound is broken; the description names the problems, the kinds with
            their counts and up to 3 causes (a system error, never a policy failure).
    """
    uids = list(expected_uids) if expected_uids is not None else None
    verdict = clean_trial_verdict(rows, profile.system_errors, expected_uids=uids)
    gate = dg.MetadataValue.json(verdict.metadata())
    if not verdict.passed:
        raise dg.Failure(description=verdict.message(label), metadata={"clean_trial_gate": gate})
    return {"clean_trial_gate": gate}


def require_screened_candidates(report: pl.DataFrame, valid: int, profile: Profile, label: str) -> dict[str, dg.MetadataValue]:
    """The screen's gate: the clean-trial bound over its rows, and at least one valid candidate.

    A screen with candidates and none valid fails here with the reasons counted (e.g. every task
    invalid because its golden state cannot be built), not only through the blocking check.

    Raises:
        dagster.Failure: as :func:`require_clean_trials`, or no candidate is valid.
    """
    metadata = require_clean_trials(report, profile, label, report["uid"].to_list())
    if report.height and not valid:
        reasons = Counter(r.split(":")[0][:120] for r in report["reason"].fill_null("").to_list())
        lines = [f"{count} x {reason}" for reason, count in reasons.most_common(5)]
        raise dg.Failure(description=f"{label}: none of {report.height} candidate(s) passed the screen:\n"
                                     + "\n".join(lines),
                         metadata={"reasons": dg.MetadataValue.json(dict(reasons.most_common(20)))})
    return metadata
