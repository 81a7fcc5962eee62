"""Probe rows -> task difficulty -> training pool."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.selection import (
    DIFFICULTY_COLUMNS,
    SelectionConfig,
    band_counts,
    task_difficulty,
    training_pool,
)


def probes(spec: dict[str, tuple[str, list]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "uid": uid,
                "trial": t,
                "domain": domain,
                "reward": None if o is None else float(o),
                "passed": None if o is None else bool(o),
                "system_error": "sandbox: crashed" if o is None else None,
            }
            for uid, (domain, outs) in spec.items()
            for t, o in enumerate(outs)
        ]
    )


SPEC = {
    "never": ("retail", [0, 0, 0, 0]),
    "once": ("retail", [1, 0, 0, 0]),
    "half": ("airline", [1, 0, 1, 0]),
    "mostly": ("airline", [1, 1, 1, 0]),
    "always": ("airline", [1, 1, 1, 1]),
    "flaky_infra": ("retail", [1, None, 0, None, 0, 0]),
    "broken": ("retail", [None, None, 1]),
}


def test_difficulty_table():
    df = task_difficulty(probes(SPEC), SelectionConfig())
    assert tuple(df.columns) == DIFFICULTY_COLUMNS
    bands = dict(zip(df["uid"].to_list(), df["band"].to_list()))
    assert bands == {
        "always": "too_easy",
        "broken": None,  # 1 clean trial < min_clean_trials = 4
        "flaky_infra": "hard",  # system errors excluded: n = 4, c = 1
        "half": "medium",
        "mostly": "easy",
        "never": "too_hard",
        "once": "hard",
    }
    flaky = df.filter(pl.col("uid") == "flaky_infra").row(0, named=True)
    assert (flaky["n"], flaky["c"], flaky["system_errors"]) == (4, 1, 2)
    assert flaky["posterior_mean"] == pytest.approx(1.5 / 5)
    assert flaky["domain"] == "retail"
    mass_sum = sum(flaky[f"mass_{b}"] for b in ("too_hard", "hard", "medium", "easy", "too_easy"))
    assert mass_sum == pytest.approx(1.0)


def test_training_pool_keeps_configured_bands():
    df = task_difficulty(probes(SPEC))
    pool = training_pool(df, SelectionConfig())
    assert pool["uid"].to_list() == ["flaky_infra", "half", "mostly", "once"]
    only_hard = training_pool(df, SelectionConfig(kept_bands=("hard",)))
    assert only_hard["uid"].to_list() == ["flaky_infra", "once"]
    with pytest.raises(ValueError, match="band"):
        training_pool(df.drop("band"))


def test_min_clean_trials_is_configurable():
    df = task_difficulty(probes(SPEC), SelectionConfig(min_clean_trials=1))
    assert df.filter(pl.col("uid") == "broken")["band"].item() in {"easy", "too_easy"}


def test_without_domain_column_and_band_counts():
    df = task_difficulty(probes(SPEC).drop("domain"))
    assert "domain" not in df.columns
    counts = band_counts(df)
    assert set(counts["domain"].to_list()) == {"(all)"}
    as_dict = dict(zip(counts["band"].to_list(), counts["tasks"].to_list()))
    assert as_dict == {
        "too_hard": 1,
        "hard": 2,
        "medium": 1,
        "easy": 1,
        "too_easy": 1,
        "unbanded": 1,
    }


def test_band_counts_per_domain_fills_zeros():
    counts = band_counts(task_difficulty(probes(SPEC)))
    airline = counts.filter(pl.col("domain") == "airline")
    assert dict(zip(airline["band"].to_list(), airline["tasks"].to_list()))["too_hard"] == 0
    assert counts.height == 2 * 6  # two domains x (five bands + unbanded)


def test_read_only_tasks_whose_null_run_passes_never_enter_the_pool():
    from dataclasses import dataclass, field

    from rewardbox.selection import teachable

    @dataclass
    class _Task:
        uid: str
        metadata: dict = field(default_factory=dict)

    tasks = [
        _Task("write"),
        _Task("read_told", {"read_only": True, "null_passes": False}),
        _Task("read_nothing_to_do", {"read_only": True, "null_passes": True}),
        _Task("w2", {"read_only": False}),
    ]
    kept, left_out = teachable(tasks)
    assert [t.uid for t in kept] == ["write", "read_told", "w2"]
    assert left_out == ["read_nothing_to_do"]
