"""Estimated cost: token usage x a versioned price table (a comparative index, not an invoice).

Token convention (OpenAI usage semantics, docs/thinkingbox.md, "DecodeResult rows"): ``input_tokens`` *includes*
``cached_input_tokens``; the cached part is billed at the cached rate and the
rest at the input rate.

Bad provider data (more cached than input tokens) is handled per trial row,
the same rule at trial and campaign level: that row's uncached count is
clamped at 0 (its cached tokens are still billed at the cached rate) and the
row is counted in ``cached_above_input_rows``. Costs are computed row by row
and then summed, so one bad row never nets a negative count against the
others. Negative counts are refused (``ValueError`` naming the row).

Headline costs (docs/method.md, "Metrics"):

* cost per successful trial = estimated cost of one trial at every task /
  (tasks x pass@1). "One trial at every task" is the sum over tasks of the
  task's mean cost per clean trial, so the ratio is the expected spend per
  success.
* cost per dependable task = estimated cost of the whole tasks x k campaign /
  tasks that passed every clean trial (observed k/k).

Only clean trials are costed: a system error is an infrastructure fault, its
trial is refilled, and the refill's tokens are what the campaign costs.
When a denominator is 0 (pass@1 = 0, or no task passed k/k) the cost is
``None``, meaning "not attainable from this campaign", and reports print n/a.
A local model priced at 0 gives costs of 0; reports then show tokens too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rewardbox.metrics.campaign import NO_DOMAIN
from rewardbox.metrics.rows import TOKEN_COLUMNS, task_counts, with_outcome

WILDCARD_MODEL = "*"
"""Price-table key that matches any model not listed explicitly."""


class ModelPrice(BaseModel):
    """USD per one million tokens for one model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd_per_1m_input_tokens: float = Field(ge=0.0)
    usd_per_1m_cached_input_tokens: float = Field(ge=0.0)
    usd_per_1m_output_tokens: float = Field(ge=0.0)


