"""The clean-trial gate: a campaign that could not produce clean trials fails, never goes green.

A *clean* trial is one that ended without a system error (it has a reward, pass or fail). After
the retries (``episode.max_system_error_retries``) and the campaign's own repair or refill pass,
some trials may still be system errors. A few are tolerated (their keys are reported and left
out of the metrics); a campaign where they dominate measures the infrastructure, not the policy,
and everything downstream of it (difficulty bands, the training pool, the report) would act on
nothing. The profile's ``system_errors`` section sets the bound (docs/configuration.md,
"System errors: the clean-trial gate"):

- ``every_task_clean`` (default true): every task has at least one clean trial;
- ``max_frac`` (default 0.2): at most this share of the campaign's trials are system errors.

The Dagster assets of every campaign (screening, probes, reference probes, evaluations, checkpoint
evaluations) fail when :func:`clean_trial_verdict` does not pass; the failure names the counts
per kind and a sample of the causes. The journal of a failed campaign is kept, so a rerun after
the fault is fixed plays only the trials that were not clean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import polars as pl
from pydantic import BaseModel, ConfigDict, Field


class SystemErrorBound(BaseModel):
    """How many system errors a campaign may keep after retries and repair (profile key ``system_errors``).

    Attributes:
        max_frac: the largest share of trials (0..1) that may remain system errors.
        every_task_clean: every task must have at least one clean trial.
    """

    model_config = ConfigDict(extra="forbid")

    max_frac: float = Field(0.2, ge=0.0, le=1.0)
    every_task_clean: bool = True


@dataclass(frozen=True)
class CleanTrialVerdict:
    """The gate's answer for one campaign.

    Attributes:
        trials: rows (trials) in the campaign.
        system_errors: rows still a system error.
        system_error_frac: ``system_errors / trials`` (0.0 for an empty campaign).
        by_kind: system errors left per ``system_error_kind`` (``"system_error"`` when unknown).
        tasks_without_clean_trial: uids with no clean trial, sorted.
        problems: why the gate fails, one line each; empty when it passes.
        causes: up to 3 distinct system-error messages, for the failure's text.
    """

    trials: int
    system_errors: int
    system_error_frac: float
    by_kind: dict[str, int]
    tasks_without_clean_trial: list[str]
    problems: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def message(self, label: str) -> str:
        """One paragraph for a person: what failed, the counts per kind, and sample causes."""
        kinds = ", ".join(f"{kind} x{count}" for kind, count in self.by_kind.items()) or "none"
        lines = [
            f"{label}: the campaign could not produce clean trials: " + "; ".join(self.problems),
            f"system errors by kind: {kinds}",
        ]
        lines += [f"cause: {cause}" for cause in self.causes]
        return "\n".join(lines)

    def metadata(self) -> dict:
        """Plain values for asset metadata (JSON-safe)."""
        return {
            "trials": self.trials,
            "system_errors": self.system_errors,
            "system_error_frac": round(self.system_error_frac, 4),
            "by_kind": dict(self.by_kind),
            "tasks_without_clean_trial": self.tasks_without_clean_trial[:50],
            "problems": list(self.problems),
        }


def clean_trial_verdict(
    rows: pl.DataFrame, bound: SystemErrorBound, *, expected_uids: list[str] | None = None
) -> CleanTrialVerdict:
    """Apply ``bound`` to a campaign's rows.

    Args:
        rows: one row per trial with ``uid`` and ``system_error`` (null when clean); an optional
            ``system_error_kind`` names each error's kind (``rewardbox.errors``).
        bound: the profile's ``system_errors`` section.
        expected_uids: the tasks the campaign was asked to run; a task with no row at all counts
            as a task without a clean trial (None: the uids in ``rows``).

    Returns:
        The verdict; ``passed`` is False when a task has no clean trial (with ``every_task_clean``)
        or the share of system-error trials is above ``max_frac``. An empty campaign with no
        expected tasks passes (there was nothing to run).
    """
    errors = rows.filter(pl.col("system_error").is_not_null())
    kinds = (
        errors["system_error_kind"].fill_null("system_error").to_list()
        if "system_error_kind" in rows.columns
        else ["system_error"] * errors.height
    )
    clean_uids = set(rows.filter(pl.col("system_error").is_null())["uid"].to_list())
    uids = list(
        dict.fromkeys(expected_uids if expected_uids is not None else rows["uid"].to_list())
    )
    without = sorted(u for u in uids if u not in clean_uids)
    frac = errors.height / rows.height if rows.height else 0.0
    problems = []
    if bound.every_task_clean and without:
        problems.append(
            f"{len(without)} of {len(uids)} task(s) have no clean trial (e.g. {', '.join(without[:3])})"
        )
    if frac > bound.max_frac:
        problems.append(
            f"{errors.height} of {rows.height} trials ({frac:.0%}) are system errors, "
            f"above system_errors.max_frac={bound.max_frac:g}"
        )
    causes = list(dict.fromkeys(str(c)[:300] for c in errors["system_error"].to_list()))[:3]
    return CleanTrialVerdict(
        trials=rows.height,
        system_errors=errors.height,
        system_error_frac=frac,
        by_kind=dict(sorted(Counter(kinds).items())),
        tasks_without_clean_trial=without,
        problems=problems,
        causes=causes,
    )


class UncleanCampaignError(RuntimeError):
    """A campaign broke the ``system_errors`` bound: a system error of the stage, never a policy failure.

    The message is :meth:`CleanTrialVerdict.message`; ``verdict`` holds the counts. The Dagster layer
    turns it into ``dagster.Failure`` (nothing stored, the campaign's journal kept for a rerun).
    """

    def __init__(self, verdict: CleanTrialVerdict, label: str):
        super().__init__(verdict.message(label))
        self.verdict, self.label = verdict, label


def require_clean(
    rows: pl.DataFrame, bound: SystemErrorBound, label: str, expected_uids: list[str] | None = None
) -> CleanTrialVerdict:
    """:func:`clean_trial_verdict`, raising when the campaign fails it.

    Returns:
        The passing verdict (its ``metadata()`` goes into the asset's metadata).

    Raises:
        UncleanCampaignError: the bound is broken (names the problems, kinds and causes).
    """
    verdict = clean_trial_verdict(rows, bound, expected_uids=expected_uids)
    if not verdict.passed:
        raise UncleanCampaignError(verdict, label)
    return verdict
