"""Reference screening: verdicts under the counts and posterior rules, system errors, the pool gate, config."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from rewardbox.selection.reference import (
    exceedance_probability,
    gate_pool,
    reference_verdicts,
    successes_histogram,
    verdict_counts,
)
from rewardbox.selection.reference_config import ReferenceConfig

IMPORT = {"import_results": "runs/reference.jsonl"}


def rows(spec: dict[str, str]) -> pl.DataFrame:
    """Attempt rows from ``{uid: outcomes}``: ``P`` pass, ``F`` fail, ``E`` system error, one per trial."""
    out = []
    for uid, outcomes in spec.items():
        for trial, mark in enumerate(outcomes):
            error = "endpoint: HTTP 503" if mark == "E" else None
            out.append(
                {
                    "uid": uid,
                    "trial": trial,
                    "passed": None if error else mark == "P",
                    "reward": None if error else float(mark == "P"),
                    "system_error": error,
                }
            )
    return pl.DataFrame(
        out,
        schema={
            "uid": pl.Utf8,
            "trial": pl.Int64,
            "passed": pl.Boolean,
            "reward": pl.Float64,
            "system_error": pl.Utf8,
        },
    )


def by_uid(verdicts: pl.DataFrame) -> dict[str, dict]:
    return {row["uid"]: row for row in verdicts.iter_rows(named=True)}


def test_counts_rule_needs_min_successes_in_the_first_clean_runs():
    config = ReferenceConfig(**IMPORT, min_clean_runs=4, min_successes=2)
    verdicts = by_uid(
        reference_verdicts(
            rows(
                {
                    "two": "FPFP",  # 2 of 4: passes
                    "one": "FFFP",  # 1 of 4: fails
                    "late": "FFFFPP",  # successes only after the first 4 clean runs: fails
                    "early": "PP",  # 2 successes already: passes with fewer runs
                }
            ),
            config,
        )
    )
    assert {uid: v["verdict"] for uid, v in verdicts.items()} == {
        "two": "passed",
        "one": "failed",
        "late": "failed",
        "early": "passed",
    }
    assert (
        verdicts["late"]["c"] == 2
        and verdicts["late"]["c_first_runs"] == 0
        and verdicts["late"]["n"] == 6
    )
    assert verdicts["two"]["exceedance_prob"] is None  # counts rule: no posterior


def test_system_errors_are_neither_runs_nor_failures():
    config = ReferenceConfig(**IMPORT, min_clean_runs=3, min_successes=1)
    verdicts = by_uid(
        reference_verdicts(
            rows(
                {
                    "refilled": "EEFFP",  # the 3 clean runs are F F P: passes (errors skipped, not counted as F)
                    "short": "FEEF",  # 2 clean failures, 2 errors: cannot decide
                    "all_errors": "EEEE",  # no clean run at all
                    "clean_fail": "FFF",
                }
            ),
            config,
        )
    )
    assert verdicts["refilled"]["verdict"] == "passed" and verdicts["refilled"]["n"] == 3
    assert verdicts["refilled"]["system_errors"] == 2
    assert verdicts["short"]["verdict"] == "incomplete" and verdicts["short"]["n"] == 2
    assert verdicts["all_errors"]["verdict"] == "incomplete" and verdicts["all_errors"]["n"] == 0
    assert verdicts["clean_fail"]["verdict"] == "failed"


def test_exceedance_matches_scipy_and_the_arcsine_law():
    c, n = np.array([3, 1, 0, 4, 2, 0]), np.array([4, 4, 4, 4, 8, 0])
    got = exceedance_probability(c, n, 0.5)
    want = [stats.beta(cc + 0.5, nn - cc + 0.5).sf(0.5) for cc, nn in zip(c, n)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] == pytest.approx(0.8395305452627101, abs=1e-12)  # Beta(3.5, 1.5)
    assert got[3] == pytest.approx(0.9850436360895858, abs=1e-12)  # Beta(4.5, 0.5)
    # n = 0 is the Jeffreys prior Beta(1/2, 1/2), whose CDF is (2/pi) asin(sqrt(x)) (the arcsine law)
    prior = exceedance_probability([0], [0], 0.1)[0]
    assert prior == pytest.approx(1 - 2 / math.pi * math.asin(math.sqrt(0.1)), abs=1e-12)
    assert prior == pytest.approx(0.7951672353008665, abs=1e-12)


def test_exceedance_rejects_bad_input():
    with pytest.raises(ValueError, match="strictly inside"):
        exceedance_probability([1], [2], 1.0)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        exceedance_probability([3], [2], 0.5)
    assert exceedance_probability([], [], 0.5).shape == (0,)


def test_posterior_rule_uses_every_clean_run():
    # P(p > 0.5 | c, n=4): c=3 -> 0.8395, c=4 -> 0.9850; q = 0.9 keeps only 4 of 4
    config = ReferenceConfig(**IMPORT, min_clean_runs=4, posterior_threshold=0.5, posterior_q=0.9)
    verdicts = by_uid(
        reference_verdicts(
            rows({"three": "PPPF", "four": "PPPP", "errors": "PPEE", "four_of_5": "PEPPPF"}), config
        )
    )
    assert verdicts["three"]["verdict"] == "failed"
    assert verdicts["three"]["exceedance_prob"] == pytest.approx(0.8395305452627101, abs=1e-12)
    assert verdicts["four"]["verdict"] == "passed"
    assert verdicts["errors"]["verdict"] == "incomplete"  # 2 clean runs < 4, however good they are
    # 4 of 5 clean runs (the error skipped, the 5th run counted too): Beta(4.5, 1.5), 0.9123 >= 0.9
    assert verdicts["four_of_5"]["exceedance_prob"] == pytest.approx(0.9122870906761479, abs=1e-12)
    assert verdicts["four_of_5"]["verdict"] == "passed"


def test_gate_keeps_passed_tasks_and_names_the_removed_ones():
    config = ReferenceConfig(**IMPORT, min_clean_runs=2)
    verdicts = reference_verdicts(rows({"a": "PF", "b": "FF", "c": "EE"}), config)
    pool = pl.DataFrame(
        {"uid": ["c", "a", "b", "unprobed"], "band": ["hard", "easy", "medium", "hard"]}
    )
    kept, removed = gate_pool(pool, verdicts)
    assert kept["uid"].to_list() == ["a"]
    assert removed.select("uid", "verdict").rows() == [
        ("b", "failed"),
        ("c", "incomplete"),
        ("unprobed", "not_probed"),
    ]
    assert verdict_counts(verdicts) == {"passed": 1, "failed": 1, "incomplete": 1}
    assert successes_histogram(verdicts).rows() == [(0, 0, 1, 0), (2, 0, 1, 0), (2, 1, 1, 1)]


def test_no_rows_give_no_verdicts():
    empty = rows({})
    verdicts = reference_verdicts(empty, ReferenceConfig(**IMPORT))
    assert verdicts.height == 0 and verdict_counts(verdicts) == {
        "passed": 0,
        "failed": 0,
        "incomplete": 0,
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one source"),
        (
            {**IMPORT, "policy": {"kind": "endpoint", "base_url": "http://x/v1", "model": "m"}},
            "exactly one source",
        ),
        ({"policy": {"kind": "golden"}}, "must be 'endpoint'"),
        ({**IMPORT, "min_clean_runs": 2, "min_successes": 3}, "exceeds min_clean_runs"),
        ({**IMPORT, "posterior_threshold": 0.5}, "go together"),
        ({**IMPORT, "posterior_threshold": 0.5, "posterior_q": 1.0}, "less than 1"),
        ({**IMPORT, "posterior_threshold": 0.0, "posterior_q": 0.9}, "greater than 0"),
        ({**IMPORT, "min_clean_runs": 4, "typo": 1}, "Extra inputs"),
    ],
)
def test_config_rejects_what_cannot_work(fields, message):
    with pytest.raises(ValueError, match=message):
        ReferenceConfig(**fields)


def test_profile_reference_section_is_off_by_default_and_validated(tmp_path):
    from rewardbox.config.profile import load_profile

    for name in ("demo", "full", "test"):
        assert load_profile(name).reference is None
    text = (load_profile.__globals__["PROFILE_DIR"] / "test.yaml").read_text()
    path = tmp_path / "ref.yaml"
    path.write_text(
        text + "reference:\n  import_results: ref.jsonl\n  min_clean_runs: 3\n  min_successes: 4\n"
    )
    with pytest.raises(ValueError, match="reference.*min_successes"):
        load_profile(path)
    path.write_text(
        text
        + "reference:\n  policy: {kind: endpoint, base_url: 'http://127.0.0.1:9/v1', model: m}\n"
    )
    profile = load_profile(path)
    assert profile.reference.rule == "counts"
    from rewardbox.config.provenance import run_tags

    assert (
        run_tags(profile)["rewardbox/reference_endpoint"] == "127.0.0.1:9"
    )  # the run queue's per-host limit
    assert "rewardbox/reference_endpoint" not in run_tags(profile, samples_policy=False)