class PriceTable(BaseModel):
    """A versioned table of model prices; the version is stamped on every cost.

    Attributes:
        version: a label such as ``"2025-06-list-prices"``; must be non-empty.
        models: model name -> :class:`ModelPrice`. The key ``"*"`` (optional)
            prices every model not listed, e.g. 0 for local weights.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    models: dict[str, ModelPrice]

    @field_validator("version")
    @classmethod
    def _version_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("version must be a non-empty label, e.g. '2025-06-list-prices'")
        return value

    def price(self, model: str) -> ModelPrice:
        """The price of ``model`` (or the ``"*"`` entry).

        Raises:
            KeyError: the model is not in the table and there is no ``"*"`` entry;
                the message names the model and the table version.
        """
        if model in self.models:
            return self.models[model]
        if WILDCARD_MODEL in self.models:
            return self.models[WILDCARD_MODEL]
        raise KeyError(
            f"price table {self.version!r} has no entry for model {model!r} (have {sorted(self.models)}); "
            f"add it or a '*' entry"
        )


@dataclass(frozen=True)
class UsageCost:
    """Estimated cost of one trial's token usage.

    Attributes:
        usd: the cost, USD.
        cached_above_input: the usage reported more cached than input tokens;
            the uncached count was clamped at 0 (an anomaly to count, not an error).
    """

    usd: float
    cached_above_input: bool


def usage_cost(
    input_tokens: int, cached_input_tokens: int, output_tokens: int, price: ModelPrice
) -> UsageCost:
    """Estimated cost of one trial's usage (see the module docstring).

    ``max(input - cached, 0) * input_rate + cached * cached_rate + output * output_rate``,
    rates per 1e6 tokens. Apply it per trial, never to sums over trials.

    Raises:
        ValueError: a negative token count (bad input).
    """
    if min(input_tokens, cached_input_tokens, output_tokens) < 0:
        raise ValueError(
            f"token counts must be >= 0, got input={input_tokens}, cached={cached_input_tokens}, output={output_tokens}"
        )
    uncached = max(input_tokens - cached_input_tokens, 0)
    usd = (
        uncached * price.usd_per_1m_input_tokens
        + cached_input_tokens * price.usd_per_1m_cached_input_tokens
        + output_tokens * price.usd_per_1m_output_tokens
    ) / 1e6
    return UsageCost(usd, cached_input_tokens > input_tokens)


def trial_cost_usd(
    input_tokens: int, cached_input_tokens: int, output_tokens: int, price: ModelPrice
) -> float:
    """Estimated USD cost of one trial's usage: ``usage_cost(...).usd`` (cached above input clamped).

    Raises:
        ValueError: a negative token count.
    """
    return usage_cost(input_tokens, cached_input_tokens, output_tokens, price).usd


def row_costs(rows: pl.DataFrame, price: ModelPrice) -> pl.DataFrame:
    """Clean trial rows with ``cost_usd`` and ``cached_above_input`` columns (rule of ``usage_cost``).

    Raises:
        ValueError: bad rows (see ``with_outcome``) or a negative token count;
            the message names the first offending uid and trial.
    """
    clean = with_outcome(rows).filter(~pl.col("is_system_error"))
    counts = {
        name: (pl.col(name).fill_null(0) if name in clean.columns else pl.lit(0)).cast(pl.Int64)
        for name in TOKEN_COLUMNS
    }
    clean = clean.with_columns(**counts)
    negative = clean.filter(pl.min_horizontal(*TOKEN_COLUMNS) < 0)
    if negative.height:
        first = negative.row(0, named=True)
        raise ValueError(
            f"token counts must be >= 0: uid={first['uid']!r}, trial={first['trial']} has "
            + ", ".join(f"{name}={first[name]}" for name in TOKEN_COLUMNS)
        )
    uncached = (pl.col("input_tokens") - pl.col("cached_input_tokens")).clip(lower_bound=0)
    cost = (
        uncached * price.usd_per_1m_input_tokens
        + pl.col("cached_input_tokens") * price.usd_per_1m_cached_input_tokens
        + pl.col("output_tokens") * price.usd_per_1m_output_tokens
    ) / 1e6
    return clean.with_columns(
        cost_usd=cost, cached_above_input=pl.col("cached_input_tokens") > pl.col("input_tokens")
    )


def campaign_cost(rows: pl.DataFrame, price_table: PriceTable, model: str) -> dict[str, Any]:
    """Campaign cost and the two headline cost ratios for one policy.

    Args:
        rows: trial rows (``rewardbox.metrics.rows``) with token columns.
        price_table: prices; its version is returned with the numbers.
        model: the model name to price.

    Returns:
        ``price_table_version``, ``model``, ``campaign_cost_usd`` (all clean
        trials), ``one_trial_every_task_usd``, ``cost_per_successful_trial_usd``
        (None when pass@1 = 0), ``cost_per_dependable_task_usd`` (None when no task
        passed all its clean trials), ``dependable_tasks``, ``tasks`` (with at
        least one clean trial), ``cached_above_input_rows`` (clean rows whose
        cached count exceeded their input count; clamped, see module docstring).

    Raises:
        KeyError: the model has no price. ValueError: bad rows (see ``task_counts``).
    """
    price = price_table.price(model)
    costed = row_costs(rows, price)
    per_row = costed.group_by("uid").agg(pl.col("cost_usd").sum())
    per_task = (
        task_counts(rows).filter(pl.col("n") > 0).join(per_row, on="uid", how="left").sort("uid")
    )
    task_costs = per_task["cost_usd"].fill_null(0.0).to_list()
    n_list, c_list = per_task["n"].to_list(), per_task["c"].to_list()
    campaign_usd = float(sum(task_costs))
    one_round_usd = float(sum(cost / n for cost, n in zip(task_costs, n_list)))
    tasks, trials, successes = len(n_list), sum(n_list), sum(c_list)
    dependable = sum(1 for n, c in zip(n_list, c_list) if c == n)
    pass_at_1 = successes / trials if trials else 0.0
    return {
        "price_table_version": price_table.version,
        "model": model,
        "tasks": tasks,
        "campaign_cost_usd": campaign_usd,
        "one_trial_every_task_usd": one_round_usd,
        "cost_per_successful_trial_usd": one_round_usd / (tasks * pass_at_1)
        if pass_at_1 > 0
        else None,
        "dependable_tasks": dependable,
        "cost_per_dependable_task_usd": campaign_usd / dependable if dependable else None,
        "cached_above_input_rows": int(costed["cached_above_input"].sum()),
    }


def domain_costs(
    base_rows: pl.DataFrame,
    tuned_rows: pl.DataFrame,
    price_table: PriceTable | None,
    base_model: str,
    tuned_model: str,
) -> pl.DataFrame | None:
    """Cost per domain of each campaign (``campaign_cost`` on the domain's rows); None without a price table.

    Returns:
        One row per domain: ``domain``, ``{base,tuned}_cost_per_successful_trial_usd``,
        ``{base,tuned}_campaign_cost_usd`` (USD; None where no trial passed).

    Raises:
        KeyError: a model missing from the price table (as ``campaign_cost``).
    """
    if price_table is None:
        return None
    sides = {"base": (base_rows, base_model), "tuned": (tuned_rows, tuned_model)}
    domains = sorted({d for rows, _ in sides.values() for d in _domains(rows)})
    records = []
    for domain in domains:
        record: dict[str, Any] = {"domain": domain}
        for side, (rows, model) in sides.items():
            sub = rows.filter(pl.col("domain") == domain) if "domain" in rows.columns else rows
            cost = campaign_cost(sub, price_table, model) if sub.height else None
            record[f"{side}_cost_per_successful_trial_usd"] = (
                cost and cost["cost_per_successful_trial_usd"]
            )
            record[f"{side}_campaign_cost_usd"] = cost and cost["campaign_cost_usd"]
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None)


def _domains(rows: pl.DataFrame) -> list[str]:
    if "domain" not in rows.columns:
        return [NO_DOMAIN]
    return [d for d in rows["domain"].unique().to_list() if d is not None]
