"""Report config: which k the reliability report shows and the prices its cost columns use.

Composed by the profile under ``report:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardbox.metrics.cost import PriceTable
from rewardbox.metrics.splits import domain_to_split

UNPRICED = {
    "usd_per_1m_input_tokens": 0.0,
    "usd_per_1m_cached_input_tokens": 0.0,
    "usd_per_1m_output_tokens": 0.0,
}


class ReportConfig(BaseModel):
    """The reliability report.

    Attributes:
        k_values: the k of pass@k and pass^k columns (values above ``evaluation.trials``
            are dropped; 1 and ``evaluation.trials`` are always shown).
        price_table: USD per million tokens by model, for the cost columns (default: unpriced, 0).
        confidence: two-sided level of the report's intervals (paired task-level bootstrap) and of
            the ``tuned_not_worse_than_base`` check.
        splits: named groups of domains, e.g. ``{in_distribution: [retail, hotel],
            out_of_distribution: [helpdesk]}``; each gets its own base-vs-tuned table
            (``rewardbox.metrics.splits``). A domain may be in one split only.
    """

    model_config = ConfigDict(extra="forbid")

    k_values: list[int] = [1, 2, 4, 8, 20]
    price_table: PriceTable = Field(
        default_factory=lambda: PriceTable(version="unpriced", models={"*": UNPRICED})
    )
    confidence: float = Field(0.95, gt=0, lt=1)
    splits: dict[str, list[str]] = {}

    @model_validator(mode="after")
    def _one_split_per_domain(self) -> ReportConfig:
        domain_to_split(self.splits)
        return self
