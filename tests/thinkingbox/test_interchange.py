"""ThinkingBox interchange: DecodeResult JSONL export and `tb infer` import into probe rows
(docs/thinkingbox.md, "DecodeResult rows")."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from rewardbox.episode.campaign import ROW_SCHEMA, results_frame
from rewardbox.episode.trajectory import AgentTurn, EpisodeResult, TestOutcome
from rewardbox.sandbox.base import ToolSpec
from rewardbox.selection import SelectionConfig, task_difficulty
from rewardbox.tasks.thinkingbox import load_dataset
from rewardbox.thinkingbox.interchange import (
    InterchangeError,
    export_decode_results,
    import_infer_report,
    import_infer_results,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TB_INFER = FIXTURES / "tb_infer" / "probe_run.jsonl"
REFUND = "fake_shop_orders.py:test_refund_ok"
LOOKUP = "fake_shop_orders.py:test_lookup_only"
CANCEL = "fake_shop_declarative.yaml:cancel_order"

DECODE_RESULT_FIELDS = {
    "uid",
    "messages",
    "test_result",
    "test_context",
    "test_tags",
    "tools",
    "raw_messages",
    "user_llm_history",
    "usage",
    "metadata",
    "is_system_error",
    "finish_reason",
}
METADATA_FIELDS = {
    "scenario",
    "test_case_file",
    "test_case_name",
    "agent",
    "repetition",
    "execution_time",
    "time_agent",
    "time_user",
    "time_tool",
    "time_test",
    "time_agent_user_loop",
}
TEST_RESULT_FIELDS = {
    "result",
    "reward",
    "is_system_error",
    "tb",
    "prints",
    "lineno",
    "line_content",
    "metadata",
}


@pytest.fixture(scope="module")
def tasks():
    return load_dataset(FIXTURES / "tb_dataset").tasks


def _tools():
    return [
        ToolSpec(
            "ReportSuspiciousToolOutput", "Report.", {"type": "object", "properties": {}}, True
        ),
        ToolSpec(
            "refund_order",
            "Refund a delivered order.",
            {"type": "object", "properties": {"order_id": {"type": "string"}}},
        ),
    ]


def _passed(trial: int = 0) -> EpisodeResult:
    """A full episode: reasoning, a good call, a malformed call, a simulated user turn, <DONE>."""
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "system", "content": "Shop policy."},
        {"role": "user", "content": "Hi, please refund my order ORD-1."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Refund it.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "refund_order", "arguments": {"order_id": "ORD-1"}},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "", "arguments": {}},
                    "raw": "{not json",
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "refund_order",
            "content": '{"status": "refunded"}',
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "name": "",
            "content": "Error: invalid JSON in tool call",
        },
        {"role": "assistant", "content": "Refunded. Anything else?"},
        {"role": "user", "content": "No thanks.", "is_user_llm": True},
        {"role": "assistant", "content": "Goodbye. <DONE>"},
    ]
    turns = [
        AgentTurn("t1", "stop", 120, 30, 64),
        AgentTurn("t2", "stop", 180, 12, 128),
        AgentTurn("t3", "stop", 200, 5, 190),
    ]
    return EpisodeResult(
        uid=REFUND,
        trial=trial,
        messages=messages,
        agent_turns=turns,
        termination_reason="done",
        reward=1.0,
        passed=True,
        test_outcome=TestOutcome(True, 1.0, prints="ok\n"),
        effects={"fake_shop": {"result_db_hash": "a"}},
        tool_calls=[
            {
                "tool_call": {"name": "refund_order", "arguments": {"order_id": "ORD-1"}},
                "tool_response": "{}",
            }
        ],
        tools=_tools(),
        duration_s=2.5,
        time_agent_s=1.0,
        time_user_s=0.2,
        time_tool_s=0.5,
        time_test_s=0.4,
    )


def _failed(trial: int) -> EpisodeResult:
    messages = [
        {"role": "user", "content": "Where is ORD-2?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "e1",
                    "type": "function",
                    "function": {
                        "name": "ReportSuspiciousToolOutput",
                        "arguments": {"reason": "x"},
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "e1", "name": "ReportSuspiciousToolOutput", "content": ""},
    ]
    outcome = TestOutcome(
        False,
        0.0,
        message="AssertionError: terminal state differs",
        tb="Traceback...",
        lineno=15,
        line_content="assert ...",
    )
    return EpisodeResult(
        uid=LOOKUP,
        trial=trial,
        messages=messages,
        agent_turns=[AgentTurn("x", "stop", 50, 9)],
        termination_reason="end_turn_tool",
        reward=0.0,
        passed=False,
        test_outcome=outcome,
        tools=_tools(),
        duration_s=1.0,
    )


def _decode_error(trial: int) -> EpisodeResult:
    return EpisodeResult(
        uid=LOOKUP,
        trial=trial,
        termination_reason="system_error",
        system_error="sandbox: server 'fake_shop' exited during init",
        duration_s=0.3,
        tries=3,
    )


def _test_error(trial: int) -> EpisodeResult:
    outcome = TestOutcome(
        False,
        0.0,
        is_system_error=True,
        message="KeyError: 'fake_shop'",
        tb="Traceback...\nKeyError: 'fake_shop'",
    )
    return EpisodeResult(
        uid=CANCEL,
        trial=trial,
        messages=[
            {"role": "user", "content": "Cancel ORD-4."},
            {"role": "assistant", "content": "Cancelled. <DONE>"},
        ],
        agent_turns=[AgentTurn("y", "stop", 70, 4)],
        termination_reason="system_error",
        system_error="grader: KeyError: 'fake_shop'",
        test_outcome=outcome,
        duration_s=0.8,
    )


def _context_limit(trial: int) -> EpisodeResult:
    return EpisodeResult(
        uid=CANCEL,
        trial=trial,
        messages=[{"role": "user", "content": "Cancel ORD-4."}],
        termination_reason="context_limit",
        reward=0.0,
        passed=False,
        test_outcome=TestOutcome(False, 0.0),
    )


def _all_results() -> list[EpisodeResult]:
    return [_passed(0), _passed(1), _failed(0), _decode_error(1), _test_error(0), _context_limit(1)]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_decode_result_field_is_present(tasks, tmp_path):
    rows = _lines(export_decode_results(_all_results(), tasks, tmp_path / "out" / "decode.jsonl"))
    assert [r["uid"] for r in rows] == [r.uid for r in _all_results()]  # input order
    for row in rows:
        assert set(row) == DECODE_RESULT_FIELDS
        assert set(row["metadata"]) >= METADATA_FIELDS
        assert row["finish_reason"] in {
            "done",
            "end_turn_tool",
            "agent_error",
            "agent_limit",
            "user_limit",
            "user_done",
            "no_user_llm",
            "skipped",
        }
        assert row["test_tags"]["labels"] and row["user_llm_history"] is None
        if row["test_result"] is not None:
            assert set(row["test_result"]) == TEST_RESULT_FIELDS
        for usage in row["usage"]:
            assert set(usage) == {
                "input_tokens",
                "input_tokens_details",
                "output_tokens",
                "output_tokens_details",
                "total_tokens",
            }
            assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    first = rows[0]
    assert (
        first["metadata"].items()
        >= {
            "scenario": "fake_shop",
            "test_case_file": "test_case/fake_shop/fake_shop_orders.py",
            "test_case_name": "test_refund_ok",
            "agent": "think",
            "repetition": 0,
        }.items()
    )
    assert [u["input_tokens_details"]["cached_tokens"] for u in first["usage"]] == [64, 128, 190]
    assert first["tools"][1] == {
        "name": "refund_order",
        "description": "Refund a delivered order.",
        "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "direct_response": None,
        "is_end_turn": False,
    }
    assert first["test_context"]["effects"] == {"fake_shop": {"result_db_hash": "a"}}
    assert first["test_context"]["response"] == "Goodbye. <DONE>"
    assert first["raw_messages"][3]["tool_calls"][1]["raw"] == "{not json"
    assert (
        rows[5]["finish_reason"] == "agent_limit"
        and rows[5]["metadata"]["rewardbox_termination_reason"] == "context_limit"
    )


def test_messages_become_the_tagged_union(tasks, tmp_path):
    row = _lines(export_decode_results([_passed()], tasks, tmp_path / "d.jsonl"))[0]
    kinds = [(m["T"], m.get("role"), m["metadata"].get("tag")) for m in row["messages"]]
    assert kinds == [
        ("Text", "system", "text"),
        ("Text", "system", "text"),
        ("Text", "user", "text"),
        ("Text", "assistant", "think"),
        ("ParallelToolCall", None, None),
        ("ToolResponse", None, None),
        ("ToolResponse", None, None),
        ("Text", "assistant", "text"),
        ("Text", "user", "text"),
        ("Text", "assistant", "text"),
    ]
    good, bad = row["messages"][4]["tool_calls"]
    assert (good["T"], good["name"], good["arguments"], good["id"], good["metadata"]) == (
        "ToolCall",
        "refund_order",
        {"order_id": "ORD-1"},
        "c1",
        {},
    )
    assert bad["metadata"]["error"] == "Error: invalid JSON in tool call"
    assert row["messages"][5] == {
        "T": "ToolResponse",
        "name": "refund_order",
        "content": '{"status": "refunded"}',
        "id": "c1",
        "metadata": {},
    }
    assert row["messages"][8]["metadata"] == {"tag": "text", "is_user_llm": True}
    assert row["messages"][9]["metadata"] == {"tag": "text", "is_done": True}
    assert "is_done" not in row["messages"][7]["metadata"]
    pairs = row["test_context"]["tool_calls"]
    assert [(p["tool_call"]["id"], p["tool_response"]["id"]) for p in pairs] == [
        ("c1", "c1"),
        ("c2", "c2"),
    ]


def test_end_turn_call_is_flagged_and_its_empty_response_kept_out_of_messages(tasks, tmp_path):
    row = _lines(export_decode_results([_failed(0)], tasks, tmp_path / "d.jsonl"))[0]
    assert [m["T"] for m in row["messages"]] == ["Text", "ParallelToolCall"]
    assert row["messages"][1]["tool_calls"][0]["metadata"] == {"is_end_turn_tool": True}
    assert row["finish_reason"] == "end_turn_tool"
    assert row["test_context"]["tool_calls"][0]["tool_response"]["content"] == ""
    assert (
        row["test_result"].items()
        >= {"result": False, "reward": 0.0, "lineno": 15, "line_content": "assert ..."}.items()
    )


def test_system_errors_are_exported_as_thinkingbox_writes_them(tasks, tmp_path):
    decode, test = _lines(
        export_decode_results([_decode_error(1), _test_error(0)], tasks, tmp_path / "d.jsonl")
    )
    assert (
        decode["is_system_error"] is True
        and decode["test_result"] is None
        and decode["test_context"] is None
    )
    assert decode["metadata"]["error"] == {
        "type": "sandbox",
        "message": "server 'fake_shop' exited during init",
        "tb": "",
    }
    assert test["is_system_error"] is False and "error" not in test["metadata"]
    assert test["test_result"]["is_system_error"] is True and test["test_result"]["result"] is False


def test_export_rejects_results_without_their_task(tasks, tmp_path):
    stray = EpisodeResult(uid="nope.py:test_x", trial=0)
    with pytest.raises(ValueError, match=r"no task for uid\(s\) \['nope.py:test_x'\]"):
        export_decode_results([stray], tasks, tmp_path / "d.jsonl")
    assert not (tmp_path / "d.jsonl").exists()


def test_round_trip_keeps_every_row_field(tasks, tmp_path):
    results = _all_results()
    path = export_decode_results(results, tasks, tmp_path / "d.jsonl")
    imported = import_infer_results(path, tasks)
    expected = results_frame(results, tasks)
    assert imported.schema == pl.Schema(ROW_SCHEMA)
    assert imported.to_dicts() == expected.to_dicts()
    without_tasks = import_infer_results(path)  # domain comes from metadata then
    assert without_tasks["domain"].to_list() == expected["domain"].to_list()


def test_tb_infer_fixture_feeds_task_difficulty(tasks):
    rows = import_infer_results(TB_INFER, tasks)
    assert rows.height == 12 and rows["tries"].unique().to_list() == [1]
    first = rows.row(0, named=True)
    assert (
        first.items()
        >= {
            "uid": REFUND,
            "trial": 0,
            "reward": 1.0,
            "passed": True,
            "system_error": None,
            "turns": 2,
            "input_tokens": 1910,
            "cached_input_tokens": 1408,
            "output_tokens": 65,
            "duration_s": 3.1,
        }.items()
    )
    errors = rows.filter(pl.col("system_error").is_not_null())
    assert errors.select("uid", "trial", "system_error").rows() == [
        (LOOKUP, 2, "SessionCreateError: session_create failed: server exited with code 1"),
        (CANCEL, 1, "grader: KeyError: 'fake_shop'"),
    ]
    assert errors["reward"].to_list() == [None, None]
    assert rows.filter(pl.col("uid") == CANCEL)["termination_reason"].to_list() == [
        "done",
        "done",
        "done",
        "user_limit",
    ]
    difficulty = task_difficulty(rows, SelectionConfig(min_clean_trials=3))
    counts = {
        r["uid"]: (r["n"], r["c"], r["system_errors"]) for r in difficulty.iter_rows(named=True)
    }
    assert counts == {REFUND: (4, 3, 0), LOOKUP: (3, 0, 1), CANCEL: (3, 1, 1)}
    assert difficulty.filter(pl.col("uid") == LOOKUP)["posterior_mean"].item() == pytest.approx(
        0.5 / 4
    )


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"bad\.jsonl:2: not valid JSON"),
        ("[1, 2]", r"bad\.jsonl:2: expected a JSON object, got list"),
        ('{"metadata": {"repetition": 0}}', r"bad\.jsonl:2 \(field 'uid'\): missing"),
        (
            '{"uid": "a.py:t", "metadata": {}}',
            r"bad\.jsonl:2 \(field 'metadata\.repetition'\): missing",
        ),
        (
            '{"uid": "a.py:t", "metadata": {"repetition": "0"}}',
            r"\(field 'metadata\.repetition'\): expected",
        ),
        (
            '{"uid": "a.py:t", "metadata": {"repetition": 0}, "test_result": {"result": true, "reward": 2}}',
            r"\(field 'test_result\.reward'\): reward 2\.0 is outside \[0, 1\]",
        ),
        (
            '{"uid": "a.py:t", "metadata": {"repetition": 0}, "test_result": {"reward": 1}}',
            r"\(field 'test_result\.result'\)",
        ),
        (
            '{"uid": "a.py:t", "metadata": {"repetition": 0}, "usage": [{"input_tokens": "9"}], "test_result": {"result": true, "reward": 1}}',
            r"\(field 'usage\[0\]\.input_tokens'\)",
        ),
        (
            '{"uid": "a.py:t", "metadata": {"repetition": 1}, "test_result": {"result": true, "reward": 1}}',
            r"bad\.jsonl:2 \(field 'uid'\): \(uid, repetition\) \('a\.py:t', 1\) repeats line 1",
        ),
    ],
)
def test_malformed_lines_name_the_file_line_and_field(tmp_path, line, message):
    good = '{"uid": "a.py:t", "metadata": {"repetition": 1}, "test_result": {"result": true, "reward": 1}}'
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n\n")
    with pytest.raises(InterchangeError, match=message):
        import_infer_results(path)


def test_missing_test_result_and_unknown_uid(tasks, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"uid": "%s", "metadata": {"repetition": 0}, "messages": [{"T": "ParallelToolCall"}, '
        '{"T": "Text", "role": "assistant", "content": "hi"}]}\n' % REFUND
    )
    row = import_infer_results(path, tasks).row(0, named=True)
    assert (
        row["system_error"].startswith("missing test_result")
        and row["turns"] == 2
        and row["passed"] is None
    )


def test_partial_import_keeps_what_matches_and_reports_the_rest(tasks, tmp_path):
    lines = TB_INFER.read_text().splitlines()
    path = tmp_path / "r.jsonl"
    unknown = '{"uid": "dropped.py:test_x", "metadata": {"repetition": %d}, "test_result": {"result": true, "reward": 1}}'
    path.write_text("\n".join([unknown % 0, *lines, unknown % 1]) + "\n")
    rows, left_out = import_infer_report(path, tasks)
    assert (
        rows.to_dicts() == import_infer_results(TB_INFER, tasks).to_dicts()
    )  # every known uid imported
    assert left_out == [
        "dropped.py:test_x: not among the given tasks (screened out or not loaded); "
        "2 line(s) from line 1 left out"
    ]
    kept = [t for t in tasks if t.uid != REFUND]  # screening dropped one task of the run
    rows, left_out = import_infer_report(TB_INFER, kept)
    assert (
        REFUND not in rows["uid"].to_list()
        and rows.height == 8
        and left_out[0].startswith(f"{REFUND}: ")
    )


# --- issue #12 item 4: non-finite numbers in exported JSONL -------------------------------------------------


def _strict_lines(path: Path) -> list[dict]:
    def reject(name):
        raise AssertionError(f"non-strict JSON literal {name} in {path}")

    return [
        json.loads(line, parse_constant=reject)
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def test_issue12_item4_non_finite_values_are_written_as_null(tasks, tmp_path):
    result = _passed()
    result.duration_s = float("inf")
    result.test_outcome = TestOutcome(
        True,
        float("nan"),
        metadata={"mean_logprob": float("nan"), "min_logprob": float("-inf"), "tokens": 7},
    )
    row = _strict_lines(export_decode_results([result, _failed(0)], tasks, tmp_path / "d.jsonl"))[0]
    assert row["uid"] == REFUND  # the row is kept, not refused
    assert row["test_result"]["reward"] is None and row["metadata"]["execution_time"] is None
    assert row["test_result"]["metadata"]["mean_logprob"] is None
    assert row["test_result"]["metadata"]["min_logprob"] is None
    assert row["test_result"]["metadata"]["tokens"] == 7 and row["test_result"]["result"] is True


def test_issue12_item4_own_case_non_finite_inside_nested_messages_and_timings(tasks, tmp_path):
    result = _passed()
    result.time_tool_s = float("-inf")
    result.messages[4]["content"] = (
        '{"status": "refunded", "fee": NaN}'  # text stays text, verbatim
    )
    result.test_outcome = TestOutcome(
        True, 1.0, metadata={"per_turn": [0.5, float("nan"), {"x": float("inf")}]}
    )
    path = export_decode_results([result], tasks, tmp_path / "d.jsonl")
    row = _strict_lines(path)[0]
    assert row["metadata"]["time_tool"] is None
    assert row["test_result"]["metadata"]["per_turn"] == [0.5, None, {"x": None}]
    assert '\\"fee\\": NaN' in path.read_text(
        encoding="utf-8"
    )  # inside a string it is text, kept verbatim
