"""The probe stages from a profile: the base policy's probes and the reference policy's gate.

Both go through ``rewardbox.runtime.stages.run_campaign_stage`` (journal, serving, parity recorder,
clean-trial gate, journal discard), or read an imported ``tb infer`` run.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.campaign import ROW_SCHEMA, system_error_counts
from rewardbox.episode.clean_trials import require_clean
from rewardbox.episode.run import run_trials
from rewardbox.metrics.campaign import summarise_campaign
from rewardbox.policy.factory import build_policy
from rewardbox.policy.parity import ParityRecorder
from rewardbox.runtime.stages import (
    StageIO,
    StageRun,
    Wiring,
    campaign_metadata,
    imported_rows,
    run_campaign_stage,
)
from rewardbox.selection.config import ProbeConfig
from rewardbox.selection.family_probes import FamilyProbeRun, probe_by_family
from rewardbox.selection.reference import reference_verdicts, successes_histogram, verdict_counts
from rewardbox.selection.reference_config import ReferenceConfig
from rewardbox.selection.reference_probes import probe_reference, remaining_system_errors
from rewardbox.tasks.schema import Task


def probe(
    profile: Profile, tasks: Sequence[Task], checkpoint: str, input_hash: str, io: StageIO
) -> StageRun:
    """``probe.trials`` trials of every candidate with the base policy, or an imported ``tb infer`` run.

    With ``probe.family_screening`` set, only the candidates family-level screening picks are probed
    (``rewardbox.selection.family_probes.probe_by_family``): the gate checks those, the others get no
    rows, and the metadata's ``family_screening`` says how many were probed per round, how many families
    were mixed and how many candidates were left unprobed (``tasks`` counts the probed ones).

    With ``serving.kind: vllm`` the checkpoint is served for the probes; a sample of raw completions
    goes to ``<data>/parity/probe_results.json`` (an import writes an empty sample: corpus only).

    Raises:
        UncleanCampaignError: see :func:`run_campaign_stage`.
    """
    config_hash = profile.section_hash("probe", "policy", "episode")
    screened: FamilyProbeRun | None = None
    if profile.probe.import_results:
        rows = imported_rows(profile.probe.import_results, tasks, io, "probe")
        ParityRecorder().write(io.path("parity", "probe_results.json"))
        stage = {
            "clean_trial_gate": require_clean(
                rows, profile.system_errors, "probe_results"
            ).metadata()
        }
    else:
        served = [profile.section_hash("serving")] if profile.serving.kind != "none" else []
        play = partial(_play_probe, tasks, profile.probe, checkpoint, io)
        rows, screened, stage = run_campaign_stage(
            profile,
            "probe_results",
            [config_hash, input_hash, checkpoint, *served],
            io,
            play,
            checkpoint=checkpoint,
            expected_uids=FamilyProbeRun.probed_uids
            if profile.probe.family_screening
            else [t.uid for t in tasks],
        )
        stage.pop("policy_kind")
    summary = rows.group_by("termination_reason").len().sort("len", descending=True)
    return StageRun(
        rows,
        {
            **campaign_metadata(rows),
            "tasks": len(tasks) if screened is None else len(screened.probed_uids()),
            "trials": profile.probe.trials,
            "pass_rate": summarise_campaign(rows, [1])["pass_at_1"] or 0.0,
            "termination_reasons": summary,
            "sample": rows.head(20),
            "config_hash": config_hash,
            "input_hash": input_hash,
            **({} if screened is None else {"family_screening": screened.metadata()}),
            **stage,
        },
    )


def _play_probe(
    tasks: Sequence[Task], config: ProbeConfig, checkpoint: str, io: StageIO, w: Wiring
) -> tuple[pl.DataFrame, FamilyProbeRun | None]:
    """The probe campaign of :func:`probe` on the wiring ``run_campaign_stage`` made: every candidate,
    or the two rounds of family-level screening on the same journal."""
    policy = io.make_policy(checkpoint, w.policy_config)
    if config.family_screening is not None:
        run = probe_by_family(
            tasks,
            config.trials,
            policy,
            w.parts,
            config.family_screening,
            journal=w.journal,
            log=io.log,
            on_result=w.recorder.record,
            executor=io.executor,
        )
        return run.rows, run
    rows, _ = run_trials(
        tasks,
        config.trials,
        policy,
        w.parts,
        log=io.log,
        label="probe_results",
        journal=w.journal,
        on_result=w.recorder.record,
        keep_results=False,
        executor=io.executor,
    )
    return rows, None


REFERENCE_SKIPPED = "skipped: no reference configured"


def reference_source(config: ReferenceConfig) -> str:
    """The imported file, or the endpoint's model and ``host:port`` (never credentials a URL may carry)."""
    if config.import_results:
        return f"tb infer run {config.import_results}"
    url = urlsplit(config.policy.base_url)
    return f"{config.policy.model} at {url.hostname}:{url.port or ''}".rstrip(":")


def _reference_rows(
    profile: Profile, tasks: Sequence[Task], config_hash: str, input_hash: str, io: StageIO
) -> tuple[pl.DataFrame, int, dict[str, Any]]:
    """The reference's trial rows (imported, or probed live with refills), the refilled system errors, gate."""
    config = profile.reference
    if config.import_results:
        rows = imported_rows(config.import_results, tasks, io, "reference")
        return (
            rows,
            0,
            {
                "clean_trial_gate": require_clean(
                    rows, profile.system_errors, "reference_probe_results"
                ).metadata()
            },
        )

    def play(w: Wiring) -> tuple[pl.DataFrame, int]:
        run = probe_reference(
            tasks,
            config,
            build_policy(config.policy),
            w.parts,
            journal=w.journal,
            log=io.log,
            executor=io.executor,
        )
        return run.rows, run.refilled_system_errors

    identity = [config_hash, profile.section_hash("sandbox", "user", "grading"), input_hash]
    rows, refilled, stage = run_campaign_stage(
        profile,
        "reference_probe_results",
        identity,
        io,
        play,
        expected_uids=[t.uid for t in tasks],
        parity=False,
    )
    stage.pop("policy_kind")
    return rows, refilled, stage


def reference_probe(
    profile: Profile, tasks: Sequence[Task], input_hash: str, io: StageIO
) -> StageRun:
    """The reference policy's trials of every candidate, the pool's first gate (docs/method.md, "Reference
    screening"): ``reference.min_clean_runs`` trials with system errors refilled, or an imported run.

    Without a ``reference`` section: no rows, and ``status`` says it was skipped.

    Raises:
        UncleanCampaignError: see :func:`run_campaign_stage`.
    """
    config, config_hash = profile.reference, profile.section_hash("reference", "episode")
    if config is None:
        return StageRun(
            pl.DataFrame(schema=ROW_SCHEMA),
            {"status": REFERENCE_SKIPPED, "config_hash": config_hash},
        )
    rows, refilled, stage = _reference_rows(profile, tasks, config_hash, input_hash, io)
    verdicts = reference_verdicts(rows, config)
    return StageRun(
        rows,
        {
            "status": f"probed ({config.rule} rule)",
            "source": reference_source(config),
            "tasks_probed": verdicts.height,
            "trials": rows.height,
            **verdict_counts(verdicts),
            "tasks_not_probed": len({t.uid for t in tasks} - set(verdicts["uid"])),
            "system_errors": remaining_system_errors(rows),
            "system_errors_refilled": refilled,
            "system_errors_by_kind": system_error_counts(rows),
            "successes_histogram": successes_histogram(verdicts),
            "verdicts": verdicts,
            "config_hash": config_hash,
            "input_hash": input_hash,
            **stage,
        },
    )
