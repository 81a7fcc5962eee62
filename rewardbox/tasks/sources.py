"""Resolve configured task sources into tasks: candidates and benchmark.

A source is ``embedded:<domain>`` (a dataset shipped in ``rewardbox.domains``)
or a ThinkingBox dataset directory, with an optional test list. Broken task
files are reported (file, line, field) and skipped; the other tasks still load.
Candidates are filtered against the benchmark by uid and by content hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.schema import Task

EMBEDDED_PREFIX = "embedded:"


@dataclass
class LoadedTasks:
    tasks: list[Task]
    errors: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


def resolve_dataset(dataset: str) -> Path:
    """``embedded:retail`` -> the shipped dataset directory; anything else is a path."""
    if dataset.startswith(EMBEDDED_PREFIX):
        from rewardbox.domains.registry import dataset_dir

        return dataset_dir(dataset[len(EMBEDDED_PREFIX):])
    path = Path(dataset).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"dataset directory {path} does not exist")
    return path


def _resolve_list(dataset_path: Path, test_list: str | None) -> Path | None:
    if test_list is None:
        return None
    candidate = Path(test_list)
    return candidate if candidate.is_absolute() or candidate.exists() else dataset_path / test_list


def load_sources(sources, split: str, limit: int | None = None, domains: dict[str, str] | None = None) -> LoadedTasks:
    """Load every source of one split (``"candidate"``, ``"benchmark"`` or ``"exclude_only"``).

    Args:
        sources: ``TaskSource`` configs.
        split: stored on each task's ``split`` field.
        limit: keep at most this many tasks (first ones, deterministic), or None.
        domains: ``{scenario: domain}`` (``tasks.domains``); a mapped scenario's
            tasks get ``metadata["domain"]``, the others report their scenario.

    Returns:
        Tasks in source order and the load errors as strings (file, line, field).
    """
    from rewardbox.tasks.thinkingbox import load_dataset

    out = LoadedTasks(tasks=[])
    for source in sources:
        path = resolve_dataset(source.dataset)
        name = source.name or (source.dataset[len(EMBEDDED_PREFIX):] if source.dataset.startswith(EMBEDDED_PREFIX) else path.name)
        try:
            loaded = load_dataset(path, test_list=_resolve_list(path, source.test_list), dataset_name=name)
        except TaskFormatError as exc:
            out.errors.append(str(exc))
            continue
        out.errors.extend(str(e) for e in loaded.errors)
        tasks = loaded.tasks[: source.limit] if source.limit else loaded.tasks
        out.tasks.extend(_with_domain(replace(t, split=split), domains or {}) for t in tasks)
    if limit is not None:
        out.tasks = out.tasks[:limit]
    return out


def _with_domain(task: Task, domains: dict[str, str]) -> Task:
    if task.scenario not in domains:
        return task
    return replace(task, metadata={**task.metadata, "domain": domains[task.scenario]})


def load_held_out(config) -> LoadedTasks:
    """Every task that must never train: the benchmark and the ``exclude_only`` releases (unscreened)."""
    domains = getattr(config, "domains", {})
    benchmark = load_sources(config.benchmark, "benchmark", domains=domains)
    released = load_sources(getattr(config, "exclude_only", []), "exclude_only", domains=domains)
    return LoadedTasks(benchmark.tasks + released.tasks, benchmark.errors + released.errors)


def load_candidates(config) -> LoadedTasks:
    """Candidate tasks minus anything held out (benchmark, exclude_only) by uid and task identity."""
    from rewardbox.tasks.exclusion import exclude_overlap

    candidates = load_sources(config.candidates, "candidate", domains=getattr(config, "domains", {}))
    kept, excluded = exclude_overlap(candidates.tasks, load_held_out(config).tasks)
    if config.max_candidates is not None:
        kept = kept[: config.max_candidates]
    return LoadedTasks(kept, candidates.errors, [t.uid for t in excluded])


def load_benchmark(config) -> LoadedTasks:
    return load_sources(config.benchmark, "benchmark", config.max_benchmark, domains=getattr(config, "domains", {}))
