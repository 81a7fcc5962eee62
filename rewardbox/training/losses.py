"""PPO-clip policy loss with named token aggregations (GRPO's surrogate objective).

Shapes: ``logprobs``, ``old_logprobs``, ``mask`` are ``[B, T]`` (B sequences
of T response tokens, ``mask`` 1 for a response token that carries loss and 0
for padding, prompt, tool output or a system-error rollout); ``advantages`` is
``[B]`` (one advantage per rollout, broadcast over its tokens) or ``[B, T]``.

Per token (Schulman et al. 2017, PPO, arXiv 1707.06347):
``ratio = exp(logprobs - old_logprobs)``,
``loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)``.
``eps_high`` defaults to ``eps_low`` (symmetric clip 0.2); DAPO's "clip-higher"
(arXiv 2503.14476) raises it. No KL term (docs/method.md, "GRPO": no KL).

Aggregations (``LOSS_AGGREGATIONS``; names follow verl's ``loss_agg_mode``):

* ``"token-mean"``: sum of ``loss_t`` over every masked token in the batch /
  number of masked tokens in the batch (DAPO, arXiv 2503.14476). Long
  responses weigh in proportion to their length. The reference run uses it.
* ``"seq-mean-token-mean"``: mean over the tokens of each sequence, then mean
  over sequences that have at least one masked token (the original GRPO
  objective, arXiv 2402.03300).
* ``"seq-mean-token-sum"``: sum over each sequence's tokens, mean over the
  sequences (verl's mode of that name). Not Dr. GRPO: the sum grows with length.
* ``"seq-mean-token-sum-norm"``: the constant normaliser of Dr. GRPO
  (Liu et al. 2025, arXiv 2503.20783, section 3.2; verl's mode of that name):
  the masked token-loss sum / (B x L_max), where ``L_max`` is a constant, the
  generation budget in tokens (``max_response_tokens``; default the padded width
  T, as verl does, which is constant only when batches are padded to the budget).
  Example: token losses [4, 2] and [1] * 6, L_max = 8: 12 / 16 = 0.75 (token-mean
  1.5, seq-mean-token-mean 2.0, seq-mean-token-sum 6.0).

What a sequence is: the local trainer (``rewardbox.training.trainer``) makes one
sample per agent turn (its prompt, its completion), so the sequence-mean modes
average over agent turns, not rollouts: a rollout of five turns weighs five
times one of one turn, and Dr. GRPO's ``L_max`` is one turn's budget
(``episode.max_new_tokens``). verl and TRL treat one rollout as one response;
``"token-mean"`` (the default) is the same in both views.

Padding never counts: every aggregation multiplies by ``mask`` and takes its
denominators from ``mask`` or constants, never from padded values.

Degenerate case: a batch with no masked token gives loss 0 (still attached to
the graph so ``backward()`` works) and zero gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LossAggregation = Callable[..., torch.Tensor]


def _masked(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``loss`` with masked-out positions exactly 0 (``where``, so NaN/inf padding cannot leak)."""
    return torch.where(mask > 0, loss, torch.zeros_like(loss))


