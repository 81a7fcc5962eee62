"""The campaign stages from a profile: one function each, wiring journal, parity recorder, serving and executor once.

``screen``, ``probe`` and ``reference_probe`` live here, ``evaluate`` in ``rewardbox.runtime.evaluate``;
all of them go through :func:`run_campaign_stage`, which opens the campaign's crash-safe journal,
serves the checkpoint (``StageIO.serve``), builds the policy and the campaign parts
(``rewardbox.runtime.compose.campaign_parts``), records raw completions for the parser-parity check,
applies the clean-trial gate (``rewardbox.episode.clean_trials.require_clean``), and discards the
journal only when the gate passed. Each stage returns engine values (rows, tasks) and a ``metadata``
dict of plain values (numbers, strings, dicts, ``polars.DataFrame`` tables, paths) that the Dagster
layer wraps; errors are engine errors (``UncleanCampaignError``, ``EndpointPreflightError``, ...).

The Dagster layer lends a stage what only it has (:class:`StageIO`): where files go, the executor
(Ray or local), vLLM serving, and the policy builder with its API key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.campaign import ROW_SCHEMA, system_error_counts
from rewardbox.episode.clean_trials import require_clean
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal, campaign_journal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import emit
from rewardbox.episode.run import run_trials
from rewardbox.metrics.campaign import summarise_campaign
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.policy.base import Policy
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.factory import build_policy
from rewardbox.policy.parity import ParityRecorder
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.reference import reference_verdicts, successes_histogram, verdict_counts
from rewardbox.selection.reference_config import ReferenceConfig
from rewardbox.selection.reference_probes import probe_reference, remaining_system_errors
from rewardbox.selection.screening import screen_tasks, write_evidence_counts
from rewardbox.tasks.schema import Task
from rewardbox.thinkingbox.interchange import import_infer_report


@contextmanager
def serve_profile_policy(profile: Profile, checkpoint: str | None, log: Any = None) -> Iterator[PolicyConfig]:
    """No serving: the profile's own policy config (the default of :attr:`StageIO.serve`)."""
    yield profile.policy


def load_policy(checkpoint: str | None, config: PolicyConfig) -> Policy:
    """The policy ``config`` names, loaded from ``checkpoint`` when local (the default of :attr:`StageIO.make_policy`)."""
    return build_policy(config, checkpoint_dir=checkpoint or None)


@dataclass(frozen=True)
class StageIO:
    """What the Dagster layer lends a stage.

    Attributes:
        path: ``(*parts) -> Path`` under the profile's data directory, parents created.
        make_executor: ``() -> EpisodeExecutor``, called once on first use of :attr:`executor` (so a stage
            that plays no episode, e.g. an import, never connects to a cluster); None: the profile's
            executor, built and closed per campaign.
        log: progress sink (Dagster's ``context.log``, a logger or a ``str -> None`` callable).
        serve: ``(profile, checkpoint, log) -> context manager of PolicyConfig``: vLLM serving of the
            checkpoint, or the profile's policy config.
        make_policy: ``(checkpoint, policy config) -> Policy`` (the caller's API key travels here).
    """

    path: Callable[..., Path]
    make_executor: Callable[[], EpisodeExecutor] | None = None
    log: Any = None
    serve: Callable[[Profile, str | None, Any], AbstractContextManager[PolicyConfig]] = serve_profile_policy
    make_policy: Callable[[str | None, PolicyConfig], Policy] = load_policy

    @cached_property
    def executor(self) -> EpisodeExecutor | None:
        """Where episodes run (None: the profile's); built on first use."""
        return self.make_executor() if self.make_executor is not None else None


class SandboxReports:
    """Merges the sandbox factories' ``report()`` of every runner a stage opens (#25's per-server decisions).

    Per server: ``start`` (``template`` or ``fresh: <reason>``, the template fallback), ``reuse`` (the
    canary's status) and ``retired`` (why reuse was retired); pool counts under ``"(pool)"`` are summed.
    Picklable; under a Ray executor each worker fills its own copy, so only local runners report here.
    """

    def __init__(self) -> None:
        self.servers: dict[str, dict[str, Any]] = {}

    def __call__(self, report: dict[str, dict[str, Any]]) -> None:
        for name, entry in report.items():
            merged = self.servers.setdefault(name, {})
            for key, value in entry.items():
                numeric = name == "(pool)" and isinstance(value, int)
                merged[key] = merged.get(key, 0) + value if numeric else value

    def metadata(self) -> dict[str, Any]:
        """``{"sandbox_servers": {...}}`` when a factory reported (external servers), else ``{}``."""
        return {"sandbox_servers": self.servers} if self.servers else {}


Finish = Callable[[pl.DataFrame, Any], dict[str, Any]]
"""A stage's last step before its journal is discarded; returns metadata."""


@dataclass(frozen=True)
class Wiring:
    """What :func:`run_campaign_stage` hands the stage's ``play``: the wired parts of one campaign."""

    journal: CampaignJournal
    recorder: ParityRecorder
    parts: CampaignParts
    policy_config: PolicyConfig
    io: StageIO


