"""Rejection-sampling fine-tuning (RFT): the optional warm start before GRPO (docs/warm_start.md).

The data are the base policy's own successful trajectories of the training pool: the probe's
passing ``(uid, trial)`` keys of pool tasks (:func:`successful_probe_keys`), replayed with the same
policy, episode settings and per-(uid, trial, turn) seeds (``rewardbox.runtime.warm_start``), and
kept only when the replay passes again, cleanly and uncut (:func:`kept_trajectories`). Benchmark
tasks never enter (the runtime refuses a pool that holds one), and neither do failed, system-error
or truncated trajectories.

Every agent turn of a kept trajectory becomes one sample exactly as GRPO builds it
(``trainer.group_samples``: the exact sampler token ids, or the chat template's rendering for
policies without ids), so the loss mask is GRPO's: only the policy's own completion tokens of each
agent turn carry loss, never the prompt, tool results or user turns (all inside the prompt ids).
The update is the supervised negative log-likelihood of those tokens, token-mean over each batch,
scored at temperature 1 without the tool-call guide's masks (a plain language-model NLL), through
the trainer's micro-batching with each shared prompt prefix encoded once
(``shared_prefix.scored_micro_batches``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl
import torch

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import Group, is_truncated
from rewardbox.training.logprobs import Sample
from rewardbox.training.rft_config import RFTConfig
from rewardbox.training.shared_prefix import scored_micro_batches
from rewardbox.training.trainer import TokenizeTurn, group_samples

RFT_ADVANTAGE = 1.0
"""The weight every warm-start sample carries in ``Sample.advantage`` (unused by the NLL; > 0 so that
``group_samples`` keeps it: it skips samples of advantage 0)."""


def successful_probe_keys(
    probe_rows: pl.DataFrame, pool: Sequence[Task], max_per_task: int
) -> list[tuple[str, int]]:
    """The probe's successful ``(uid, trial)`` keys of pool tasks, at most ``max_per_task`` per task
    (lowest trials first), sorted by uid then trial.

    A row counts when it ``passed``, carries a reward, has no system error and, where the rows say
    so, no truncated turn. Rows of tasks outside ``pool`` (benchmark tasks, candidates the selection
    dropped) never count.

    Raises:
        ValueError: ``max_per_task`` < 1, or the rows lack ``uid``, ``trial`` or ``passed``.
    """
    if max_per_task < 1:
        raise ValueError(f"max_per_task must be >= 1, got {max_per_task}")
    missing = {"uid", "trial", "passed"} - set(probe_rows.columns)
    if missing:
        raise ValueError(f"probe rows lack the columns {sorted(missing)}")
    ok = pl.col("uid").is_in([t.uid for t in pool]) & pl.col("passed").fill_null(False)
    for column, clean in (
        ("system_error", pl.col("system_error").is_null()),
        ("reward", pl.col("reward").is_not_null()),
        ("truncated_turns", pl.col("truncated_turns").fill_null(0) == 0),
    ):
        if column in probe_rows.columns:
            ok = ok & clean
    rows = probe_rows.filter(ok).sort("uid", "trial")
    rows = rows.group_by("uid", maintain_order=True).head(max_per_task)
    return [(uid, int(trial)) for uid, trial in rows.select("uid", "trial").iter_rows()]


def kept_trajectories(
    results: Iterable[EpisodeResult], pool: Sequence[Task]
) -> list[EpisodeResult]:
    """The replayed trajectories the warm start trains on: pool tasks only, passed, scored (no system
    error), no completion cut by the token budget. A replay that failed is dropped (rejection)."""
    uids = {t.uid for t in pool}
    return [
        r
        for r in results
        if r.uid in uids
        and r.system_error is None
        and r.reward is not None
        and bool(r.passed)
        and not is_truncated(r)
    ]


def rft_samples(
    trajectories: Sequence[EpisodeResult],
    pool: Sequence[Task],
    tokenize: TokenizeTurn | None = None,
) -> list[Sample]:
    """One sample per agent turn of each kept trajectory (:func:`kept_trajectories` applied here too),
    built by GRPO's own ``trainer.group_samples`` with advantage :data:`RFT_ADVANTAGE`: the exact token
    ids of the sampler, or ``tokenize``'s chat-template rendering for policies without ids."""
    by_uid = {t.uid: t for t in pool}
    kept = kept_trajectories(trajectories, pool)
    groups = [Group(by_uid[r.uid], [r], [RFT_ADVANTAGE]) for r in kept]
    return group_samples(groups, tokenize, mask_truncated=True)


