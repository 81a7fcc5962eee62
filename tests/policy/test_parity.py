"""Parser parity: training and evaluation paths read the same raw completions into the same calls."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.run import run_trials
from rewardbox.policy import parity
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.interpreter import interpret
from rewardbox.policy.parity import (
    ParityRecorder,
    RecordedCompletion,
    check_parity,
    hermes_extract,
    load_recorded,
    served_paths,
    shipped_corpus,
)
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.policy.serving_config import ServingConfig
from rewardbox.runtime.compose import campaign_parts
from rewardbox.sandbox.base import ToolSpec

GET_ORDER = ToolSpec(
    "get_order",
    "Look up an order.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)
ADDRESS = ToolSpec(
    "update_address",
    "Change the address.",
    {
        "type": "object",
        "required": ["order_id", "address"],
        "properties": {
            "order_id": {"type": "string"},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            },
        },
    },
)


def _rec(raw_text: str, finish_reason: str = "stop") -> RecordedCompletion:
    return RecordedCompletion("test", raw_text, (GET_ORDER, ADDRESS), finish_reason)


@pytest.mark.parametrize("hermes,reasoning_parser", [(False, False), (True, False), (True, True)])
def test_shipped_corpus_reads_alike_on_every_path(hermes, reasoning_parser):
    corpus = shipped_corpus()
    report = check_parity(corpus, hermes=hermes, reasoning_parser=reasoning_parser)
    assert report.passed, report.mismatches
    assert report.checked == len(corpus) >= 25
    assert report.paths == (
        ("training", "endpoint_text", "endpoint_hermes", "replay")
        if hermes
        else ("training", "endpoint_text")
    )
    assert sum(1 for r in corpus if parity.read_training(r)[0]) >= 15  # most entries do carry calls


def test_a_divergent_training_parser_fails_the_check(monkeypatch):
    def divergent(raw_text, tools, **kwargs):  # reads calls but drops their arguments
        out = interpret(raw_text, tools, **kwargs)
        return dataclasses.replace(
            out, tool_calls=tuple(dataclasses.replace(c, arguments={}) for c in out.tool_calls)
        )

    monkeypatch.setattr(parity, "interpret", divergent)
    report = check_parity(shipped_corpus())
    assert not report.passed
    sources = {m["source"] for m in report.mismatches}
    assert "corpus:plain_call" in sources and "corpus:no_arguments" not in sources  # {} stays {}
    example = next(m for m in report.mismatches if m["source"] == "corpus:plain_call")
    assert example["training"]["calls"] == ["get_order({})"]


def test_calls_inside_reasoning_diverge_unless_the_server_splits_reasoning():
    """vLLM's hermes parser also reads <think> text; our interpreter never does: the check reports it."""
    rec = _rec(
        '<think>I could <tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-1"}}</tool_call>'
        "</think>\nWhich order do you mean?"
    )
    report = check_parity([rec], hermes=True, reasoning_parser=False)
    assert [m["path"] for m in report.mismatches] == [
        "endpoint_hermes"
    ]  # the replay hides it in reasoning
    assert report.mismatches[0]["endpoint_hermes"]["calls"] == ['get_order({"order_id":"ORD-1"})']
    assert check_parity([rec], hermes=True, reasoning_parser=True).passed


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (
            '"{\\"order_id\\": \\"ORD-9\\"}"',
            [("get_order", '{"order_id":"ORD-9"}')],
        ),  # the corpus case
        (
            '"{\\"order_id\\": \\"ORD-9\\", \\"address\\": {\\"street\\": \\"Straße 5\\", \\"city\\": \\"Zürich\\"}}"',
            None,
        ),  # our own: a nested object with non-ASCII, written as a JSON string
        ('"ORD-9"', []),  # a string that is not JSON: malformed on every path
    ],
)
def test_arguments_written_as_a_json_string_read_alike(arguments, expected):
    name = "get_order" if expected is not None else "update_address"
    rec = _rec(f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>')
    content, calls = hermes_extract(rec.raw_text)
    assert content is None and json.loads(calls[0][1]) == json.loads(
        arguments
    )  # the server encodes the string
    readings = parity.read_paths(rec, hermes=True, reasoning_parser=False)
    assert len(set(readings.values())) == 1, readings
    if expected is not None:
        assert list(readings["training"][0]) == expected
    else:
        assert readings["training"][0][0][0] == "update_address"


def test_a_golden_run_is_recorded_with_its_executed_calls_and_reads_alike(tmp_path):
    profile = load_profile("test")
    from rewardbox.tasks.sources import load_benchmark

    tasks = load_benchmark(profile.tasks).tasks[:2]
    recorder = ParityRecorder(limit=50)
    rows, _ = run_trials(
        tasks,
        1,
        GoldenReplayPolicy(),
        campaign_parts(profile),
        on_result=recorder.record,
        keep_results=False,
    )
    assert rows.height == 2 and rows["system_error"].is_null().all()
    records = recorder.records
    assert records and all(r.executed is not None for r in records)
    assert any(r.executed[0] for r in records)  # the golden turns dispatched calls
    path = recorder.write(tmp_path / "parity" / "run.json")
    assert load_recorded(path) == records
    assert check_parity(records, hermes=True).passed
    wrong = dataclasses.replace(records[0], executed=((("not_a_tool", "{}"),), 0))
    assert not check_parity(
        [wrong], hermes=False
    ).passed  # a run that executed something else is caught
    assert load_recorded(tmp_path / "absent.json") == []


def test_served_paths_follow_the_profile():
    local, endpoint = (
        PolicyConfig(kind="golden"),
        PolicyConfig(kind="endpoint", base_url="http://h/v1", model="m"),
    )
    assert served_paths(ServingConfig(), local) == {"hermes": False, "reasoning_parser": False}
    assert served_paths(ServingConfig(), endpoint) == {"hermes": True, "reasoning_parser": False}
    assert served_paths(ServingConfig(kind="vllm", reasoning_parser="qwen3"), local) == {
        "hermes": True,
        "reasoning_parser": True,
    }
    assert served_paths(ServingConfig(kind="vllm", model_family="llama3"), local)["hermes"] is False
