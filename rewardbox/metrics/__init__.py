"""Reliability metrics: pass@k, pass^k, intervals, posterior comparisons, cost.

pass@k is "at least one of k trials passes"; pass^k is "all k trials pass".
Both are unbiased per-task estimators averaged over tasks; system errors are
never counted as failures.
"""

from rewardbox.metrics.campaign import summarise_by_domain, summarise_campaign, summarise_counts
from rewardbox.metrics.comparison import compare_campaigns, compare_counts
from rewardbox.metrics.cost import ModelPrice, PriceTable, campaign_cost, trial_cost_usd
from rewardbox.metrics.intervals import (
    jeffreys_interval,
    prob_better,
    prob_better_overall,
    wilson_interval,
)
from rewardbox.metrics.passk import pass_at_k, pass_hat_k, pass_hat_k_plugin
from rewardbox.metrics.reliability import Reliability, compute_reliability
from rewardbox.metrics.rows import task_counts, with_outcome

__all__ = [
    "ModelPrice",
    "PriceTable",
    "Reliability",
    "campaign_cost",
    "compare_campaigns",
    "compare_counts",
    "compute_reliability",
    "jeffreys_interval",
    "pass_at_k",
    "pass_hat_k",
    "pass_hat_k_plugin",
    "prob_better",
    "prob_better_overall",
    "summarise_by_domain",
    "summarise_campaign",
    "summarise_counts",
    "task_counts",
    "trial_cost_usd",
    "wilson_interval",
    "with_outcome",
]