def nll_loss(logprobs: torch.Tensor, mask: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """Negative log-likelihood of the masked completion tokens / ``total_tokens`` (the batch's
    masked tokens, so micro-batches add up to the batch's token mean). ``logprobs``, ``mask``:
    ``[B, T]``; positions with mask 0 contribute exactly 0 (``where``, so padding cannot leak)."""
    masked = torch.where(mask > 0, logprobs, torch.zeros_like(logprobs))
    return -masked.sum() / max(1, total_tokens)


@dataclass
class RFTSummary:
    """What the warm start's update did.

    Attributes:
        samples: agent-turn samples trained on; tokens: their completion tokens (the masked ones).
        epoch_nll: mean NLL per completion token (nats) over each epoch, as trained (before each step).
        logprob_before, logprob_after: mean log-prob per completion token of the samples (nats) under
            the model before and after the update (no dropout, temperature 1).
    """

    samples: int = 0
    tokens: int = 0
    epoch_nll: list[float] = field(default_factory=list)
    logprob_before: float | None = None
    logprob_after: float | None = None

    def as_dict(self) -> dict:
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "epoch_nll": list(self.epoch_nll),
            "logprob_before": self.logprob_before,
            "logprob_after": self.logprob_after,
        }


@torch.no_grad()
def mean_completion_logprob(
    model, samples: Sequence[Sample], pad_id: int, micro_batch_sequences: int = 4
) -> float | None:
    """Mean log-prob per completion token (nats) of ``samples`` under ``model`` at temperature 1;
    None without samples."""
    if not samples:
        return None
    total, tokens = 0.0, 0
    ordered = sorted(samples, key=lambda s: s.prompt_ids)
    for _, logprobs, mask in scored_micro_batches(
        model, ordered, pad_id, 1.0, micro_batch_sequences
    ):
        total += float((logprobs * mask).sum())
        tokens += int(mask.sum())
    return total / max(1, tokens)


def _batch_step(model, optimizer, batch: list[Sample], grpo: GRPOConfig, pad_id: int) -> float:
    """One optimiser step of token-mean NLL over ``batch``; returns its loss (nats per token)."""
    batch = sorted(batch, key=lambda s: s.prompt_ids)  # neighbours share prompt prefixes
    total_tokens = sum(len(s.completion_ids) for s in batch)
    budget = None if grpo.micro_batch_memory_mib is None else grpo.micro_batch_memory_mib << 20
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for _, logprobs, mask in scored_micro_batches(
        model, batch, pad_id, 1.0, grpo.micro_batch_sequences, memory_budget_bytes=budget
    ):
        loss = nll_loss(logprobs, mask, total_tokens)
        loss.backward()
        loss_sum += loss.item()
    params = [p for p in model.parameters() if p.requires_grad]
    torch.nn.utils.clip_grad_norm_(params, grpo.max_grad_norm)
    optimizer.step()
    return loss_sum


def rft_update(
    model, samples: Sequence[Sample], config: RFTConfig, grpo: GRPOConfig, pad_id: int
) -> RFTSummary:
    """Fine-tune ``model``'s trainable parameters (the LoRA adapter) in place on ``samples``.

    ``config.epochs`` passes; each pass shuffles the samples (``config.seed``, from one canonical order,
    so the samples' arrival order does not change the update) and takes one AdamW step
    (``config.learning_rate``, ``grpo.weight_decay``, gradients clipped at ``grpo.max_grad_norm``) per
    ``config.batch_samples`` samples on the token-mean NLL of their completion tokens (:func:`nll_loss`).
    Micro-batches follow ``grpo.micro_batch_sequences`` / ``micro_batch_memory_mib``.

    Returns:
        :class:`RFTSummary`. No samples: nothing changes (an empty summary).

    Raises:
        FloatingPointError: a batch's loss is not finite.
    """
    summary = RFTSummary(samples=len(samples), tokens=sum(len(s.completion_ids) for s in samples))
    if not samples:
        return summary
    model.eval()
    summary.logprob_before = mean_completion_logprob(
        model, samples, pad_id, grpo.micro_batch_sequences
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=grpo.weight_decay)
    # one order for the same samples however they arrived (episodes finish in any order), so the
    # seeded shuffles, and with them the update, depend on the samples and the seed alone
    order = sorted(samples, key=lambda s: (s.prompt_ids, s.completion_ids))
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    model.train()
    for epoch in range(config.epochs):
        rng.shuffle(order)
        weighted = 0.0
        for start in range(0, len(order), config.batch_samples):
            batch = order[start : start + config.batch_samples]
            loss = _batch_step(model, optimizer, batch, grpo, pad_id)
            if loss != loss or loss in (float("inf"), float("-inf")):
                raise FloatingPointError(f"warm start epoch {epoch}: non-finite loss {loss}")
            weighted += loss * sum(len(s.completion_ids) for s in batch)
        summary.epoch_nll.append(weighted / summary.tokens)
    model.eval()
    summary.logprob_after = mean_completion_logprob(
        model, samples, pad_id, grpo.micro_batch_sequences
    )
    return summary
