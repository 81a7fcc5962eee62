"""Local GRPO trainer: a compact loop of small functions (CPU or one GPU).

Why not TRL's ``GRPOTrainer``: its ``rollout_func`` hook returns token ids for
one prompt -> one completion and is wired to its vLLM generation path; our
rollouts are multi-turn episodes with tool and user turns in between, graded
only at the end, with system-error refills and dynamic sampling. Driving that
through TRL would mean faking prompts and masks around its loop, so we keep a
small loop here and reuse TRL-equivalent pieces: peft LoRA, torch AdamW, and the
pure math in ``advantages``/``losses``.

One step: draw B groups of G rollouts (``groups.collect_groups``), turn every
agent completion into a sample (its prompt ids, its completion ids, the
sampler's per-token log-probs, the guide's masks, the rollout's advantage), and
minimise the clipped surrogate over the policy's own tokens only (tool results
and user messages are inside the prompt ids and never scored), ``ppo_epochs``
times. Tokens are scored under the sampling distribution
(``logprobs.completion_logprobs``), so in fp32 the first epoch's ratio is 1 up to
float error, reported as ``logprob_gap_max``; on bf16 weights (``policy.dtype``
``auto`` on a CPU with bf16 units, or ``bfloat16``) the trainer's own log-probs
are the old ones and the sampler's enter as a truncated importance weight
(``GRPOConfig.old_logprobs``, docs/grpo_training.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

import torch

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.errors import LogprobLengthError
from rewardbox.policy.guided import VocabularyIndex, tool_signatures
from rewardbox.process_memory import release_freed_memory
from rewardbox.tasks.schema import Task
from rewardbox.threads import wide_team
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import (
    Group,
    GroupStats,
    RolloutFn,
    TrialNumbers,
    collect_groups,
    is_truncated,
)
from rewardbox.training.logprobs import Sample, completion_logprobs, guide_masks
from rewardbox.training.losses import policy_loss
from rewardbox.training.memory import PeakMemory
from rewardbox.training.merged_sampling import SamplingWeights, base_dtype
from rewardbox.training.shared_prefix import scored_micro_batches
from rewardbox.training.step_metrics import (
    OptimiseStats,
    StepMetrics,
    TrainingSummary,
    finish_step,
    step_metrics,
)

__all__ = [
    "Sample",
    "StepMetrics",
    "TrainingSummary",
    "completion_logprobs",
    "group_samples",
    "optimise_step",
    "train_grpo",
]


TokenizeTurn = Callable[[EpisodeResult, int], tuple[list[int], list[int]]]


def group_samples(
    groups: Sequence[Group],
    tokenize: TokenizeTurn | None = None,
    *,
    mask_truncated: bool = False,
    guide_index: VocabularyIndex | None = None,
) -> list[Sample]:
    """Every agent completion of every rollout, paired with its rollout's advantage.

    Completions from local policies carry exact token ids and the sampler's
    log-probs. Completions without ids (scripted or endpoint rollouts) are
    rendered by ``tokenize(rollout, turn_index)`` when given (off-policy use, e.g.
    CI with scripted rollouts), else skipped. Rollouts with advantage 0 give no
    gradient and are skipped; with ``mask_truncated`` so are rollouts with a
    length-truncated completion (DAPO overlong filtering). With ``guide_index``
    each sample carries the tool-call guide's masks for its rollout's tools.

    Raises:
        LogprobLengthError: a completion whose sampler log-probs and tokens differ in length
            (naming uid, trial, turn and both lengths); nothing is cut or padded to fit.
    """
    samples = []
    for group in groups:
        for rollout, advantage in zip(group.rollouts, group.advantages):
            if advantage == 0.0 or (mask_truncated and is_truncated(rollout)):
                continue
            signatures = tool_signatures(rollout.tools or []) if guide_index is not None else {}
            for index, turn in enumerate(rollout.agent_turns):
                ids = (turn.prompt_token_ids, turn.completion_token_ids)
                old = turn.completion_logprobs
                if (ids[0] is None or ids[1] is None) and tokenize is not None:
                    ids, old = tokenize(rollout, index), None
                if ids[0] is None or ids[1] is None or not ids[1]:
                    continue
                if old is not None and len(old) != len(ids[1]):
                    raise LogprobLengthError(
                        rollout.uid,
                        rollout.trial,
                        index,
                        len(ids[1]),
                        len(old),
                        "sampler log-probs",
                    )
                masks = guide_masks(guide_index, signatures, ids[1]) if signatures else []
                samples.append(
                    Sample(
                        list(ids[0]),
                        list(ids[1]),
                        float(advantage),
                        None if old is None else list(old),
                        masks,
                    )
                )
    return samples


def _old_logprobs(batch: Sequence[Sample], current: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``[B, T]`` sampler log-probs where known, else the current ones (detached); and whether any was known.

    A sample without sampler log-probs gets the current policy's, stored on it,
    so later epochs compare against the policy that started the step.
    """
    old = current.detach().clone()
    known = False
    for i, sample in enumerate(batch):
        if sample.old_logprobs is None:
            sample.old_logprobs = old[i, : len(sample.completion_ids)].tolist()
        else:
            known = True
            old[i, : len(sample.completion_ids)] = torch.tensor(
                sample.old_logprobs, dtype=old.dtype
            )
    return old, known


