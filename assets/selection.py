"""Probes, reference screening, offline policy-relative difficulty, and the training pool."""

import hashlib
from urllib.parse import urlsplit

import dagster as dg
import polars as pl

from assets.clean_trials import require_clean_trials
from assets.metadata import md_chart, md_image, md_table, parser_parity_result, table_value
from assets.versions import EPISODE_ENGINE, code_version, frame_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource
from rewardbox.episode.campaign import ROW_SCHEMA, system_error_counts
from rewardbox.episode.journal import campaign_journal
from rewardbox.episode.run import run_trials
from rewardbox.thinkingbox.interchange import import_infer_report
from rewardbox.selection.reference_probes import probe_reference, remaining_system_errors
from rewardbox.metrics.campaign import summarise_campaign
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.policy import build_policy
from rewardbox.policy.parity import ParityRecorder
from rewardbox.report import band_histogram_png
from rewardbox.report.inline_svg import band_svg, fitted_markdown
from rewardbox.selection import task_difficulty as compute_difficulty
from rewardbox.selection import teachable
from rewardbox.selection.difficulty import band_summary
from rewardbox.selection import training_pool as select_pool
from rewardbox.selection.reference import gate_pool, reference_verdicts, successes_histogram, verdict_counts
from rewardbox.tasks.schema import Task, canonical_json, task_set_version

GROUP = "selection"
PROBE_CODE = code_version(__name__, *EPISODE_ENGINE)
SELECT_CODE = code_version(__name__, "rewardbox.selection")
REFERENCE_SKIPPED = "skipped: no reference configured"
PARQUET = "parquet_io_manager"


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=PROBE_CODE)
def probe_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource, ray_cluster: RayClusterResource,
                  vllm_server: VllmServerResource, screened_candidates: list[Task], base_checkpoint: str) -> pl.DataFrame:
    """One row per probe trial: uid, trial, reward, passed, system_error, termination_reason,
    turns, tokens (input, output), duration_s. n trials per candidate with the base policy, or the
    rows of an existing ``tb infer`` JSONL run when ``probe.import_results`` is set. With ``serving.kind: vllm``
    the base checkpoint is served by vLLM for the probes; a sample of raw completions is kept for the
    parser-parity check."""
    profile = rewardbox.load()
    if profile.probe.import_results:
        rows, left_out = import_infer_report(profile.probe.import_results, screened_candidates)
        context.log.info(f"probe results imported from {profile.probe.import_results}: {rows.height} trials")
        for line in left_out:
            context.log.warning(f"probe import left out {line}")
        ParityRecorder().write(rewardbox.path("parity", "probe_results.json"))  # no raw text imported: corpus only
    else:
        identity = [profile.section_hash("probe", "policy", "episode"), task_set_version(screened_candidates), base_checkpoint,
                    *([profile.section_hash("serving")] if profile.serving.kind != "none" else [])]
        journal = campaign_journal(rewardbox.path("campaigns", "probe_results").parent, "probe_results", identity,
                                   ROW_SCHEMA)  # a killed probe run resumes where it stopped
        recorder = ParityRecorder()
        with vllm_server.policy_config(profile, base_checkpoint, context.log) as policy_config:
            policy = rewardbox.policy(base_checkpoint, policy_config)
            rows, _ = run_trials(screened_candidates, profile.probe.trials, policy, profile, log=context.log,
                                 label="probe_results", journal=journal, on_result=recorder.record,
                                 keep_results=False,  # rows only: memory stays flat over the probe
                                 executor=ray_cluster.executor(profile, context))
        gate = require_clean_trials(rows, profile, "probe_results", [t.uid for t in screened_candidates])
        recorder.write(rewardbox.path("parity", "probe_results.json"))
        journal.discard()
    if profile.probe.import_results:
        gate = require_clean_trials(rows, profile, "probe_results")
    summary = rows.group_by("termination_reason").len().sort("len", descending=True)
    context.add_output_metadata({
        "episodes": rows.height, "tasks": len(screened_candidates), "trials": profile.probe.trials,
        "pass_rate": summarise_campaign(rows, [1])["pass_at_1"] or 0.0,
        "system_errors": int(rows["system_error"].is_not_null().sum()),
        "system_errors_by_kind": dg.MetadataValue.json(system_error_counts(rows)),
        "termination_reasons": md_table(summary), "sample": md_table(rows.head(20)), **truncation_summary(rows),
        "config_hash": profile.section_hash("probe", "policy", "episode"), "input_hash": task_set_version(screened_candidates),
        **gate,
    })
    record_versions(context, frame_version(rows))
    return rows


def _reference_hash(profile, section: str = "episode") -> str:
    """Short SHA-256 of the ``reference`` section (null when absent) and one other section of the profile."""
    reference = profile.reference.model_dump(mode="json") if profile.reference is not None else None
    payload = canonical_json({"reference": reference, section: getattr(profile, section).model_dump(mode="json")})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _reference_source(config) -> str:
    """The imported file, or the endpoint's model and ``host:port`` (never credentials a URL may carry)."""
    if config.import_results:
        return f"tb infer run {config.import_results}"
    url = urlsplit(config.policy.base_url)
    return f"{config.policy.model} at {url.hostname}:{url.port or ''}".rstrip(":")


