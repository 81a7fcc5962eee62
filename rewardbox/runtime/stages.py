"""The campaign stages from a profile: one function each, wiring journal, parity recorder, serving and executor once.

``screen`` lives here, ``probe`` and ``reference_probe`` in ``rewardbox.runtime.probe``, ``evaluate`` in
``rewardbox.runtime.evaluate``;
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

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.campaign import ROW_SCHEMA, system_error_counts
from rewardbox.episode.clean_trials import require_clean
from rewardbox.episode.executor import EpisodeExecutor
from rewardbox.episode.journal import CampaignJournal, campaign_journal
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.progress import emit
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.policy.base import Policy
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.factory import build_policy
from rewardbox.policy.parity import ParityRecorder
from rewardbox.process_memory import stage_usage
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.screening import screen_tasks, ungradable, write_evidence_counts
from rewardbox.tasks.schema import Task, task_set_version
from rewardbox.tasks.sources import load_benchmark
from rewardbox.thinkingbox.interchange import import_infer_report


@contextmanager
def serve_profile_policy(
    profile: Profile, checkpoint: str | None, log: Any = None
) -> Iterator[PolicyConfig]:
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
    serve: Callable[[Profile, str | None, Any], AbstractContextManager[PolicyConfig]] = (
        serve_profile_policy
    )
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
    return {
        "episodes": rows.height,
        "system_errors": int(rows["system_error"].is_not_null().sum()),
        "system_errors_by_kind": system_error_counts(rows),
        **truncation_summary(rows),
    }


def run_campaign_stage(
    profile: Profile,
    name: str,
    identity: Sequence[str],
    io: StageIO,
    play: Callable[[Wiring], tuple[pl.DataFrame, Any]],
    *,
    checkpoint: str | None = None,
    expected_uids: list[str] | Callable[[Any], list[str]] | None = None,
    schema: dict | None = None,
    parity: bool = True,
    finish: Finish | None = None,
) -> tuple[pl.DataFrame, Any, dict[str, Any]]:
    """Wire one campaign once: journal, serving, policy config, parts, parity recorder, gate, discard.

    Args:
        profile: the run's profile.
        name: the campaign (journal directory, parity file, gate label).
        identity: what makes two runs the same campaign (a change starts a new journal).
        io: what the Dagster layer lends (:class:`StageIO`).
        play: runs the episodes with the :class:`Wiring`; returns ``(rows, extra)``.
        checkpoint: served by ``io.serve`` for the campaign (None: nothing to serve).
        expected_uids: the tasks the gate expects a clean trial of, or ``extra -> uids`` (``play`` picks them).
        schema: the journal's row schema (default ``ROW_SCHEMA``).
        parity: write the recorded completions to ``<data>/parity/<name>.json`` once the gate passed.
        finish: ``(rows, extra) -> metadata``, run after the gate and before the journal is discarded
            (e.g. writing the DecodeResult JSONL), so a failure there keeps the journal.

    Returns:
        ``(rows, extra, metadata)``: ``clean_trial_gate``, ``policy_kind``, the sandbox report, ``stage_usage``'s.

    Raises:
        UncleanCampaignError: the rows break ``profile.system_errors`` (the journal is kept for a rerun).
        EndpointPreflightError, TokenBudgetError, TurnBudgetError: before any episode (from ``run_trials``).
    """
    started, directory = time.perf_counter(), io.path("campaigns", name).parent
    journal = campaign_journal(directory, name, identity, schema or ROW_SCHEMA)
    reports = SandboxReports()
    with io.serve(profile, checkpoint, io.log) as policy_config:
        wiring = Wiring(
            journal, ParityRecorder(), campaign_parts(profile, reports), policy_config, io
        )
        rows, extra = play(wiring)
    expected = expected_uids(extra) if callable(expected_uids) else expected_uids
    verdict = require_clean(rows, profile.system_errors, name, expected)
    if parity:
        wiring.recorder.write(io.path("parity", f"{name}.json"))
    written = finish(rows, extra) if finish is not None else {}
    journal.discard()
    return (
        rows,
        extra,
        {
            "clean_trial_gate": verdict.metadata(),
            "policy_kind": policy_config.kind,
            **reports.metadata(),
            **written,
            **stage_usage(started),
        },
    )


def imported_rows(path: str, tasks: Sequence[Task], io: StageIO, what: str) -> pl.DataFrame:
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
        ``metadata``: counts of invalid, read-only and write-unknown tasks, the sandbox report and
        ``process_memory.stage_usage``'s wall time and peak memory.
    """
    reports, started = SandboxReports(), time.perf_counter()
    valid, report = screen_tasks(tasks, campaign_parts(profile, reports), io.executor, log=io.log)
    invalid = report.filter(~report["valid"])
    for row in invalid.iter_rows(named=True):
        warn(io.log, f"invalid {label} {row['uid']}: {row['reason']}")
    read_only = report["read_only"].fill_null(False)
    return StageRun(
        report,
        {
            "tasks": len(valid),
            "invalid": invalid.height,
            "invalid_tasks": invalid.select("uid", "reason"),
            "read_only_tasks": int(read_only.sum()),
            "null_pass_read_only": int((read_only & report["null_passed"].fill_null(False)).sum()),
            "write_unknown": write_evidence_counts(report)["write_unknown"],
            **reports.metadata(),
            **stage_usage(started),
        },
        valid,
    )


class UngradableTasksError(RuntimeError):
    """Benchmark tasks that could not be graded (a system error while screening, e.g. test code
    importing what the grader lacks): ``failures`` lists each by uid and cause. A system error of
    the set, not a policy failure: a benchmark never shrinks silently."""

    def __init__(self, failures: list[str]):
        super().__init__(
            f"{len(failures)} benchmark task(s) could not be graded:\n" + "\n".join(failures)
        )
        self.failures = failures


def screen_benchmark(profile: Profile, io: StageIO) -> StageRun:
    """Load the benchmark strictly (``tasks.sources.load_benchmark``) and screen it (:func:`screen`).

    Returns:
        :func:`screen`'s run, its metadata with ``read_only``, ``load_errors``, ``config_hash`` and
        ``input_hash`` (the valid tasks' ``task_set_version``).

    Raises:
        TaskSetLoadError: a benchmark file that fails to load (file and line in the message).
        UngradableTasksError: a benchmark task that could not be graded.
    """
    loaded = load_benchmark(profile.tasks)
    run = screen(profile, loaded.tasks, io, label="benchmark task")
    failures = ungradable(run.rows)
    if failures:
        raise UngradableTasksError(failures)
    run.metadata.update(
        read_only=run.metadata["read_only_tasks"],
        load_errors=loaded.errors,
        config_hash=profile.section_hash("tasks"),
        input_hash=task_set_version(run.extra),
    )
    return run
