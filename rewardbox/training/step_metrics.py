"""What a local GRPO step reports (``rewardbox.training.trainer``): the optimiser update's loss and
surrogate statistics, the step's metrics (logged and shown in the asset metadata), and the run's
list of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from rewardbox.training.curriculum import format_histogram
from rewardbox.training.groups import is_truncated


@dataclass
class OptimiseStats:
    """One optimiser step: loss and surrogate statistics over its policy tokens.

    ``logprob_gap_max``: max over scored tokens of |sampler log-prob - trainer
    log-prob| before the update (None when no sample carried sampler log-probs).
    """

    loss: float
    logprob_gap_max: float | None = None
    clip_frac: float = 0.0
    ratio_mean: float = 1.0
    approx_kl: float = 0.0


@dataclass
class StepMetrics:
    """Per-step training metrics (logged and shown in the asset metadata).

    ``duration_s``: the whole step, seconds; ``update_s``: its update (the weights' switch back
    from merged sampling, scoring, backward and the AdamW steps), so the rollouts took
    ``duration_s - update_s``.
    """

    step: int
    mean_reward: float | None
    zero_variance_frac: float
    system_error_groups: int
    groups: int
    episodes: int
    samples: int
    policy_tokens: int
    loss: float | None
    duration_s: float
    scored_rollouts: int = 0
    reruns: int = 0
    masked_system_errors: int = 0
    truncated_completions: int = 0
    completions: int = 0
    truncated_rollouts: int = 0
    logprob_gap_max: float | None = None
    clip_frac: float | None = None
    ratio_mean: float | None = None
    approx_kl: float | None = None
    peak_memory_bytes: int = 0
    band_histogram: str = ""
    groups_wanted: int = 0
    refill_rounds: int = 0
    repeated_trials: int = 0
    truncated_failures: int = 0
    update_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrainingSummary:
    """The metrics of every step of a run, in order; ``usage``: the stage's ``wall_s``, ``peak_rss_mib``,
    ``children_peak_rss_mib`` and, where the process applied a thread policy, ``thread_teams`` (a
    string; ``rewardbox.process_memory.stage_usage``, set by ``runtime.train``)."""

    steps: list[StepMetrics] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)


def step_metrics(
    step: int,
    groups,
    stats,
    samples,
    result: OptimiseStats | None,
    peak: int,
    t0: float,
    groups_wanted: int = 0,
    update_s: float = 0.0,
) -> StepMetrics:
    """The metrics of one step from its groups, sampling stats, samples and optimiser result.

    ``peak``: peak accelerator memory of the update, bytes; ``t0``: ``time.perf_counter()`` at the
    step's start; ``update_s``: seconds of the optimiser update.
    """
    rollouts = [r for g in groups for r in g.rollouts]
    turns = [t for r in rollouts for t in r.agent_turns]
    return StepMetrics(
        step=step,
        mean_reward=stats.mean_reward,
        zero_variance_frac=stats.zero_variance_frac,
        system_error_groups=stats.system_error,
        groups=len(groups),
        groups_wanted=groups_wanted,
        episodes=stats.episodes,
        samples=len(samples),
        policy_tokens=sum(len(s.completion_ids) for s in samples),
        loss=None if result is None else result.loss,
        duration_s=time.perf_counter() - t0,
        reruns=stats.reruns,
        masked_system_errors=stats.masked_system_errors,
        truncated_completions=sum(t.finish_reason == "length" for t in turns),
        completions=len(turns),
        truncated_rollouts=sum(is_truncated(r) for r in rollouts),
        logprob_gap_max=None if result is None else result.logprob_gap_max,
        clip_frac=None if result is None else result.clip_frac,
        ratio_mean=None if result is None else result.ratio_mean,
        approx_kl=None if result is None else result.approx_kl,
        peak_memory_bytes=peak,
        scored_rollouts=stats.scored_rollouts,
        refill_rounds=stats.rounds,
        repeated_trials=stats.repeated_trials,
        truncated_failures=stats.truncated_failures,
        update_s=update_s,
    )


def finish_step(step: int, metrics: StepMetrics, result: OptimiseStats | None, tasks: Any) -> None:
    """Add the task sampler's band histogram (when it keeps one) to ``metrics``; raise
    ``FloatingPointError`` when the step's loss is not finite (NaN or inf)."""
    if hasattr(tasks, "band_histogram"):
        metrics.band_histogram = format_histogram(tasks.band_histogram())
    if result is not None and not math.isfinite(result.loss):
        raise FloatingPointError(f"GRPO step {step} produced a non-finite loss {result.loss}")