def _reference_rows(context: dg.AssetExecutionContext, rewardbox: RewardboxResource, ray_cluster: RayClusterResource,
                    tasks: list[Task]) -> tuple[pl.DataFrame, int]:
    """The reference's trial rows (imported, or probed live with refills) and the refilled system errors."""
    profile = rewardbox.load()
    config = profile.reference
    if config.import_results:
        rows, left_out = import_infer_report(config.import_results, tasks)
        context.log.info(f"reference results imported from {config.import_results}: {rows.height} trials")
        for line in left_out:
            context.log.warning(f"reference import left out {line}")
        require_clean_trials(rows, profile, "reference_probe_results")
        return rows, 0
    identity = [_reference_hash(profile), profile.section_hash("sandbox", "user", "grading"), task_set_version(tasks)]
    journal = campaign_journal(rewardbox.path("campaigns", "reference_probe_results").parent,
                               "reference_probe_results", identity, ROW_SCHEMA)
    run = probe_reference(tasks, config, build_policy(config.policy), profile, journal=journal, log=context.log,
                          executor=ray_cluster.executor(profile, context))
    require_clean_trials(run.rows, profile, "reference_probe_results", [t.uid for t in tasks])  # journal kept on failure
    journal.discard()
    return run.rows, run.refilled_system_errors


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=PROBE_CODE)
def reference_probe_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                            ray_cluster: RayClusterResource, screened_candidates: list[Task]) -> pl.DataFrame:
    """The reference policy's trials of every candidate (probe-row schema), the pool's first gate:
    ``reference.min_clean_runs`` trials with system errors re-run, or an imported ``tb infer`` run.
    Without a ``reference`` section: no rows, and metadata saying it was skipped."""
    profile = rewardbox.load()
    config = profile.reference
    if config is None:
        rows = pl.DataFrame(schema=ROW_SCHEMA)
        context.add_output_metadata({"status": REFERENCE_SKIPPED, "config_hash": _reference_hash(profile)})
        record_versions(context, frame_version(rows))
        return rows
    rows, refilled = _reference_rows(context, rewardbox, ray_cluster, screened_candidates)
    verdicts = reference_verdicts(rows, config)
    counts = verdict_counts(verdicts)
    context.add_output_metadata({
        "status": f"probed ({config.rule} rule)", "source": _reference_source(config),
        "tasks_probed": verdicts.height, "trials": rows.height, **counts,
        "tasks_not_probed": len({t.uid for t in screened_candidates} - set(verdicts["uid"])),
        "system_errors": remaining_system_errors(rows), "system_errors_refilled": refilled,
        "system_errors_by_kind": dg.MetadataValue.json(system_error_counts(rows)),
        "successes_histogram": md_table(successes_histogram(verdicts)), "verdicts": md_table(verdicts),
        "config_hash": _reference_hash(profile), "input_hash": task_set_version(screened_candidates),
    })
    record_versions(context, frame_version(rows))
    return rows


@dg.asset_check(asset=probe_results, blocking=True)
def probe_parser_parity(rewardbox: RewardboxResource) -> dg.AssetCheckResult:
    """Blocking: the probes' raw completions (and the shipped corpus) read alike on the training path and the
    evaluation paths, so the difficulty they measure is the one training acts on."""
    return parser_parity_result(rewardbox.load(), rewardbox.path("parity", "probe_results.json"))


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=SELECT_CODE)
def task_difficulty(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                    probe_results: pl.DataFrame) -> pl.DataFrame:
    """Jeffreys posterior per task, five bands, highest-mass band (ties to the harder band)."""
    profile = rewardbox.load()
    difficulty = compute_difficulty(probe_results, profile.selection)
    kept = difficulty.filter(pl.col("band").is_in(list(profile.selection.kept_bands)))
    context.add_output_metadata({
        "tasks": difficulty.height, "kept": kept.height,
        "kept_frac": round(kept.height / difficulty.height, 3) if difficulty.height else 0.0,
        "band_histogram": table_value(band_summary(difficulty)),
        **md_chart("band_plot", fitted_markdown(lambda _: band_svg(difficulty), "tasks per band")),
        "band_plot_png": md_image(band_histogram_png(difficulty), "tasks per band and domain"),
        "table": md_table(difficulty), "config_hash": profile.section_hash("selection"),
    })
    record_versions(context, frame_version(difficulty))
    return difficulty


@dg.asset(group_name=GROUP, code_version=SELECT_CODE)
def training_pool(context: dg.AssetExecutionContext, rewardbox: RewardboxResource, task_difficulty: pl.DataFrame,
                  reference_probe_results: pl.DataFrame, screened_candidates: list[Task]) -> list[Task]:
    """The candidates in the kept bands that the reference solved (when a reference is configured):
    tasks the current policy can still learn from and that are known to be solvable."""
    profile = rewardbox.load()
    pool_rows = select_pool(task_difficulty, profile.selection)
    gate: dict = {"reference_gate": "off"}
    if profile.reference is not None:
        pool_rows, removed = gate_pool(pool_rows, reference_verdicts(reference_probe_results, profile.reference))
        gate = {"reference_gate": f"{profile.reference.rule} rule", "reference_removed": removed.height,
                "reference_removed_tasks": md_table(removed)}
    uids = set(pool_rows["uid"].to_list())
    pool, teach_nothing = teachable([t for t in screened_candidates if t.uid in uids and t.split == "candidate"])
    context.add_output_metadata({
        "tasks": len(pool), "kept_bands": dg.MetadataValue.json(list(profile.selection.kept_bands)), **gate,
        "left_out_teach_nothing": dg.MetadataValue.json(teach_nothing),
        "table": md_table(pool_rows), "input_hash": task_set_version(pool),
    })
    config_hash = (profile.section_hash("selection") if profile.reference is None
                   else _reference_hash(profile, "selection"))
    record_versions(context, task_set_version(pool), config_hash)
    return pool