def token_mean(loss: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """Sum of masked ``loss [B, T]`` over all masked tokens / their count (0 if none)."""
    return _masked(loss, mask).sum() / mask.sum().clamp_min(1.0)


def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """Per-sequence masked token mean, then mean over sequences with >= 1 masked token."""
    tokens = mask.sum(dim=-1)
    per_seq = _masked(loss, mask).sum(dim=-1) / tokens.clamp_min(1.0)
    has_tokens = (tokens > 0).to(loss.dtype)
    return (per_seq * has_tokens).sum() / has_tokens.sum().clamp_min(1.0)


def seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """Per-sequence masked token sum, then mean over all B sequences."""
    return _masked(loss, mask).sum(dim=-1).mean()


def seq_mean_token_sum_norm(
    loss: torch.Tensor, mask: torch.Tensor, *, max_response_tokens: int | None = None, **_: object
) -> torch.Tensor:
    """Dr. GRPO's constant normaliser: masked token-loss sum / (B x L_max).

    Args:
        loss: ``[B, T]`` per-token losses. mask: ``[B, T]`` 1 for tokens that count.
        max_response_tokens: L_max, the generation budget in tokens (a constant);
            None uses T, the padded width (verl's default).

    Raises:
        ValueError: ``max_response_tokens`` < 1 or smaller than a sequence's masked
            token count (the normaliser would not bound the sequence).
    """
    width = loss.shape[-1] if max_response_tokens is None else int(max_response_tokens)
    longest = int(mask.sum(dim=-1).max().item()) if mask.numel() else 0
    if width < 1 or width < longest:
        raise ValueError(
            f"max_response_tokens must be >= 1 and >= the longest response ({longest} tokens), "
            f"got {width}; pass the generation budget (max_new_tokens)"
        )
    return _masked(loss, mask).sum() / (loss.shape[0] * width)


LOSS_AGGREGATIONS: dict[str, LossAggregation] = {
    "token-mean": token_mean,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum": seq_mean_token_sum,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}
"""Aggregation name -> ``(loss [B, T], mask [B, T], *, max_response_tokens=None) -> scalar``."""


def _check_shapes(logprobs, old_logprobs, advantages, mask) -> torch.Tensor:
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    for name, tensor in (("old_logprobs", old_logprobs), ("mask", mask)):
        if tensor.shape != logprobs.shape:
            raise ValueError(
                f"{name} shape {tuple(tensor.shape)} != logprobs shape {tuple(logprobs.shape)}"
            )
    if advantages.dim() == 1 and advantages.shape[0] == logprobs.shape[0]:
        return advantages.unsqueeze(-1)
    if advantages.shape == logprobs.shape:
        return advantages
    raise ValueError(
        f"advantages must be [B] = [{logprobs.shape[0]}] or [B, T], got shape {tuple(advantages.shape)}"
    )


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    aggregation: str = "token-mean",
    clip_eps_high: float | None = None,
    max_response_tokens: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate loss, aggregated by name (see module docstring).

    Args:
        logprobs: ``[B, T]`` log-probabilities of the sampled tokens under the
            current policy (requires grad).
        old_logprobs: ``[B, T]`` log-probabilities under the policy that sampled
            them (no grad; detached here).
        advantages: ``[B]`` or ``[B, T]``; detached here.
        mask: ``[B, T]`` 1/0 (bool or float): which tokens carry loss.
        clip_eps: lower clip range, ``ratio >= 1 - clip_eps``; in (0, 1).
        aggregation: a key of ``LOSS_AGGREGATIONS``.
        clip_eps_high: upper clip range (``ratio <= 1 + clip_eps_high``); None = ``clip_eps``.
        max_response_tokens: L_max of ``"seq-mean-token-sum-norm"`` (the generation budget per
            sequence, a constant); None uses the padded width T. Ignored by the other modes.
        token_weights: ``[B, T]`` per-token factors on ``loss_t`` (no grad; detached here),
            e.g. the truncated importance weights of a sampler that computes differently
            from the trainer (``GRPOConfig.sampler_is_cap``); None: 1. Denominators stay
            those of ``mask``.

    Returns:
        ``(loss, stats)``: a scalar tensor to minimise, and floats over masked
        tokens: ``clip_frac`` (share where the clipped branch is active),
        ``ratio_mean``, ``approx_kl`` (mean of ``old - new`` log-prob, the k1
        estimator), ``tokens`` (masked token count).

    Raises:
        ValueError: shape mismatch, bad clip ranges or unknown aggregation.
    """
    high = _clip_range(clip_eps, clip_eps_high, aggregation)
    adv = _check_shapes(logprobs, old_logprobs, advantages, mask).detach().float()
    mask_f = mask.to(torch.float32)
    log_ratio = logprobs.float() - old_logprobs.detach().float()
    # Zero the log-ratio on masked-out tokens (where, not multiply): padding may hold
    # -inf or garbage log-probs, and must neither overflow exp() nor leak NaN.
    log_ratio = torch.where(mask_f > 0, log_ratio, torch.zeros_like(log_ratio))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    per_token = _weighted(-torch.minimum(unclipped, clipped), token_weights)
    loss = LOSS_AGGREGATIONS[aggregation](
        per_token, mask_f, max_response_tokens=max_response_tokens
    )
    return loss, _clip_stats(ratio, log_ratio, clipped, unclipped, mask_f)


def _clip_range(clip_eps: float, clip_eps_high: float | None, aggregation: str) -> float:
    """The upper clip range (``clip_eps_high`` or ``clip_eps``); ValueError on bad ranges or names."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if not (0.0 < clip_eps < 1.0 and high > 0.0):
        raise ValueError(f"need 0 < clip_eps < 1 and clip_eps_high > 0, got {clip_eps}, {high}")
    if aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"unknown loss aggregation {aggregation!r}; choose from {sorted(LOSS_AGGREGATIONS)}"
        )
    return high


def _weighted(per_token: torch.Tensor, token_weights: torch.Tensor | None) -> torch.Tensor:
    """``per_token`` times the detached ``token_weights`` (same shape; ValueError otherwise)."""
    if token_weights is None:
        return per_token
    if token_weights.shape != per_token.shape:
        raise ValueError(
            f"token_weights must be {tuple(per_token.shape)}, got {tuple(token_weights.shape)}"
        )
    return per_token * token_weights.detach().float()


@torch.no_grad()
def _clip_stats(
    ratio: torch.Tensor,
    log_ratio: torch.Tensor,
    clipped: torch.Tensor,
    unclipped: torch.Tensor,
    mask_f: torch.Tensor,
) -> dict[str, float]:
    """The stats of :func:`policy_loss` over masked tokens: clip_frac, ratio_mean, approx_kl, tokens."""
    tokens = mask_f.sum()
    denom = tokens.clamp_min(1.0)
    return {
        "clip_frac": float(((clipped < unclipped).float() * mask_f).sum() / denom),
        "ratio_mean": float((ratio * mask_f).sum() / denom),
        "approx_kl": float((-log_ratio * mask_f).sum() / denom),
        "tokens": float(tokens),
    }


def token_mean_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss with "token-mean" aggregation (DAPO, arXiv 2503.14476).

    ``loss = sum over masked tokens of -min(r A, clip(r, 1 - eps, 1 + eps) A) /
    number of masked tokens in the batch``. Shapes and stats as :func:`policy_loss`.
    Masked tokens (``mask = 0``) get exactly zero gradient.
    """
    return policy_loss(
        logprobs, old_logprobs, advantages, mask, clip_eps=clip_eps, aggregation="token-mean"
    )
