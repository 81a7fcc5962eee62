"""Price table, attempt cost and the two headline cost ratios."""

from __future__ import annotations

import polars as pl
import pytest
from pydantic import ValidationError

from rewardbox.metrics import ModelPrice, PriceTable, campaign_cost, trial_cost_usd
from rewardbox.metrics.cost import usage_cost

PRICE = ModelPrice(
    usd_per_1m_input_tokens=2.0, usd_per_1m_cached_input_tokens=0.5, usd_per_1m_output_tokens=8.0
)
TABLE = PriceTable(version="test-2025-01", models={"qwen": PRICE})


def rows(outcomes: dict[str, list[int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
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
        ]
    )


def test_attempt_cost_by_hand():
    # 500k uncached x $2 + 500k cached x $0.5 + 100k out x $8, per 1M tokens.
    assert trial_cost_usd(1_000_000, 500_000, 100_000, PRICE) == pytest.approx(1.0 + 0.25 + 0.8)
    # more cached than input (bad provider data): uncached clamped at 0, cached still billed
    assert trial_cost_usd(10, 20, 0, PRICE) == pytest.approx(20 * 0.5 / 1e6)
    with pytest.raises(ValueError, match=">= 0"):
        trial_cost_usd(-1, 0, 0, PRICE)


def test_price_table_lookup_and_validation():
    assert TABLE.price("qwen") == PRICE
    with pytest.raises(KeyError, match="test-2025-01.*'gpt'"):
        TABLE.price("gpt")
    free = PriceTable(
        version="local",
        models={
            "*": ModelPrice(
                usd_per_1m_input_tokens=0,
                usd_per_1m_cached_input_tokens=0,
                usd_per_1m_output_tokens=0,
            )
        },
    )
    assert free.price("anything").usd_per_1m_output_tokens == 0
    with pytest.raises(ValidationError):
        PriceTable(version="  ", models={})
    with pytest.raises(ValidationError):
        ModelPrice(
            usd_per_1m_input_tokens=-1, usd_per_1m_cached_input_tokens=0, usd_per_1m_output_tokens=0
        )


def test_headline_costs_by_hand():
    # Every clean attempt costs $2.05. Tasks: a 2/2, b 1/2, c 0/2 (+1 system error, not costed).
    cost = campaign_cost(rows({"a": [1, 1], "b": [1, 0], "c": [0, 0, None]}), TABLE, "qwen")
    assert cost["price_table_version"] == "test-2025-01"
    assert cost["campaign_cost_usd"] == pytest.approx(6 * 2.05)
    assert cost["one_trial_every_task_usd"] == pytest.approx(3 * 2.05)
    # pass@1 = 3/6: one round / (3 tasks x 0.5) = 2.05 / 0.5.
    assert cost["cost_per_successful_trial_usd"] == pytest.approx(2.05 / 0.5)
    # One dependable task (a): the whole campaign / 1.
    assert cost["dependable_tasks"] == 1
    assert cost["cost_per_dependable_task_usd"] == pytest.approx(6 * 2.05)


def test_zero_denominators_give_none():
    cost = campaign_cost(rows({"a": [0, 0], "b": [1, 0]}), TABLE, "qwen")
    assert cost["cost_per_dependable_task_usd"] is None
    assert cost["cost_per_successful_trial_usd"] is not None
    nothing = campaign_cost(rows({"a": [0, 0]}), TABLE, "qwen")
    assert nothing["cost_per_successful_trial_usd"] is None


# --- issue #12 item 8: cached tokens above prompt tokens ---------------------------------------------------

ISSUE12_PRICE = ModelPrice(
    usd_per_1m_input_tokens=1.00, usd_per_1m_cached_input_tokens=0.10, usd_per_1m_output_tokens=4.00
)
ISSUE12_TABLE = PriceTable(version="issue-12", models={"m": ISSUE12_PRICE})


def _usage_rows(
    cached: list[int], prompt: list[int] | None = None, uids: list[str] | None = None
) -> pl.DataFrame:
    prompt = prompt or [10_000] * len(cached)
    uids = uids or [f"t{i}" for i in range(len(cached))]
    return pl.DataFrame(
        {
            "uid": uids,
            "trial": list(range(len(cached))),
            "passed": [True] * len(cached),
            "system_error": [None] * len(cached),
            "input_tokens": prompt,
            "cached_input_tokens": cached,
            "output_tokens": [500] * len(cached),
        }
    )


def test_issue12_item8_given_rows():
    clean = campaign_cost(_usage_rows([8_000] * 4), ISSUE12_TABLE, "m")
    assert (
        clean["campaign_cost_usd"] == pytest.approx(0.0192)
        and clean["cached_above_input_rows"] == 0
    )
    bad = campaign_cost(_usage_rows([12_000, 8_000, 8_000, 8_000]), ISSUE12_TABLE, "m")
    assert bad["campaign_cost_usd"] == pytest.approx(0.0176)  # netted sums gave 0.0156
    assert bad["cached_above_input_rows"] == 1
    # attempt level: the same rule
    row0 = usage_cost(10_000, 12_000, 500, ISSUE12_PRICE)
    assert row0.usd == pytest.approx(0.0032) and row0.cached_above_input is True
    assert trial_cost_usd(10_000, 8_000, 500, ISSUE12_PRICE) == pytest.approx(0.0048)


def test_issue12_item8_own_case_bad_rows_inside_one_task_and_system_errors():
    # Two trials of ONE task: the bad row must not net against its sibling inside the task either,
    # and a system-error row with bad counts is neither costed nor counted.
    rows = _usage_rows([15_000, 0], prompt=[5_000, 5_000], uids=["a", "a"])
    cost = campaign_cost(rows, ISSUE12_TABLE, "m")
    expected = (0 * 1.0 + 15_000 * 0.1 + 500 * 4) / 1e6 + (5_000 * 1.0 + 500 * 4) / 1e6
    assert (
        cost["campaign_cost_usd"] == pytest.approx(expected)
        and cost["cached_above_input_rows"] == 1
    )
    assert cost["one_trial_every_task_usd"] == pytest.approx(expected / 2)
    errored = pl.concat(
        [
            rows,
            pl.DataFrame(
                {
                    "uid": ["a"],
                    "trial": [9],
                    "passed": [None],
                    "system_error": ["endpoint: 503"],
                    "input_tokens": [1],
                    "cached_input_tokens": [99],
                    "output_tokens": [500],
                }
            ),
        ],
        how="vertical_relaxed",
    )
    again = campaign_cost(errored, ISSUE12_TABLE, "m")
    assert (
        again["campaign_cost_usd"] == pytest.approx(expected)
        and again["cached_above_input_rows"] == 1
    )
    with pytest.raises(ValueError, match="uid='a', trial=1"):
        campaign_cost(rows.with_columns(pl.Series("output_tokens", [500, -1])), ISSUE12_TABLE, "m")
