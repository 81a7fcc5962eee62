"""Family-level screening (issue #23 item 8): a few instances per family first, more only where mixed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rewardbox.selection.family_screening import family_of, screen_families, supply_from
from rewardbox.tasks.schema import Task

BASE = Task(
    uid="",
    dataset="retail",
    scenario="retail",
    agent="",
    query="q",
    user_context="",
    init={},
    world_state={},
    tools=(),
    system_instructions="",
    bot_instructions="",
    test_code="",
    test_name="",
    test_file="",
)


def _tasks(family: str, count: int) -> list[Task]:
    return [
        replace(BASE, uid=f"{family}.py:test_{family}_{k:02d}", tags=(f"family:{family}",))
        for k in range(count)
    ]


class FakeProbe:
    """Counts calls and probed tasks; ``c`` successes of 4 per task from a per-family table."""

    def __init__(self, successes: dict[str, list[int]]):
        self.successes, self.calls, self.probed = successes, 0, []

    def __call__(self, tasks):
        self.calls += 1
        self.probed.extend(t.uid for t in tasks)
        out = {}
        for task in tasks:
            family, k = task.uid.split(":")[1][len("test_") : -3], int(task.uid[-2:])
            out[task.uid] = (self.successes[family][k], 4)
        return out


def test_only_mixed_families_get_more_instances_probed():
    # all-pass family, all-fail family, a family mixed across instances, a family mixed within one
    successes = {
        "easy": [4] * 6,
        "hard": [0] * 6,
        "across": [4, 0, 2, 1, 0, 3],
        "within": [0, 2, 4, 4, 4, 4],
    }
    pool = [t for name in successes for t in _tasks(name, 6)]
    families, supply = supply_from(pool)
    probe = FakeProbe(successes)
    screen = screen_families(families, supply, probe, first=2, more=3)
    assert families == ["retail/easy", "retail/hard", "retail/across", "retail/within"]
    assert probe.calls == 2  # one batched round each
    assert len(probe.probed) == len(set(probe.probed)) == 2 * 4 + 3 * 2  # nothing probed twice
    grown = {f: r.grown for f, r in screen.families.items()}
    assert grown == {
        "retail/easy": False,
        "retail/hard": False,
        "retail/across": True,
        "retail/within": True,
    }
    assert (screen.families["retail/across"].c, screen.families["retail/across"].n) == (
        4 + 0 + 2 + 1 + 0,
        20,
    )
    assert screen.families["retail/easy"].uids == ["easy.py:test_easy_00", "easy.py:test_easy_01"]
    assert screen.counts["within.py:test_within_01"] == (2, 4) and screen.tasks_probed() == 14


def test_no_mixed_family_means_one_probe_call_and_short_families_are_fine():
    successes = {"easy": [4], "hard": [0, 0, 0]}
    families, supply = supply_from(_tasks("easy", 1) + _tasks("hard", 3))
    probe = FakeProbe(successes)
    screen = screen_families(families, supply, probe, first=2, more=5)
    assert probe.calls == 1 and probe.probed == [
        "easy.py:test_easy_00",
        "hard.py:test_hard_00",
        "hard.py:test_hard_01",
    ]
    assert not any(r.mixed or r.grown for r in screen.families.values())


def test_a_supply_that_generates_on_demand_is_asked_only_for_mixed_families():
    asked = []

    def supply(family, count):
        asked.append((family, count))
        return _tasks(family.split("/")[1], count)

    probe = FakeProbe({"easy": [4] * 4, "across": [4, 0, 1, 1]})
    screen_families(["retail/easy", "retail/across"], supply, probe, first=2, more=2)
    assert asked == [("retail/easy", 2), ("retail/across", 2), ("retail/across", 4)]


def test_bad_arguments_and_a_broken_probe_are_errors():
    families, supply = supply_from(_tasks("easy", 2))
    with pytest.raises(ValueError, match="first must be"):
        screen_families(families, supply, FakeProbe({"easy": [4, 4]}), first=0)
    with pytest.raises(ValueError, match="no counts"):
        screen_families(families, supply, lambda tasks: {})
    with pytest.raises(ValueError, match="not 0 <= c <= n"):
        screen_families(families, supply, lambda tasks: {t.uid: (5, 4) for t in tasks})
    with pytest.raises(ValueError, match="family:<name>"):
        family_of(BASE)


def test_generated_supply_makes_more_instances_only_for_mixed_families_and_matches_the_profile_source(
    tmp_path,
):
    """Generation on demand: the all-pass family is generated once (2 instances), the mixed one grows to 4,
    and the instances equal those of a two-family generated source with the same seed."""
    from rewardbox.selection.family_screening import generated_supply
    from rewardbox.tasks.generated import write_training_dataset
    from rewardbox.tasks.thinkingbox import load_dataset

    probe = FakeProbe({"cancel_explicit": [4, 4], "tell_value": [1, 4, 0, 2]})
    probe_uid = probe.__call__

    def by_suffix(tasks):  # the fake's table is indexed by the _gNN number - 1
        out = probe_uid(
            [
                replace(t, uid=f"x.py:test_{family_of(t).split('/')[1]}_{int(t.uid[-2:]) - 1:02d}")
                for t in tasks
            ]
        )
        return {
            t.uid: out[f"x.py:test_{family_of(t).split('/')[1]}_{int(t.uid[-2:]) - 1:02d}"]
            for t in tasks
        }

    supply = generated_supply("retail", 7, tmp_path / "screen")
    screen = screen_families(
        ["retail/cancel_explicit", "retail/tell_value"], supply, by_suffix, first=2, more=2
    )
    assert probe.calls == 2 and len(screen.counts) == 6
    assert len(list((tmp_path / "screen" / "cancel_explicit" / "test_case").glob("*.py"))) == 1
    assert len(load_dataset(tmp_path / "screen" / "cancel_explicit").tasks) == 2
    assert len(load_dataset(tmp_path / "screen" / "tell_value").tasks) == 4
    write_training_dataset(tmp_path / "profile", "retail", 7, 4, ["cancel_explicit", "tell_value"])
    profile_tasks = {t.uid: t.content_hash() for t in load_dataset(tmp_path / "profile").tasks}
    screened = (
        load_dataset(tmp_path / "screen" / "tell_value").tasks
        + load_dataset(tmp_path / "screen" / "cancel_explicit").tasks
    )
    assert all(profile_tasks[t.uid] == t.content_hash() for t in screened)
    with pytest.raises(ValueError, match="retail families only"):
        supply("hotel/cancel_explicit", 1)


def test_probe_rows_by_family_concatenates_the_rounds_and_counts_clean_trials_only():
    """The row-level form the probe asset would call: system-error rows are stored but never counted."""
    import polars as pl

    from rewardbox.selection.family_screening import probe_rows_by_family

    outcome = {
        "easy": [True, True],
        "across": [True, False],
    }  # per trial, the same for every instance
    calls = []

    def run_rows(batch):
        calls.append([t.uid for t in batch])
        rows = [
            {"uid": t.uid, "trial": i, "passed": ok, "system_error": None}
            for t in batch
            for i, ok in enumerate(outcome[t.uid.split(".")[0]])
        ]
        rows += [
            {"uid": t.uid, "trial": 9, "passed": False, "system_error": "timeout"} for t in batch
        ]
        return pl.DataFrame(
            rows,
            schema={
                "uid": pl.Utf8,
                "trial": pl.Int64,
                "passed": pl.Boolean,
                "system_error": pl.Utf8,
            },
        )

    rows, screen = probe_rows_by_family(
        _tasks("easy", 5) + _tasks("across", 5), run_rows, first=1, more=2
    )
    assert calls == [
        ["easy.py:test_easy_00", "across.py:test_across_00"],
        ["across.py:test_across_01", "across.py:test_across_02"],
    ]
    assert rows.height == 4 * 3 and rows["uid"].n_unique() == 4
    assert screen.counts["across.py:test_across_00"] == (1, 2) and screen.counts[
        "easy.py:test_easy_00"
    ] == (2, 2)
    assert (screen.families["retail/across"].c, screen.families["retail/across"].n) == (3, 6)


def test_an_untagged_task_is_a_family_of_one_probed_in_the_first_round():
    """Tasks without a ``family:`` tag (e.g. an imported release) are never left out: each is its own
    family, probed in round 1 like every task without screening."""
    untagged = [replace(BASE, uid=f"loose.py:test_loose_{k:02d}") for k in range(3)]
    families, supply = supply_from(untagged + _tasks("across", 4))
    assert families[:3] == [f"retail/{t.uid}" for t in untagged]
    counts = dict.fromkeys((t.uid for t in untagged), (1, 4))
    screen = screen_families(
        families,
        supply,
        lambda tasks: {t.uid: counts.get(t.uid, (2, 4)) for t in tasks},
        first=2,
        more=2,
    )
    assert set(counts) <= set(screen.counts) and screen.round_sizes == [3 + 2, 2]
    assert screen.mixed_after_first == [*families[:3], "retail/across"]
    with pytest.raises(ValueError, match="exactly one"):
        supply_from([replace(BASE, uid="x", tags=("family:a", "family:b"))])