def _trainer_old_logprobs(
    batch: Sequence[Sample], current: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, T]`` trainer log-probs at the step's start (the first epoch's, detached, stored on
    ``Sample.trainer_logprobs`` for later epochs), and ``[B, T]`` sampler log-probs where every
    sample has them (else None)."""
    old = current.detach().clone()
    sampler = torch.zeros_like(old) if all(s.old_logprobs is not None for s in batch) else None
    for i, sample in enumerate(batch):
        n = len(sample.completion_ids)
        if sample.trainer_logprobs is None:
            sample.trainer_logprobs = old[i, :n].tolist()
        else:
            old[i, :n] = torch.tensor(sample.trainer_logprobs, dtype=old.dtype)
        if sampler is not None:
            sampler[i, :n] = torch.tensor(sample.old_logprobs, dtype=old.dtype)
    return old, sampler


def old_logprobs_source(config: GRPOConfig, model) -> str:
    """``"sampler"`` or ``"trainer"``: ``config.old_logprobs``, with ``"auto"`` resolved by the
    frozen weights' dtype (fp32: ``"sampler"``; bf16/fp16: ``"trainer"``; a full fine-tune
    looks at its trainable weights). Errors: none."""
    if config.old_logprobs != "auto":
        return config.old_logprobs
    dtype = base_dtype(model)
    return "sampler" if dtype is None or dtype == torch.float32 else "trainer"


def optimise_step(
    model, optimizer, samples: Sequence[Sample], config: GRPOConfig, pad_id: int
) -> OptimiseStats:
    """One optimiser step over all samples with the chosen aggregation over the whole step.

    Each micro-batch's loss is weighted by its share of the step's policy
    tokens (token-mean, DAPO) or sequences (sequence means); the Dr. GRPO
    normaliser is ``config.max_response_tokens``, unset: the step's longest
    completion (the same for every micro-batch cut). Tokens are scored
    at ``config.temperature`` under the guide's masks; the PPO ratio is taken
    against the sampler's log-probs (``Sample.old_logprobs``) or, with
    ``config.old_logprobs`` resolving to ``"trainer"`` (:func:`old_logprobs_source`),
    against the trainer's own at the step's start, each token's loss then weighted by
    ``min(exp(trainer - sampler), config.sampler_is_cap)`` (truncated importance sampling).

    Returns:
        ``OptimiseStats``: loss, ``logprob_gap_max`` (sampler vs trainer, before
        this update), token-weighted clip fraction, mean ratio and k1 KL.
    """
    total_tokens = sum(len(s.completion_ids) for s in samples)
    # L_max of seq-mean-token-sum-norm: a constant of the step, never one micro-batch's padded width
    l_max = config.max_response_tokens or max((len(s.completion_ids) for s in samples), default=1)
    samples = sorted(
        samples, key=lambda s: s.prompt_ids
    )  # neighbours share prompt prefixes (computed once)
    source = old_logprobs_source(config, model)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = {"loss": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0, "approx_kl": 0.0}
    gap: float | None = None
    # each shared prompt prefix runs once per step, its gradient back-propagated once (shared_prefix)
    budget = None if config.micro_batch_memory_mib is None else config.micro_batch_memory_mib << 20
    for batch, logprobs, mask in scored_micro_batches(
        model,
        samples,
        pad_id,
        config.temperature,
        config.micro_batch_sequences,
        memory_budget_bytes=budget,
    ):
        diff = _micro_step(
            batch, logprobs, mask, config, l_max, total_tokens, len(samples), totals, source
        )
        if diff is not None:
            gap = diff if gap is None else max(gap, diff)
    torch.nn.utils.clip_grad_norm_(
        [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
    )
    optimizer.step()
    model.eval()
    return OptimiseStats(logprob_gap_max=gap, **totals)


def _micro_step(
    batch: Sequence[Sample],
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    config: GRPOConfig,
    l_max: int,
    total_tokens: int,
    total_samples: int,
    totals: dict[str, float],
    source: str = "sampler",
) -> float | None:
    """Back-propagate one micro-batch's weighted loss and add its share to ``totals``.

    ``source``: whose log-probs are the old ones (:func:`old_logprobs_source`).
    Returns the largest sampler-vs-trainer log-prob gap on its tokens, None when no sample
    carried sampler log-probs.
    """
    weights = None
    if source == "trainer":
        old, sampler = _trainer_old_logprobs(batch, logprobs)
        known = sampler is not None
        diff = ((logprobs.detach() - sampler).abs() * mask).max().item() if known else None
        if known and config.sampler_is_cap is not None:
            log_w = torch.where(mask > 0, old - sampler, torch.zeros_like(old))
            weights = torch.exp(log_w).clamp(max=config.sampler_is_cap)
    else:
        old, known = _old_logprobs(batch, logprobs)
        diff = ((logprobs.detach() - old).abs() * mask).max().item() if known else None
    advantages = torch.tensor(
        [s.advantage for s in batch], dtype=torch.float32, device=logprobs.device
    )
    loss, stats = policy_loss(
        logprobs,
        old,
        advantages,
        mask,
        clip_eps=config.clip_eps,
        aggregation=config.loss_aggregation,
        max_response_tokens=l_max,
        token_weights=weights,
    )
    share = mask.sum().item() / total_tokens
    weight = share if config.loss_aggregation == "token-mean" else len(batch) / total_samples
    (loss * weight).backward()
    totals["loss"] += loss.item() * weight
    for key in ("clip_frac", "ratio_mean", "approx_kl"):
        totals[key] += stats[key] * share
    return diff


def _optimise_epochs(
    model, optimizer, samples, config: GRPOConfig, pad_id: int
) -> OptimiseStats | None:
    """``config.ppo_epochs`` optimiser steps on the same samples; the gap comes from the first. The
    update's temporaries (GiBs on a 1,100-token prompt) go back to the system after it, and the
    rollouts' freed blocks before it (``process_memory.release_freed_memory``; glibc would keep
    them, and the update's peak would stand on top of them)."""
    if not samples:
        return None
    release_freed_memory()
    with wide_team():  # hundreds of rows per matmul (rewardbox.threads)
        first = last = optimise_step(model, optimizer, samples, config, pad_id)
        for _ in range(config.ppo_epochs - 1):
            last = optimise_step(model, optimizer, samples, config, pad_id)
    last.logprob_gap_max = first.logprob_gap_max
    release_freed_memory()
    return last


