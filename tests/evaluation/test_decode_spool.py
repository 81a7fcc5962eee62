"""The decode spool writes what ``export_decode_results`` writes for the merged results, holding none of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardbox.episode.trajectory import AgentTurn, EpisodeResult, TestOutcome
from rewardbox.evaluation.decode_spool import DecodeResultSpool
from rewardbox.evaluation.interchange import export_decode_results
from rewardbox.tasks.thinkingbox import load_dataset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def tasks():
    return load_dataset(FIXTURES / "tb_dataset").tasks


def _result(uid: str, trial: int, passed: bool | None) -> EpisodeResult:
    messages = [{"role": "user", "content": f"help {trial}"}, {"role": "assistant", "content": "Done. <DONE>"}]
    if passed is None:
        return EpisodeResult(uid=uid, trial=trial, finish_reason="system_error", system_error="sandbox: crashed")
    return EpisodeResult(uid=uid, trial=trial, messages=messages, agent_turns=[AgentTurn("x", "stop", 40, 5)],
                         finish_reason="done", reward=float(passed), passed=passed,
                         test_outcome=TestOutcome(passed, float(passed)), effects={"srv": {"result_db_hash": uid}})


def test_spool_equals_export_of_the_merged_results(tasks, tmp_path):
    a, b = tasks[0].uid, tasks[1].uid
    first = [_result(b, 1, True), _result(a, 0, None), _result(b, 0, False), _result(a, 1, True)]  # completion order
    repair = [_result(a, 0, True)]  # replaces the system error of (a, 0)
    spool = DecodeResultSpool(tasks, tmp_path / "out" / "spool.jsonl")
    for result in [*first, *repair]:
        spool.write(result)
    path = spool.finish()
    latest = {(r.uid, r.trial): r for r in [*first, *repair]}
    expected = export_decode_results([latest[k] for k in sorted(latest)], tasks, tmp_path / "export.jsonl")
    assert path.read_bytes() == expected.read_bytes()
    assert len(path.read_text().splitlines()) == 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["spool.jsonl"]  # no scratch or tmp file left


def test_spool_refuses_a_foreign_uid_and_close_is_idempotent(tasks, tmp_path):
    with DecodeResultSpool(tasks, tmp_path / "d.jsonl") as spool:
        with pytest.raises(ValueError, match="no task for uid 'nope'"):
            spool.write(_result("nope", 0, True))
    spool.close()
    assert not (tmp_path / "d.jsonl").exists()
