"""Report config: which k the reliability report shows and the prices its cost columns use.

Composed by the profile under ``report:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rewardbox.metrics.cost import PriceTable

UNPRICED = {"usd_per_1m_input_tokens": 0.0, "usd_per_1m_cached_input_tokens": 0.0, "usd_per_1m_output_tokens": 0.0}


class ReportConfig(BaseModel):
    """The reliability report.

    Attributes:
        k_values: the k of pass@k and pass^k columns (values above ``evaluation.trials``
            are dropped; 1 and ``evaluation.trials`` are always shown).
        price_table: USD per million tokens by model, for the cost columns (default: unpriced, 0).
    """

    model_config = ConfigDict(extra="forbid")

    k_values: list[int] = [1, 2, 4, 8, 20]
    price_table: PriceTable = Field(default_factory=lambda: PriceTable(version="unpriced", models={"*": UNPRICED}))
