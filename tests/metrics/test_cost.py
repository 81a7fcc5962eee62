"""Price table, attempt cost and the two headline cost ratios."""

from __future__ import annotations

import polars as pl
import pytest
from pydantic import ValidationError

from rewardbox.metrics import ModelPrice, PriceTable, attempt_cost_usd, campaign_cost

PRICE = ModelPrice(usd_per_1m_input_tokens=2.0, usd_per_1m_cached_input_tokens=0.5, usd_per_1m_output_tokens=8.0)
TABLE = PriceTable(version="test-2025-01", models={"qwen": PRICE})


def rows(outcomes: dict[str, list[int | None]]) -> pl.DataFrame:
    return pl.DataFrame([
        {
            "uid": uid,
            "trial": t,
            "passed": None if o is None else bool(o),
            "system_error": "endpoint: 503" if o is None else None,
            "input_tokens": 1_000_000,
            "cached_input_tokens": 500_000,
            "output_tokens": 100_000,
        }
        for uid, outs in outcomes.items()
        for t, o in enumerate(outs)
    ])


def test_attempt_cost_by_hand():
    # 500k uncached x $2 + 500k cached x $0.5 + 100k out x $8, per 1M tokens.
    assert attempt_cost_usd(1_000_000, 500_000, 100_000, PRICE) == pytest.approx(1.0 + 0.25 + 0.8)
    with pytest.raises(ValueError, match="exceeds input_tokens"):
        attempt_cost_usd(10, 20, 0, PRICE)
    with pytest.raises(ValueError, match=">= 0"):
        attempt_cost_usd(-1, 0, 0, PRICE)


def test_price_table_lookup_and_validation():
    assert TABLE.price("qwen") == PRICE
    with pytest.raises(KeyError, match="test-2025-01.*'gpt'"):
        TABLE.price("gpt")
    free = PriceTable(version="local", models={"*": ModelPrice(
        usd_per_1m_input_tokens=0, usd_per_1m_cached_input_tokens=0, usd_per_1m_output_tokens=0)})
    assert free.price("anything").usd_per_1m_output_tokens == 0
    with pytest.raises(ValidationError):
        PriceTable(version="  ", models={})
    with pytest.raises(ValidationError):
        ModelPrice(usd_per_1m_input_tokens=-1, usd_per_1m_cached_input_tokens=0, usd_per_1m_output_tokens=0)


def test_headline_costs_by_hand():
    # Every clean attempt costs $2.05. Tasks: a 2/2, b 1/2, c 0/2 (+1 system error, not costed).
    cost = campaign_cost(rows({"a": [1, 1], "b": [1, 0], "c": [0, 0, None]}), TABLE, "qwen")
    assert cost["price_table_version"] == "test-2025-01"
    assert cost["campaign_cost_usd"] == pytest.approx(6 * 2.05)
    assert cost["one_attempt_every_task_usd"] == pytest.approx(3 * 2.05)
    # pass@1 = 3/6: one round / (3 tasks x 0.5) = 2.05 / 0.5.
    assert cost["cost_per_successful_attempt_usd"] == pytest.approx(2.05 / 0.5)
    # One dependable task (a): the whole campaign / 1.
    assert cost["dependable_tasks"] == 1
    assert cost["cost_per_dependable_task_usd"] == pytest.approx(6 * 2.05)


def test_zero_denominators_give_none():
    cost = campaign_cost(rows({"a": [0, 0], "b": [1, 0]}), TABLE, "qwen")
    assert cost["cost_per_dependable_task_usd"] is None
    assert cost["cost_per_successful_attempt_usd"] is not None
    nothing = campaign_cost(rows({"a": [0, 0]}), TABLE, "qwen")
    assert nothing["cost_per_successful_attempt_usd"] is None