@dataclass(frozen=True)
class StageRun:
    """A stage's result: its rows (or tasks) and the metadata the asset writes (plain values)."""

    rows: pl.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: Any = None


def campaign_metadata(rows: pl.DataFrame) -> dict[str, Any]:
    """Episodes, system errors (left and per kind, retried included) and truncation of a campaign's rows."""
    return {"episodes": rows.height, "system_errors": int(rows["system_error"].is_not_null().sum()),
            "system_errors_by_kind": system_error_counts(rows), **truncation_summary(rows)}


def run_campaign_stage(profile: Profile, name: str, identity: Sequence[str], io: StageIO,
                       play: Callable[[Wiring], tuple[pl.DataFrame, Any]], *, checkpoint: str | None = None,
                       expected_uids: list[str] | None = None, schema: dict | None = None,
                       parity: bool = True, finish: Finish | None = None) -> tuple[pl.DataFrame, Any, dict[str, Any]]:
    """Wire one campaign once: journal, serving, policy config, parts, parity recorder, gate, discard.

    Args:
        profile: the run's profile.
        name: the campaign (journal directory, parity file, gate label).
        identity: what makes two runs the same campaign (a change starts a new journal).
        io: what the Dagster layer lends (:class:`StageIO`).
        play: runs the episodes with the :class:`Wiring`; returns ``(rows, extra)``.
        checkpoint: served by ``io.serve`` for the campaign (None: nothing to serve).
        expected_uids: the tasks the gate expects a clean trial of.
        schema: the journal's row schema (default ``ROW_SCHEMA``).
        parity: write the recorded completions to ``<data>/parity/<name>.json`` once the gate passed.
        finish: ``(rows, extra) -> metadata``, run after the gate and before the journal is discarded
            (e.g. writing the DecodeResult JSONL), so a failure there keeps the journal.

    Returns:
        ``(rows, extra, metadata)``: metadata has ``clean_trial_gate``, ``policy_kind`` and the sandbox report.

    Raises:
        UncleanCampaignError: the rows break ``profile.system_errors`` (the journal is kept for a rerun).
        EndpointPreflightError, TokenBudgetError, TurnBudgetError: before any episode (from ``run_trials``).
    """
    journal = campaign_journal(io.path("campaigns", name).parent, name, identity, schema or ROW_SCHEMA)
    reports = SandboxReports()
    with io.serve(profile, checkpoint, io.log) as policy_config:
        wiring = Wiring(journal, ParityRecorder(), campaign_parts(profile, reports), policy_config, io)
        rows, extra = play(wiring)
    verdict = require_clean(rows, profile.system_errors, name, expected_uids)
    if parity:
        wiring.recorder.write(io.path("parity", f"{name}.json"))
    written = finish(rows, extra) if finish is not None else {}
    journal.discard()
    return rows, extra, {"clean_trial_gate": verdict.metadata(), "policy_kind": policy_config.kind,
                         **reports.metadata(), **written}


def _imported(path: str, tasks: Sequence[Task], io: StageIO, what: str) -> pl.DataFrame:
    """The rows of a ``tb infer`` JSONL run, with what was left out logged."""
    rows, left_out = import_infer_report(path, tasks)
    emit(io.log, f"{what} results imported from {path}: {rows.height} trials")
    for line in left_out:
        warn(io.log, f"{what} import left out {line}")
    return rows


def warn(log: Any, line: str) -> None:
    """A warning line: ``log.warning`` when the sink has one (Dagster's ``context.log``), else :func:`emit`."""
    if hasattr(log, "warning"):
        log.warning(line)
    else:
        emit(log, line)


def screen(profile: Profile, tasks: Sequence[Task], io: StageIO, label: str = "task") -> StageRun:
    """Golden replay and null run of every task (``rewardbox.selection.screening.screen_tasks``).

    Each invalid task is logged as a warning (``invalid <label> <uid>: <reason>``).

    Returns:
        ``rows``: the screen report (one row per task); ``extra``: the valid tasks in input order;
        ``metadata``: counts of invalid, read-only and write-unknown tasks and the sandbox report.
    """
    reports = SandboxReports()
    valid, report = screen_tasks(tasks, campaign_parts(profile, reports), io.executor, log=io.log)
    invalid = report.filter(~report["valid"])
    for row in invalid.iter_rows(named=True):
        warn(io.log, f"invalid {label} {row['uid']}: {row['reason']}")
    read_only = report["read_only"].fill_null(False)
    return StageRun(report, {"tasks": len(valid), "invalid": invalid.height,
                             "invalid_tasks": invalid.select("uid", "reason"), "read_only_tasks": int(read_only.sum()),
                             "null_pass_read_only": int((read_only & report["null_passed"].fill_null(False)).sum()),
                             "write_unknown": write_evidence_counts(report)["write_unknown"],
                             **reports.metadata()}, valid)


