"""PPO-clip policy loss: hand-computed values per aggregation, masks and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from rewardbox.training.losses import LOSS_AGGREGATIONS, policy_loss, token_mean_policy_loss

# Two sequences of three tokens. old log-probs are 0, so ratio = exp(logprobs).
RATIOS = [[1.5, 1.0, 1.0], [0.5, 1.1, 1.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
ADV = [1.0, -1.0]
# Per-token loss -min(r A, clip(r, 0.8, 1.2) A):
#   row 0 (A=+1): r=1.5 -> clipped -1.2; r=1.0 -> -1.0; third token masked.
#   row 1 (A=-1): r=0.5 -> min(-0.5, -0.8) = -0.8 -> +0.8; r=1.1 -> +1.1; r=1.0 -> +1.0.
TOKEN_LOSSES = [[-1.2, -1.0], [0.8, 1.1, 1.0]]


def _inputs():
    logprobs = torch.log(torch.tensor(RATIOS)).requires_grad_(True)
    return logprobs, torch.zeros(2, 3), torch.tensor(ADV), torch.tensor(MASK)


def test_token_mean_by_hand():
    logprobs, old, adv, mask = _inputs()
    loss, stats = token_mean_policy_loss(logprobs, old, adv, mask)
    assert loss.item() == pytest.approx(
        sum(TOKEN_LOSSES[0] + TOKEN_LOSSES[1]) / 5, abs=1e-6
    )  # 0.14
    assert stats["tokens"] == 5.0
    assert stats["clip_frac"] == pytest.approx(2 / 5)  # r=1.5 with A>0 and r=0.5 with A<0


def test_other_aggregations_by_hand():
    logprobs, old, adv, mask = _inputs()
    seq_mean, _ = policy_loss(logprobs, old, adv, mask, aggregation="seq-mean-token-mean")
    assert seq_mean.item() == pytest.approx((-2.2 / 2 + 2.9 / 3) / 2, abs=1e-6)
    seq_sum, _ = policy_loss(logprobs, old, adv, mask, aggregation="seq-mean-token-sum")
    assert seq_sum.item() == pytest.approx((-2.2 + 2.9) / 2, abs=1e-6)
    assert set(LOSS_AGGREGATIONS) == {
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    }


def test_gradients_masked_and_clipped_tokens_get_zero():
    logprobs, old, adv, mask = _inputs()
    with torch.no_grad():
        logprobs[0, 2] = -math.inf  # garbage on a padded position must not leak NaN
    loss, _ = token_mean_policy_loss(logprobs, old, adv, mask)
    loss.backward()
    grad = logprobs.grad
    assert torch.isfinite(grad).all()
    assert grad[0, 2].item() == 0.0  # masked
    assert grad[0, 0].item() == 0.0  # clipped (ratio 1.5, A > 0)
    assert grad[1, 0].item() == 0.0  # clipped (ratio 0.5, A < 0)
    # Unclipped: d(-r A)/d logprob = -r A, divided by the 5 masked tokens.
    assert grad[0, 1].item() == pytest.approx(-1.0 * 1.0 / 5, abs=1e-6)
    assert grad[1, 1].item() == pytest.approx(1.1 / 5, abs=1e-6)
    assert grad[1, 2].item() == pytest.approx(1.0 / 5, abs=1e-6)


def test_token_mean_weighs_long_sequences_more_than_seq_mean():
    # Own case: a 1-token sequence with A=+1 and a 4-token one with A=-1, ratio 1 everywhere.
    logprobs = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    token_mean, _ = policy_loss(logprobs, torch.zeros(2, 4), adv, mask, aggregation="token-mean")
    seq_mean, _ = policy_loss(
        logprobs, torch.zeros(2, 4), adv, mask, aggregation="seq-mean-token-mean"
    )
    assert token_mean.item() == pytest.approx((-1 + 4) / 5)
    assert seq_mean.item() == pytest.approx(0.0)


def test_empty_mask_gives_zero_loss_and_zero_gradient():
    logprobs = torch.randn(2, 3, requires_grad=True)
    for aggregation in LOSS_AGGREGATIONS:
        empty = torch.zeros(2, 3)
        loss, stats = policy_loss(
            logprobs, torch.zeros(2, 3), torch.ones(2), empty, aggregation=aggregation
        )
        assert loss.item() == 0.0
        loss.backward()
        assert torch.equal(logprobs.grad, torch.zeros(2, 3))
        assert stats["tokens"] == 0.0
        logprobs.grad = None


def test_per_token_advantages_and_clip_higher():
    logprobs, old, _, mask = _inputs()
    per_token_adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    loss, _ = policy_loss(logprobs, old, per_token_adv, mask)
    assert loss.item() == pytest.approx(0.14, abs=1e-6)
    # Clip-higher 0.28 (DAPO): ratio 1.5 with A>0 is clipped at 1.28 instead of 1.2.
    higher, _ = policy_loss(logprobs, old, torch.tensor(ADV), mask, clip_eps_high=0.28)
    assert higher.item() == pytest.approx((-1.28 - 1.0 + 0.8 + 1.1 + 1.0) / 5, abs=1e-6)


def test_shape_and_argument_errors():
    logprobs, old, adv, mask = _inputs()
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logprobs, old, torch.ones(3), mask)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(logprobs, old, adv, mask[:, :2])
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        policy_loss(logprobs[0], old[0], adv, mask[0])
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(logprobs, old, adv, mask, aggregation="token-sum")
    with pytest.raises(ValueError, match="clip"):
        policy_loss(logprobs, old, adv, mask, clip_eps=0.0)


# --- issue #12 item 5: Dr. GRPO's constant normaliser ------------------------------------------------------


def _issue12_losses(width: int, pad_value: float):
    # per-token losses A = [4, 2] (2 tokens), B = [1] * 6 (6 tokens); padding holds junk that must never count
    loss = torch.full((2, width), pad_value)
    loss[0, :2] = torch.tensor([4.0, 2.0])
    loss[1, :6] = 1.0
    mask = torch.zeros(2, width)
    mask[0, :2] = 1.0
    mask[1, :6] = 1.0
    return loss, mask


@pytest.mark.parametrize("pad_value", [0.0, 99.0, math.nan, math.inf])
def test_issue12_item5_constant_normaliser_given_values(pad_value):
    loss, mask = _issue12_losses(8, pad_value)
    agg = LOSS_AGGREGATIONS
    assert agg["token-mean"](loss, mask).item() == pytest.approx(1.5)
    assert agg["seq-mean-token-mean"](loss, mask).item() == pytest.approx(2.0)
    assert agg["seq-mean-token-sum"](loss, mask).item() == pytest.approx(6.0)
    assert agg["seq-mean-token-sum-norm"](
        loss, mask, max_response_tokens=8
    ).item() == pytest.approx(0.75)
    assert agg["seq-mean-token-sum-norm"](loss, mask).item() == pytest.approx(
        0.75
    )  # L_max defaults to T = 8


def test_issue12_item5_own_case_normaliser_is_the_budget_not_the_batch_width():
    # The same losses padded only to T = 6: the normaliser stays B x L_max = 2 x 8 when the budget is given,
    # so a batch of short responses is not scaled up; a budget below the longest response is refused.
    loss, mask = _issue12_losses(6, 5.0)
    norm = LOSS_AGGREGATIONS["seq-mean-token-sum-norm"]
    assert norm(loss, mask, max_response_tokens=8).item() == pytest.approx(12 / 16)
    assert norm(loss, mask).item() == pytest.approx(12 / 12)
    with pytest.raises(ValueError, match="longest response"):
        norm(loss, mask, max_response_tokens=5)
    # through policy_loss (ratio 1, advantage -1 gives loss_t = 1 per token): 8 tokens / (2 x 8)
    logprobs = torch.zeros(2, 8, requires_grad=True)
    _, mask8 = _issue12_losses(8, 0.0)
    value, _ = policy_loss(
        logprobs,
        torch.zeros(2, 8),
        torch.tensor([-1.0, -1.0]),
        mask8,
        aggregation="seq-mean-token-sum-norm",
    )
    assert value.item() == pytest.approx(8 / 16)
    value.backward()
    assert logprobs.grad[0, 5].item() == 0.0 and logprobs.grad[1, 0].item() == pytest.approx(1 / 16)


@pytest.mark.parametrize("aggregation", sorted(LOSS_AGGREGATIONS))
def test_token_weights_scale_each_tokens_loss_and_keep_the_denominators(aggregation):
    """Truncated importance weights (``token_weights``) multiply loss_t; padding stays out whatever its weight."""
    logprobs, old, adv, mask = _inputs()
    plain, _ = policy_loss(logprobs, old, adv, mask, aggregation=aggregation)
    doubled, _ = policy_loss(
        logprobs, old, adv, mask, aggregation=aggregation, token_weights=torch.full((2, 3), 2.0)
    )
    assert doubled.item() == pytest.approx(2 * plain.item(), abs=1e-6)
    weights = torch.tensor([[0.5, 1.0, 1e6], [1.0, 2.0, 1.0]])  # 1e6 on the masked position
    weighted, _ = policy_loss(
        logprobs, old, adv, mask, aggregation="token-mean", token_weights=weights
    )
    by_hand = (-1.2 * 0.5 - 1.0 + 0.8 + 1.1 * 2.0 + 1.0) / 5
    assert weighted.item() == pytest.approx(by_hand, abs=1e-6)
    with pytest.raises(ValueError, match="token_weights must be"):
        policy_loss(logprobs, old, adv, mask, token_weights=torch.ones(2, 2))