async def train_grpo(
    model,
    pad_id: int,
    tasks: Iterator[Task],
    rollout_fn: RolloutFn,
    config: GRPOConfig,
    *,
    on_step: Callable[[StepMetrics], None] | None = None,
    tokenize: TokenizeTurn | None = None,
    guide_index: VocabularyIndex | None = None,
    trials: TrialNumbers | None = None,
    budget_fits_golden: bool = False,
    weights: SamplingWeights | None = None,
) -> TrainingSummary:
    """Run ``config.steps`` GRPO steps on ``model`` in place.

    Args:
        model: a torch causal LM whose trainable parameters are updated (LoRA-wrapped or full).
        pad_id: padding token id.
        tasks: endless task stream (``groups.task_stream``, or a
            ``curriculum.PosteriorTaskSampler``, which then sees every group and
            whose band histogram each step records).
        rollout_fn: runs one rollout with the CURRENT ``model`` (same object).
        config: GRPO settings.
        on_step: called with each step's metrics.
        tokenize: renders completions without token ids (``group_samples``). guide_index: the policy's
            vocabulary index when it samples with the tool-call guide (scored under its masks); else None.
        trials: the run's ``groups.TrialNumbers`` (start it after the probe's trials); None: from 0.
        budget_fits_golden: the token budget holds every golden call (``check_token_budget`` passed):
            cut completions are failures in the loss (``groups.training_rewards``), never masked.
        weights: switches the adapter merged for rollouts, unmerged for the update (``merged_sampling``).

    Returns:
        The per-step metrics. A step without a usable group records ``loss=None``
        and makes no update.
    """
    torch.manual_seed(config.seed)
    optimizer = _adamw(model, config)
    summary, trials = TrainingSummary(), TrialNumbers() if trials is None else trials
    mask_truncated = config.mask_truncated and not budget_fits_golden
    weights = weights or SamplingWeights(model, merge=False)
    for step in range(config.steps):
        t0 = time.perf_counter()
        weights.for_rollouts()
        groups, stats = await _collect(tasks, rollout_fn, config, trials, budget_fits_golden)
        samples = group_samples(
            groups, tokenize, mask_truncated=mask_truncated, guide_index=guide_index
        )
        result, peak, update_s = _timed_update(model, optimizer, samples, config, pad_id, weights)
        metrics = step_metrics(
            step, groups, stats, samples, result, peak, t0, config.tasks_per_step, update_s
        )
        finish_step(step, metrics, result, tasks)
        summary.steps.append(metrics)
        if on_step is not None:
            on_step(metrics)
    return summary


