"""The grouped-attention benchmark's pairing: each way runs what it names, alternated."""

from __future__ import annotations

import pytest
import torch

from benchmarks import grouped_attention
from rewardbox.policy import attention
from tests.fixtures.tiny_models import tiny_llama


def test_the_anchor_runs_repeated_heads_and_the_measured_way_grouped_queries():
    model = tiny_llama(attn_implementation=attention.NAME).eval()
    module, config = model.model.layers[0].self_attn, model.config
    calls = []
    real, routing = attention.grouped_query_attention, attention._groups_queries
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            attention, "grouped_query_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
        )
        grouped = grouped_attention.attention_call_seconds(
            module, (2, 5, 7), config, torch.float32, True
        )
        assert calls == [1] and grouped > 0
        with grouped_attention.repeated_heads():
            grouped_attention.attention_call_seconds(
                module, (2, 5, 7), config, torch.float32, False
            )
        assert calls == [1]  # the anchor never grouped
        grouped_attention.attention_call_seconds(module, (2, 5, 7), config, torch.float32, False)
        assert calls == [1, 1]  # the routing is back after the anchor
    assert attention._groups_queries is routing
    query, keys, _, mask = grouped_attention._inputs((1, 3, 4), 4, 2, 8, torch.float32)
    assert attention._groups_queries(query, keys, mask, {})


def test_paired_alternates_the_ways_and_the_row_reports_each_ratio():
    order = []

    def measure():
        grouped = attention._groups_queries(*_probe())
        order.append("grouped" if grouped else "repeated")
        return 1.0 if grouped else 2.0

    runs = grouped_attention.paired(measure, repeats=3)
    assert order == ["grouped", "repeated", "repeated", "grouped", "grouped", "repeated"]
    assert runs == {"grouped": [1.0, 1.0, 1.0], "repeated": [2.0, 2.0, 2.0]}
    out = grouped_attention._paired_row("x", runs, 1e3, "ms")
    assert out["value"] == 1000.0 and out["anchor"] == 2000.0 and out["ratio"] == 0.5
    assert "paired ratios 0.50, 0.50, 0.50; median 0.50" in out["row"]
    uneven = grouped_attention._paired_row(
        "x", {"grouped": [1, 3, 2], "repeated": [2, 2, 8]}, 1, "s"
    )
    assert uneven["detail"]["paired_ratio"] == 0.5  # the pairs' median (0.5, 1.5, 0.25)
    assert uneven["ratio"] == 1.0  # the medians' ratio (2 / 2), which the table's ratio column is


def _probe():
    query, keys, _, mask = grouped_attention._inputs((1, 3, 4), 4, 2, 8, torch.float32)
    return query, keys, mask, {}
