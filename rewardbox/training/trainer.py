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
rollout's advantage), and minimise the token-mean clipped surrogate over the
policy's own tokens only: tool results and user messages are inside the prompt
ids and never scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import AttemptFn, Group, collect_groups
from rewardbox.training.losses import policy_loss
from rewardbox.tasks.schema import Task


@dataclass
class Sample:
    """One policy completion to score: ids are exact, ``advantage`` is its rollout's."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float


@dataclass
class StepMetrics:
    """Per-step training metrics (logged and shown in the asset metadata)."""

    step: int
    mean_reward: float | None
    zero_variance_frac: float
    system_error_groups: int
    groups: int
    episodes: int
    samples: int
    policy_tokens: int
    loss: float | None
    seconds: float
    scored_rollouts: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrainingSummary:
    steps: list[StepMetrics] = field(default_factory=list)


TokenizeTurn = Callable[[EpisodeResult, int], tuple[list[int], list[int]]]


def group_samples(groups: Sequence[Group], tokenize: TokenizeTurn | None = None) -> list[Sample]:
    """Every agent completion of every rollout, paired with its rollout's advantage.

    Completions from local policies carry exact token ids. Completions without
    ids (scripted or endpoint rollouts) are rendered by ``tokenize(rollout,
    turn_index)`` when given (off-policy use, e.g. CI with scripted rollouts),
    else skipped. Rollouts with advantage 0 give no gradient and are skipped.
    """
    samples = []
    for group in groups:
        for rollout, advantage in zip(group.rollouts, group.advantages):
            if advantage == 0.0:
                continue  # contributes no gradient under the surrogate
            for index, turn in enumerate(rollout.agent_turns):
                ids = (turn.prompt_token_ids, turn.completion_token_ids)
                if (ids[0] is None or ids[1] is None) and tokenize is not None:
                    ids = tokenize(rollout, index)
                if ids[0] is None or ids[1] is None:
                    continue
                if ids[1]:
                    samples.append(Sample(list(ids[0]), list(ids[1]), float(advantage)))
    return samples


def completion_logprobs(model: torch.nn.Module, batch: Sequence[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token given its prompt.

    Returns:
        (logprobs ``[B, T]`` float32, mask ``[B, T]`` float32) where ``T`` is the
        longest completion; mask is 1 on completion tokens, 0 on padding.
    """
    seqs = [s.prompt_ids + s.completion_ids for s in batch]
    width = max(len(x) for x in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, seq in enumerate(seqs):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
    logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
    t_max = max(len(s.completion_ids) for s in batch)
    out = torch.zeros((len(batch), t_max))
    mask = torch.zeros((len(batch), t_max))
    for i, s in enumerate(batch):
        start, n = len(s.prompt_ids), len(s.completion_ids)
        step_logits = logits[i, start - 1 : start - 1 + n]
        targets = torch.tensor(s.completion_ids)
        out[i, :n] = torch.log_softmax(step_logits, dim=-1).gather(1, targets[:, None]).squeeze(1)
        mask[i, :n] = 1.0
    return out, mask


def optimise_step(model, optimizer, samples: Sequence[Sample], config: GRPOConfig, pad_id: int) -> float:
    """One optimiser step over all samples; token-mean over the step's policy tokens.

    Each micro-batch's loss is weighted by its share of the step's policy
    tokens (token-mean, DAPO) or sequences (sequence means), so the result equals
    the chosen aggregation over the whole step.
    With a single update per batch the old policy equals the current one
    (ratio 1), as in on-policy GRPO; the clip stays for multi-epoch use.
    """
    total_tokens = sum(len(s.completion_ids) for s in samples)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for start in range(0, len(samples), config.micro_batch_sequences):
        batch = samples[start : start + config.micro_batch_sequences]
        logprobs, mask = completion_logprobs(model, batch, pad_id)
        advantages = torch.tensor([s.advantage for s in batch], dtype=torch.float32)
        loss, _ = policy_loss(logprobs, logprobs.detach(), advantages, mask, clip_eps=config.clip_eps,
                              aggregation=config.loss_aggregation)
        # token-mean: weight by the micro-batch's share of tokens; sequence means: of sequences
        weight = (mask.sum().item() / total_tokens if config.loss_aggregation == "token-mean"
                  else len(batch) / len(samples))
        (loss * weight).backward()
        total += loss.item() * weight
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.max_grad_norm)
    optimizer.step()
    model.eval()
    return total


async def train_grpo(
    model,
    pad_id: int,
    tasks: Iterator[Task],
    attempt_fn: AttemptFn,
    config: GRPOConfig,
    *,
    on_step: Callable[[StepMetrics], None] | None = None,
    tokenize: TokenizeTurn | None = None,
) -> TrainingSummary:
    """Run ``config.steps`` GRPO steps on ``model`` in place.

    Args:
        model: a torch causal LM whose trainable parameters are updated (LoRA-wrapped).
        pad_id: padding token id.
        tasks: endless task stream (``groups.task_stream``).
        attempt_fn: runs one rollout with the CURRENT ``model`` (same object).
        config: GRPO settings.
        on_step: called with each step's metrics.
        tokenize: renders completions that carry no token ids (see ``group_samples``).

    Returns:
        The per-step metrics. A step whose groups all lacked variance records
        ``loss=None`` and makes no update.
    """
    torch.manual_seed(config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    summary = TrainingSummary()
    for step in range(config.steps):
        t0 = time.perf_counter()
        groups, stats = await collect_groups(
            tasks, attempt_fn, group_size=config.group_size, groups_wanted=config.tasks_per_step,
            max_refill_rounds=config.max_refill_rounds, estimator=config.advantage_estimator,
            trial_offset=step * config.group_size,
        )
        samples = group_samples(groups, tokenize)
        loss = optimise_step(model, optimizer, samples, config, pad_id) if samples else None
        metrics = StepMetrics(
            step=step, mean_reward=stats.mean_reward,
            zero_variance_frac=stats.zero_variance_frac, system_error_groups=stats.system_error,
            groups=len(groups), episodes=stats.episodes, samples=len(samples),
            policy_tokens=sum(len(s.completion_ids) for s in samples), loss=loss,
            seconds=time.perf_counter() - t0, scored_rollouts=stats.scored_rollouts,
        )
        summary.steps.append(metrics)
        if on_step is not None:
            on_step(metrics)
    return summary