def _timed_update(model, optimizer, samples, config: GRPOConfig, pad_id: int, weights):
    """The step's update, the weights switched back first: (result, peak accelerator bytes, seconds)."""
    started = time.perf_counter()
    weights.for_update()
    with PeakMemory(device=next(model.parameters()).device) as peak:
        result = _optimise_epochs(model, optimizer, samples, config, pad_id)
    return result, peak.peak_bytes, time.perf_counter() - started


def _adamw(model: torch.nn.Module, config: GRPOConfig) -> torch.optim.AdamW:
    """AdamW over the model's trainable parameters (LoRA's, or all) at the configured rate and decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)


def _collect(
    tasks: Iterator[Task],
    rollout_fn: RolloutFn,
    config: GRPOConfig,
    trials: TrialNumbers,
    budget_fits_golden: bool,
) -> Awaitable[tuple[list[Group], GroupStats]]:
    """One step's groups (``groups.collect_groups`` with the step's settings from ``config``)."""
    return collect_groups(
        tasks,
        rollout_fn,
        group_size=config.group_size,
        groups_wanted=config.tasks_per_step,
        max_refill_rounds=config.max_refill_rounds,
        estimator=config.advantage_estimator,
        trials=trials,
        truncation_fails=budget_fits_golden,
        system_error_refill=config.system_error_refill,
        max_system_error_reruns=config.max_system_error_reruns,
        observe=getattr(tasks, "observe", None),
    )
