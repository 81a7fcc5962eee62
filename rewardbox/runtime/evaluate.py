"""The evaluation stage from a profile: every benchmark task x ``evaluation.trials``, one repair pass.

Wired once by ``rewardbox.runtime.stages.run_campaign_stage`` (journal, serving, parity recorder,
clean-trial gate, journal discard); the campaign itself is ``rewardbox.evaluation.benchmark.run_evaluation``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.evaluation.benchmark import EVALUATION_JOURNAL_SCHEMA, run_evaluation
from rewardbox.metrics.campaign import summarise_by_domain, summarise_campaign
from rewardbox.runtime.stages import (
    StageIO,
    StageRun,
    Wiring,
    campaign_metadata,
    run_campaign_stage,
)
from rewardbox.tasks.schema import Task
from rewardbox.thinkingbox.interchange import write_decode_lines


def evaluate(
    profile: Profile,
    tasks: Sequence[Task],
    checkpoint: str,
    name: str,
    input_hash: str,
    io: StageIO,
    label: str | None = None,
) -> StageRun:
    """Every task x ``evaluation.trials`` trials of the policy on ``checkpoint``, one repair pass.

    Trials go to a crash-safe journal first, so a killed run resumes where it stopped (same config,
    tasks and checkpoint); the journal is removed once the rows pass the clean-trial gate. The trials
    are also written as ThinkingBox ``DecodeResult`` JSONL (``<data>/evaluation/<name>.jsonl``, which
    ``tb agg`` / ``tb sbs`` read) and a sample of raw completions for the parser-parity check
    (``<data>/parity/<name>.json``). With ``serving.kind: vllm`` the checkpoint is served by vLLM for the
    campaign and the episodes use an endpoint policy at it.

    Args:
        name: the campaign (asset name, with ``-<partition>`` for a partitioned asset).
        input_hash: the tasks' identity (part of the journal's identity and of the metadata).
        label: names the campaign in progress lines (default ``name``).

    Returns:
        ``rows`` (``ROW_SCHEMA`` plus ``domain``), ``metadata`` (pass@1, per-domain table, system errors,
        truncation, repaired keys, the DecodeResult path, gate, sandbox report).

    Raises:
        UncleanCampaignError: the rows break ``profile.system_errors`` (journal kept, nothing written).
    """
    trials, config_hash = (
        profile.evaluation.trials,
        profile.section_hash("evaluation", "policy", "episode"),
    )
    served = [profile.section_hash("serving")] if profile.serving.kind != "none" else []
    play = partial(_play, tasks, trials, checkpoint, io, label or name)
    finish = partial(_finish, io, name)
    identity = [config_hash, input_hash, checkpoint, *served]
    rows, run, stage = run_campaign_stage(
        profile,
        name,
        identity,
        io,
        play,
        checkpoint=checkpoint,
        expected_uids=[t.uid for t in tasks],
        schema=EVALUATION_JOURNAL_SCHEMA,
        finish=finish,
    )
    metadata = {"tasks": len(tasks), "trials": trials, "checkpoint": checkpoint}
    metadata |= {"config_hash": config_hash, "input_hash": input_hash, **stage}
    return StageRun(rows, _evaluation_metadata(rows, run) | metadata)


def _play(tasks, trials, checkpoint, io: StageIO, label: str, w: Wiring):
    """The campaign of :func:`evaluate` on the wiring ``run_campaign_stage`` made: ``(rows, run)``."""
    run = run_evaluation(
        tasks,
        trials,
        lambda: io.make_policy(checkpoint, w.policy_config),
        w.parts,
        w.journal,
        executor=io.executor,
        log=io.log,
        label=label,
        on_result=w.recorder.record,
    )
    return run.rows, run


def _finish(io: StageIO, name: str, _rows: pl.DataFrame, run) -> dict:
    """Write the campaign's ThinkingBox ``DecodeResult`` JSONL once the rows passed the gate."""
    path = write_decode_lines(run.decode_lines, io.path("evaluation", f"{name}.jsonl"))
    return {"decode_results_jsonl": path}


def _evaluation_metadata(rows: pl.DataFrame, run) -> dict:
    """pass@1, the per-domain table and the repaired keys of an evaluation campaign's rows."""
    by_domain = summarise_by_domain(rows, [1]).select(
        "domain", "pass_at_1", "clean_trials", "system_errors"
    )
    return {
        **campaign_metadata(rows),
        "pass_at_1": summarise_campaign(rows, [1])["pass_at_1"] or 0.0,
        "repaired_keys": run.repaired_keys,
        "per_domain": by_domain,
    }
