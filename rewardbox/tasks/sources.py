"""Resolve configured task sources into tasks: candidates and benchmark.

A source is ``embedded:<domain>`` (a dataset shipped in ``rewardbox.domains``)
or a ThinkingBox dataset directory, with an optional test list. Each broken
task file or test is reported with its file and line. Whether the set still
loads is the load policy's decision (:func:`check_load_policy`): the benchmark
is strict (one broken task fails the load), candidates follow
``tasks.candidate_loading`` (``fail`` by default, or ``skip`` up to a share).
A failed load raises :class:`~rewardbox.errors.TaskSetLoadError`; it never
returns a silently smaller set. Candidates are filtered against the benchmark
by uid and by content hash; a *generated* candidate (``TaskSource.generate``,
``rewardbox.tasks.generated``) that collides fails the load instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from rewardbox.errors import TaskFormatError, TaskSetLoadError
from rewardbox.tasks.schema import Task

EMBEDDED_PREFIX = "embedded:"


@dataclass
class LoadedTasks:
    """Tasks of one split and what did not load.

    Attributes:
        tasks: loaded tasks, in source order.
        errors: one ``"<file>:<line> (field ...): <message>"`` per broken file or test.
        excluded: candidate uids dropped because they are benchmark tasks.
        failed: tasks that did not load (a listed uid, or a broken file or test
            of a whole-dataset source; a file that does not parse counts once).
        attempted: tasks the sources asked for before any ``limit``: loaded + failed.
        unreadable_sources: sources that could not be read at all (not a
            dataset, a malformed test list).
    """

    tasks: list[Task]
    errors: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    failed: int = 0
    attempted: int = 0
    unreadable_sources: list[str] = field(default_factory=list)

    @property
    def failed_frac(self) -> float:
        """failed / attempted, in [0, 1]; 0 when nothing was attempted."""
        return self.failed / self.attempted if self.attempted else 0.0


def resolve_dataset(dataset: str) -> Path:
    """``embedded:retail`` -> the shipped dataset directory; anything else is a path."""
    if dataset.startswith(EMBEDDED_PREFIX):
        from rewardbox.domains.registry import dataset_dir

        return dataset_dir(dataset[len(EMBEDDED_PREFIX) :])
    path = Path(dataset).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"dataset directory {path} does not exist")
    return path


def _resolve_list(dataset_path: Path, test_list: str | None) -> Path | None:
    if test_list is None:
        return None
    candidate = Path(test_list)
    return candidate if candidate.is_absolute() or candidate.exists() else dataset_path / test_list


def _source_name(source, path: Path) -> str:
    if source.name:
        return source.name
    return (
        source.dataset[len(EMBEDDED_PREFIX) :]
        if source.dataset.startswith(EMBEDDED_PREFIX)
        else path.name
    )


def load_sources(
    sources, split: str, limit: int | None = None, domains: dict[str, str] | None = None
) -> LoadedTasks:
    """Load every source of one split (``"candidate"``, ``"benchmark"`` or ``"exclude_only"``); no policy applied.

    Args:
        sources: ``TaskSource`` configs.
        split: stored on each task's ``split`` field.
        limit: keep at most this many tasks (first ones, deterministic), or None.
        domains: ``{scenario: domain}`` (``tasks.domains``); a mapped scenario's
            tasks get ``metadata["domain"]``, the others report their scenario.

    Returns:
        Tasks in source order, the load errors (file, line, field) and the count
        of tasks that failed to load. Callers apply :func:`check_load_policy`.
    """
    from rewardbox.tasks.thinkingbox import load_dataset

    out = LoadedTasks(tasks=[])
    for source in sources:
        path = source_dir(source, split)
        try:
            loaded = load_dataset(
                path,
                test_list=_resolve_list(path, source.test_list),
                dataset_name=_source_name(source, path),
                strict=False,
            )
        except TaskFormatError as exc:
            out.errors.append(str(exc))
            out.unreadable_sources.append(source.dataset)
            continue
        out.errors.extend(str(e) for e in loaded.errors)
        failed = len(loaded.missing) if source.test_list is not None else len(loaded.errors)
        out.failed += failed
        out.attempted += len(loaded.tasks) + failed
        tasks = loaded.tasks[: source.limit] if source.limit else loaded.tasks
        out.tasks.extend(_with_domain(replace(t, split=split), domains or {}) for t in tasks)
    if limit is not None:
        out.tasks = out.tasks[:limit]
    return out


def source_dir(source, split: str = "candidate") -> Path:
    """A source's dataset directory; a ``generate:`` source's is (re)written first (kept when up to date).

    Raises:
        TaskSetLoadError: a generated source outside the candidates, or one the generator refuses.
        FileNotFoundError: a path source whose directory does not exist.
    """
    _write_generated(source, split)
    return resolve_dataset(source.dataset)


def _write_generated(source, split: str) -> None:
    """(Re)write a ``generate:`` source's dataset; only candidates may be generated.

    Raises:
        TaskSetLoadError: a generated source outside the candidates, or one the generator refuses.
    """
    spec = getattr(source, "generate", None)
    if spec is None:
        return
    if split != "candidate":
        raise TaskSetLoadError(
            split,
            [f"{source.dataset}: generate: {spec.domain} seed {spec.seed}"],
            "generated tasks are training-only; list them under tasks.candidates",
        )
    from rewardbox.tasks.generated import write_training_dataset

    try:
        write_training_dataset(
            source.dataset, spec.domain, spec.seed, spec.per_family, spec.families
        )
    except (KeyError, ValueError) as exc:
        raise TaskSetLoadError(
            split, [f"{source.dataset}: {exc}"], "the generator refused the source"
        ) from exc


def _with_domain(task: Task, domains: dict[str, str]) -> Task:
    if task.scenario not in domains:
        return task
    return replace(task, metadata={**task.metadata, "domain": domains[task.scenario]})


def check_load_policy(
    loaded: LoadedTasks, split: str, on_error: str = "fail", max_skipped_frac: float = 0.0
) -> None:
    """Raise unless ``loaded`` is acceptable under the policy (see ``CandidateLoadPolicy``).

    Args:
        loaded: the result of :func:`load_sources`.
        split: named in the error.
        on_error: ``"fail"``: any error fails; ``"skip"``: failures up to
            ``max_skipped_frac`` of the set are left out and reported.
        max_skipped_frac: 0-1, used with ``"skip"``.

    Raises:
        TaskSetLoadError: the set must not be used; lists every error with its
            file and line. Not a system error: the task files need fixing.
    """
    if not loaded.errors:
        return
    if on_error == "fail":
        raise TaskSetLoadError(
            split,
            loaded.errors,
            f"{len(loaded.errors)} load error(s), {loaded.failed} task(s) "
            "not loaded; policy on_error=fail",
        )
    if loaded.unreadable_sources:
        raise TaskSetLoadError(
            split, loaded.errors, f"unreadable source(s) {loaded.unreadable_sources}"
        )
    if loaded.failed_frac > max_skipped_frac:
        raise TaskSetLoadError(
            split,
            loaded.errors,
            f"{loaded.failed} of {loaded.attempted} task(s) "
            f"failed to load ({loaded.failed_frac:.1%} > max_skipped_frac {max_skipped_frac:.1%})",
        )


def load_held_out(config) -> LoadedTasks:
    """Every task that must never train: the benchmark and the ``exclude_only`` releases (unscreened).

    Raises:
        TaskSetLoadError: any of them fails to load (a shrunken exclusion set would let tasks leak).
    """
    domains = getattr(config, "domains", {})
    benchmark = load_sources(config.benchmark, "benchmark", domains=domains)
    check_load_policy(benchmark, "benchmark", "fail")
    released = load_sources(getattr(config, "exclude_only", []), "exclude_only", domains=domains)
    check_load_policy(released, "exclude_only", "fail")
    return LoadedTasks(benchmark.tasks + released.tasks, benchmark.errors + released.errors)


def load_candidates(config) -> LoadedTasks:
    """Candidate tasks minus anything held out (benchmark, exclude_only) by uid and task identity.

    Raises:
        TaskSetLoadError: a candidate failure beyond ``config.candidate_loading``,
            or any held-out failure (the exclusion needs the whole held-out set).
    """
    from rewardbox.tasks.exclusion import exclude_overlap

    candidates = load_sources(
        config.candidates, "candidate", domains=getattr(config, "domains", {})
    )
    policy = config.candidate_loading
    check_load_policy(candidates, "candidate", policy.on_error, policy.max_skipped_frac)
    held_out = load_held_out(config).tasks
    check_generated_disjoint(candidates.tasks, held_out)
    kept, excluded = exclude_overlap(candidates.tasks, held_out)
    if config.max_candidates is not None:
        kept = kept[: config.max_candidates]
    return replace(candidates, tasks=kept, excluded=[t.uid for t in excluded])


def check_generated_disjoint(candidates: list[Task], held_out: list[Task]) -> None:
    """Fail when a generated training task (tag ``generated``) is a held-out task, by uid or by content.

    Shipped candidates that overlap the held-out set are dropped and reported
    (``LoadedTasks.excluded``); a generated one is a generator fault (a seed that
    reproduces a benchmark task under another name), so the load stops instead.

    Raises:
        TaskSetLoadError: one line per colliding task, naming both tasks
            (``exclusion.check_disjoint``). Not a system error: change the seed or the source.
    """
    from rewardbox.tasks.exclusion import check_disjoint
    from rewardbox.tasks.generated import GENERATED_TAG

    problems = check_disjoint([t for t in candidates if GENERATED_TAG in t.tags], held_out)
    if problems:
        raise TaskSetLoadError(
            "candidate",
            problems,
            f"{len(problems)} generated training task(s) are "
            "held-out tasks (same uid or same content hash)",
        )


def load_benchmark(config) -> LoadedTasks:
    """The benchmark tasks; strict: any task that fails to load fails the load.

    Raises:
        TaskSetLoadError: any broken benchmark file or listed task that did not load.
    """
    loaded = load_sources(config.benchmark, "benchmark", domains=getattr(config, "domains", {}))
    check_load_policy(loaded, "benchmark", "fail")
    if config.max_benchmark is not None:
        loaded.tasks = loaded.tasks[: config.max_benchmark]
    return loaded
