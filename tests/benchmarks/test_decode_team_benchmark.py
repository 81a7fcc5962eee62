"""The decode-team benchmark's bookkeeping: alternation with a setting per campaign, and its rows."""

from __future__ import annotations

import pytest

from benchmarks import decode_team, precision


def test_alternated_campaigns_set_each_campaigns_setting_first_and_alternate_the_order(monkeypatch):
    calls = []
    monkeypatch.setattr(
        precision,
        "_campaign",
        lambda policy, profile, tasks, trials: (
            calls.append(("run", policy)) or {"wall_s": float(len(calls))}
        ),
    )
    runs = precision.alternated_campaigns(
        {"a": "P", "b": "P"}, None, [], 1, 3, before_each=lambda key: calls.append(("set", key))
    )
    assert [c for c in calls if c[0] == "set"] == [
        ("set", k) for k in ("a", "b", "b", "a", "a", "b")
    ]
    # every campaign runs right after its own setting
    assert all(calls[i][0] == "set" and calls[i + 1][0] == "run" for i in range(0, len(calls), 2))
    assert {k: len(v) for k, v in runs.items()} == {"a": 3, "b": 3}


def test_decode_team_rows_pair_each_campaign_with_the_one_thread_run_and_count_identical_tokens():
    def result(wall, rows_per_s):
        return {"wall_s": wall, "decode_rows_per_s": rows_per_s, "outcomes": {}, "first_turns": {}}

    runs = {
        "1 thread": [result(100.0, 40.0), result(110.0, 44.0)],
        "2 threads": [result(80.0, 60.0), result(99.0, 66.0)],
    }
    greedy = {"1 thread": [[1, 2], [3]], "2 threads": [[1, 2], [4]]}
    chosen = {"threads": 2, "probe_s": {1: 0.02, 2: 0.012}}
    wall, decode, tokens = decode_team._rows(runs, greedy, 18, chosen, "bfloat16")
    assert wall["value"] == pytest.approx(89.5) and wall["anchor"] == pytest.approx(105.0)
    assert "median 0.85" in wall["row"] and "auto chose 2" in wall["row"]  # median of 0.8 and 0.9
    assert (
        wall["detail"]["auto_chose"] == chosen
        and "first_turns" not in wall["detail"]["1 thread"][0]
    )
    assert decode["value"] == pytest.approx(63.0) and decode["anchor"] == pytest.approx(42.0)
    assert tokens["value"] == 0.5 and "(1 of 2)" in tokens["row"]
