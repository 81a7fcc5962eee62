"""Family-level screening: probe a few instances of every family, more only where results are mixed.

Issue #23, item 8 (docs/learning_run.md, "A wider teachable pool"). Teachable tasks
(0 < c < n) cluster by family: a family whose first instances all pass or all fail
under the base policy rarely has a teachable instance, and probing its other
instances spends rollouts for nothing. So:

1. probe the first ``first`` instances of every family;
2. a family is *mixed* when its pooled clean counts satisfy 0 < c < n;
3. only mixed families get ``more`` further instances probed (generated on demand
   when the supply is a generator, e.g. ``rewardbox.tasks.generated``).

The probe itself is the caller's (the probe asset's trials, or a fake in tests);
this module only decides which instances are worth probing. Families are named
``"<domain>/<family>"`` from the ``family:<name>`` tag the domain generators write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rewardbox.tasks.schema import Task

if TYPE_CHECKING:
    import polars as pl

Probe = Callable[[Sequence[Task]], Mapping[str, tuple[int, int]]]
"""``probe(tasks) -> {uid: (c, n)}``: clean successes ``c`` of ``n`` clean trials per task
(system errors excluded, as in the probe asset)."""

Supply = Callable[[str, int], Sequence[Task]]
"""``supply(family, count) -> the family's first count instances`` (fewer when it has fewer);
the same prefix on every call, so earlier instances keep their uids."""


@dataclass
class FamilyResult:
    """One family's screening.

    Attributes:
        family: ``"<domain>/<family>"``.
        c, n: pooled clean successes and clean trials over its probed instances.
        uids: the probed instances, in supply order.
        grown: whether it got the second round (it was mixed after the first).
    """

    family: str
    c: int = 0
    n: int = 0
    uids: list[str] = field(default_factory=list)
    grown: bool = False

    @property
    def mixed(self) -> bool:
        """0 < c < n over the probed instances (False with no clean trial)."""
        return 0 < self.c < self.n


@dataclass
class FamilyScreen:
    """What family-level screening probed.

    Attributes:
        families: ``{family: FamilyResult}`` in first-seen order.
        counts: ``{uid: (c, n)}`` of every probed instance (the probe's own counts).
        probe_calls: how many times ``probe`` ran (one per round with something to probe).
        round_sizes: instances probed in round 1 and in round 2 (0 for a round with nothing to probe).
        mixed_after_first: the families mixed after round 1 (the ones round 2 grows when ``more`` > 0).
    """

    families: dict[str, FamilyResult]
    counts: dict[str, tuple[int, int]]
    probe_calls: int = 0
    round_sizes: list[int] = field(default_factory=lambda: [0, 0])
    mixed_after_first: list[str] = field(default_factory=list)

    def tasks_probed(self) -> int:
        """Instances probed in all."""
        return len(self.counts)


def family_of(task: Task) -> str:
    """``"<domain>/<family>"`` from the task's ``family:<name>`` tag.

    Raises:
        ValueError: the task has no ``family:`` tag (it was not written by a family generator).
    """
    names = [t.split(":", 1)[1] for t in task.tags if t.startswith("family:")]
    if len(names) != 1:
        raise ValueError(f"{task.uid}: needs exactly one 'family:<name>' tag, has {len(names)}")
    return f"{task.domain}/{names[0]}"


def screening_family(task: Task) -> str:
    """:func:`family_of`, or ``"<domain>/<uid>"`` for a task without a ``family:`` tag: a family of one,
    probed in the first round like every task without screening (an untagged task is never left out)."""
    if not any(t.startswith("family:") for t in task.tags):
        return f"{task.domain}/{task.uid}"
    return family_of(task)


def supply_from(tasks: Sequence[Task]) -> tuple[list[str], Supply]:
    """Families (first-seen order, :func:`screening_family`) and a supply over a loaded candidate list.

    Raises:
        ValueError: a task with more than one ``family:`` tag.
    """
    by_family: dict[str, list[Task]] = {}
    for task in tasks:
        by_family.setdefault(screening_family(task), []).append(task)
    return list(by_family), lambda family, count: by_family[family][:count]


def generated_supply(domain: str, seed: int, out: str | Path) -> Supply:
    """A supply that generates training-only instances on demand (``rewardbox.tasks.generated``).

    ``supply("<domain>/<family>", count)`` writes the family's first ``count`` generated
    instances under ``out/<family>`` and loads them; instance ``k`` depends only on
    ``(seed, family, k)``, so these are the same tasks (uids and content) as a profile's
    ``generate:`` source with that seed lists.

    Raises:
        ValueError: a family of another domain, or one the generator refuses.
    """
    from rewardbox.tasks.generated import write_training_dataset
    from rewardbox.tasks.thinkingbox import load_dataset

    def supply(family: str, count: int) -> list[Task]:
        family_domain, _, name = family.partition("/")
        if family_domain != domain:
            raise ValueError(f"{family}: this supply generates {domain} families only")
        path = Path(out) / name
        write_training_dataset(path, domain, seed, count, [name])
        return load_dataset(path, test_list=path / "testlists" / "candidates.yaml").tasks

    return supply


def _probe_round(
    screen: FamilyScreen, wanted: Mapping[str, Sequence[Task]], probe: Probe, index: int
) -> None:
    batch = [t for tasks in wanted.values() for t in tasks if t.uid not in screen.counts]
    if not batch:
        return
    counts = probe(batch)
    screen.probe_calls += 1
    screen.round_sizes[index] = len(batch)
    missing = [t.uid for t in batch if t.uid not in counts]
    if missing:
        raise ValueError(f"the probe returned no counts for {missing[:5]}")
    for family, tasks in wanted.items():
        result = screen.families[family]
        for task in tasks:
            if task.uid in screen.counts or task.uid not in counts:
                continue
            c, n = counts[task.uid]
            if not 0 <= c <= n:
                raise ValueError(f"{task.uid}: probe counts c={c}, n={n} are not 0 <= c <= n")
            screen.counts[task.uid] = (c, n)
            result.c, result.n = result.c + c, result.n + n
            result.uids.append(task.uid)


def screen_families(
    families: Sequence[str], supply: Supply, probe: Probe, first: int = 2, more: int = 4
) -> FamilyScreen:
    """Probe ``first`` instances per family, then ``more`` further ones for mixed families only.

    Args:
        families: family names (``family_of``), in report order.
        supply: the family's first ``count`` instances (a generator may make them on demand).
        probe: runs the trials of a batch of tasks and returns ``{uid: (c, n)}``; called once
            per round (at most twice in all), so a real probe batches every family together.
        first: instances probed per family in the first round (>= 1).
        more: extra instances probed for each family mixed after the first round (>= 0).

    Returns:
        Per family its pooled counts and probed uids; per instance its counts; the number
        of probe calls. Training pools are then chosen from ``counts`` as usual.

    Raises:
        ValueError: ``first`` < 1 or ``more`` < 0; the probe left out a task or returned
            counts outside 0 <= c <= n (a broken probe, not a policy result).
    """
    if first < 1 or more < 0:
        raise ValueError(f"first must be >= 1 and more >= 0, got first={first}, more={more}")
    screen = FamilyScreen(families={f: FamilyResult(f) for f in families}, counts={})
    _probe_round(screen, {f: supply(f, first) for f in families}, probe, 0)
    screen.mixed_after_first = [f for f in families if screen.families[f].mixed]
    mixed = screen.mixed_after_first if more else []
    for family in mixed:
        screen.families[family].grown = True
    _probe_round(screen, {f: supply(f, first + more) for f in mixed}, probe, 1)
    return screen


def probe_rows_by_family(
    tasks: Sequence[Task],
    run_rows: Callable[[Sequence[Task]], pl.DataFrame],
    first: int = 2,
    more: int = 4,
) -> tuple[pl.DataFrame, FamilyScreen]:
    """Family-level screening over probe *rows*: the shape the ``probe_results`` asset stores.

    Args:
        tasks: the screened candidates, grouped by their ``family:`` tag (an untagged task is a
            family of one, :func:`screening_family`).
        run_rows: runs the probe trials of a batch and returns one row per trial
            (``episode.campaign.ROW_SCHEMA``: ``uid``, ``passed``, ``system_error``, ...).
        first, more: as in :func:`screen_families`.

    Returns:
        Every round's rows concatenated (``task_difficulty`` reads them as one probe; an
        instance never probed has no row and so never enters the training pool), and the screen.
        Counts per task: ``n`` = rows without a system error, ``c`` = those that passed.

    Raises:
        ValueError: as :func:`screen_families`.
    """
    import polars as pl

    frames: list[pl.DataFrame] = []

    def probe(batch: Sequence[Task]) -> dict[str, tuple[int, int]]:
        rows = run_rows(batch)
        frames.append(rows)
        clean = rows.filter(pl.col("system_error").is_null())
        counts = {t.uid: (0, 0) for t in batch}
        for row in (
            clean.group_by("uid")
            .agg(pl.col("passed").sum().alias("c"), pl.len().alias("n"))
            .iter_rows()
        ):
            counts[row[0]] = (int(row[1]), int(row[2]))
        return counts

    families, supply = supply_from(tasks)
    screen = screen_families(families, supply, probe, first, more)
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(), screen