def probe(profile: Profile, tasks: Sequence[Task], checkpoint: str, input_hash: str, io: StageIO) -> StageRun:
    """``probe.trials`` trials of every candidate with the base policy, or an imported ``tb infer`` run.

    With ``serving.kind: vllm`` the checkpoint is served for the probes; a sample of raw completions
    goes to ``<data>/parity/probe_results.json`` (an import writes an empty sample: corpus only).

    Raises:
        UncleanCampaignError: see :func:`run_campaign_stage`.
    """
    config_hash = profile.section_hash("probe", "policy", "episode")
    if profile.probe.import_results:
        rows = _imported(profile.probe.import_results, tasks, io, "probe")
        ParityRecorder().write(io.path("parity", "probe_results.json"))
        stage = {"clean_trial_gate": require_clean(rows, profile.system_errors, "probe_results").metadata()}
    else:
        served = [profile.section_hash("serving")] if profile.serving.kind != "none" else []

        def play(w: Wiring) -> tuple[pl.DataFrame, None]:
            policy = io.make_policy(checkpoint, w.policy_config)
            return run_trials(tasks, profile.probe.trials, policy, w.parts, log=io.log, label="probe_results",
                              journal=w.journal, on_result=w.recorder.record, keep_results=False,
                              executor=io.executor)[0], None

        rows, _, stage = run_campaign_stage(profile, "probe_results", [config_hash, input_hash, checkpoint, *served],
                                            io, play, checkpoint=checkpoint, expected_uids=[t.uid for t in tasks])
        stage.pop("policy_kind")
    summary = rows.group_by("termination_reason").len().sort("len", descending=True)
    return StageRun(rows, {**campaign_metadata(rows), "tasks": len(tasks), "trials": profile.probe.trials,
                           "pass_rate": summarise_campaign(rows, [1])["pass_at_1"] or 0.0,
                           "termination_reasons": summary, "sample": rows.head(20),
                           "config_hash": config_hash, "input_hash": input_hash, **stage})


REFERENCE_SKIPPED = "skipped: no reference configured"


def reference_source(config: ReferenceConfig) -> str:
    """The imported file, or the endpoint's model and ``host:port`` (never credentials a URL may carry)."""
    if config.import_results:
        return f"tb infer run {config.import_results}"
    url = urlsplit(config.policy.base_url)
    return f"{config.policy.model} at {url.hostname}:{url.port or ''}".rstrip(":")


def _reference_rows(profile: Profile, tasks: Sequence[Task], config_hash: str, input_hash: str,
                    io: StageIO) -> tuple[pl.DataFrame, int, dict[str, Any]]:
    """The reference's trial rows (imported, or probed live with refills), the refilled system errors, gate."""
    config = profile.reference
    if config.import_results:
        rows = _imported(config.import_results, tasks, io, "reference")
        return rows, 0, {"clean_trial_gate": require_clean(rows, profile.system_errors,
                                                           "reference_probe_results").metadata()}

    def play(w: Wiring) -> tuple[pl.DataFrame, int]:
        run = probe_reference(tasks, config, build_policy(config.policy), w.parts, journal=w.journal, log=io.log,
                              executor=io.executor)
        return run.rows, run.refilled_system_errors

    identity = [config_hash, profile.section_hash("sandbox", "user", "grading"), input_hash]
    rows, refilled, stage = run_campaign_stage(profile, "reference_probe_results", identity, io, play,
                                               expected_uids=[t.uid for t in tasks], parity=False)
    stage.pop("policy_kind")
    return rows, refilled, stage


def reference_probe(profile: Profile, tasks: Sequence[Task], input_hash: str, io: StageIO) -> StageRun:
    """The reference policy's trials of every candidate, the pool's first gate (docs/method.md, "Reference
    screening"): ``reference.min_clean_runs`` trials with system errors refilled, or an imported run.

    Without a ``reference`` section: no rows, and ``status`` says it was skipped.

    Raises:
        UncleanCampaignError: see :func:`run_campaign_stage`.
    """
    config, config_hash = profile.reference, profile.section_hash("reference", "episode")
    if config is None:
        return StageRun(pl.DataFrame(schema=ROW_SCHEMA), {"status": REFERENCE_SKIPPED, "config_hash": config_hash})
    rows, refilled, stage = _reference_rows(profile, tasks, config_hash, input_hash, io)
    verdicts = reference_verdicts(rows, config)
    return StageRun(rows, {
        "status": f"probed ({config.rule} rule)", "source": reference_source(config),
        "tasks_probed": verdicts.height, "trials": rows.height, **verdict_counts(verdicts),
        "tasks_not_probed": len({t.uid for t in tasks} - set(verdicts["uid"])),
        "system_errors": remaining_system_errors(rows), "system_errors_refilled": refilled,
        "system_errors_by_kind": system_error_counts(rows), "successes_histogram": successes_histogram(verdicts),
        "verdicts": verdicts, "config_hash": config_hash, "input_hash": input_hash, **stage})
