"""The clean-trial gate on every campaign asset (``rewardbox.episode.clean_trials``), and what an asset lends a
campaign stage (``rewardbox.runtime.stages.StageIO``); what it writes goes through ``assets.metadata.as_metadata``.

A campaign whose trials are mostly system errors fails its asset: nothing is stored, the last good
materialisation stays current, downstream assets do not run, and the failure names the counts
per kind and sample causes. The campaign's journal is kept, so a rerun plays only the trials that
were not clean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import dagster as dg
import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.clean_trials import UncleanCampaignError, require_clean
from rewardbox.runtime.stages import StageIO


def require_clean_trials(
    rows: pl.DataFrame, profile: Profile, label: str, expected_uids: Iterable[str] | None = None
) -> dict[str, dg.MetadataValue]:
    """Fail the step when ``rows`` break the profile's ``system_errors`` bound.

    Returns:
        ``{"clean_trial_gate": ...}`` metadata for the asset when the gate passes.

    Raises:
        dagster.Failure: the bound is broken; the description names the problems, the kinds with
            their counts and up to 3 causes (a system error, never a policy failure).
    """
    uids = list(expected_uids) if expected_uids is not None else None
    with failure_on_unclean():
        verdict = require_clean(rows, profile.system_errors, label, uids)
    return {"clean_trial_gate": dg.MetadataValue.json(verdict.metadata())}


def require_screened_candidates(
    report: pl.DataFrame, valid: int, profile: Profile, label: str
) -> dict[str, dg.MetadataValue]:
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
        raise dg.Failure(
            description=f"{label}: none of {report.height} candidate(s) passed the screen:\n"
            + "\n".join(lines),
            metadata={"reasons": dg.MetadataValue.json(dict(reasons.most_common(20)))},
        )
    return metadata


@contextmanager
def failure_on_unclean() -> Iterator[None]:
    """Turn a stage's ``UncleanCampaignError`` into ``dagster.Failure`` (same description and gate metadata)."""
    try:
        yield
    except UncleanCampaignError as exc:
        gate = dg.MetadataValue.json(exc.verdict.metadata())
        raise dg.Failure(description=str(exc), metadata={"clean_trial_gate": gate}) from exc


def stage_io(
    context: Any, rewardbox: Any, profile: Profile, ray_cluster: Any = None, vllm_server: Any = None
) -> StageIO:
    """What the asset's resources lend a stage: paths under the profile's data directory, the executor
    (``ray_cluster``, built on first use; None: the profile's local one), vLLM serving (``vllm_server``; None: the profile's
    policy), the policy builder with the resource's API key, and ``context.log``."""
    executor = partial(ray_cluster.executor, profile, context) if ray_cluster is not None else None
    return StageIO(
        path=rewardbox.path,
        make_executor=executor,
        log=context.log,
        make_policy=rewardbox.policy,
        **({"serve": vllm_server.policy_config} if vllm_server is not None else {}),
    )
