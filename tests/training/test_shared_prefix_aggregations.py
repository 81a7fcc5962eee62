"""Shared-prefix micro-batches give the same step gradient as one full-batch loss, for every loss aggregation.

The reference scores all of the step's samples as one batch with no prefix
shared and aggregates once over the step (the definition in
``rewardbox.training.losses``); ``trainer.optimise_step`` must get the same
gradient whatever the micro-batch size, memory budget or block cut: groups split
across micro-batches, different prompt lengths, a group of one (what is left of a
group after ``mask_truncated`` dropped its other rollouts).
"""

from __future__ import annotations

import pytest
import torch

from rewardbox.training import trainer
from rewardbox.training.config import GRPOConfig
from rewardbox.training.logprobs import Sample, completion_logprobs
from rewardbox.training.losses import policy_loss
from tests.training.test_shared_prefix import lora_model


class _NoStep(torch.optim.SGD):
    """Keeps the gradient optimise_step computed (step does nothing)."""

    def step(self, closure=None):
        return None


def mixed_samples() -> list[Sample]:
    """A group of 5 (splits across micro-batches of 2 and 3), a group of 2 with a longer prompt, a group
    of one, and a second-turn sample; completions of 1..12 tokens; old log-probs unknown."""
    g = torch.Generator().manual_seed(11)
    system = torch.randint(3, 97, (40,), generator=g).tolist()
    samples = []
    for size, own, adv in ((5, 10, 1.0), (2, 35, -0.8), (1, 4, 0.6)):
        prompt = system + torch.randint(3, 97, (own,), generator=g).tolist()
        for row in range(size):
            length = 1 + (row * 5 + own) % 12
            samples.append(
                Sample(
                    prompt,
                    torch.randint(3, 97, (length,), generator=g).tolist(),
                    advantage=adv * (-1) ** row * (1 + row / 4),
                )
            )
    samples.append(
        Sample(
            samples[0].prompt_ids + samples[0].completion_ids + [5, 6], [7, 8, 9], advantage=-0.3
        )
    )
    return samples


def reference_grads(model, samples, config):
    model.zero_grad(set_to_none=True)
    model.train()
    logprobs, mask = completion_logprobs(
        model, samples, 0, config.temperature, min_shared_prefix_tokens=10**9
    )
    advantages = torch.tensor([s.advantage for s in samples])
    loss, _ = policy_loss(
        logprobs,
        logprobs.detach(),
        advantages,
        mask,
        clip_eps=config.clip_eps,
        aggregation=config.loss_aggregation,
        max_response_tokens=config.max_response_tokens,
    )
    loss.backward()
    return loss.item(), {
        n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None
    }


AGGREGATIONS = [
    ("token-mean", None),
    ("seq-mean-token-mean", None),
    ("seq-mean-token-sum", None),
    ("seq-mean-token-sum-norm", 16),
    ("seq-mean-token-sum-norm", None),
]


@pytest.mark.parametrize("micro,memory_mib", [(1, None), (2, None), (3, None), (8, None), (8, 1)])
@pytest.mark.parametrize("aggregation,l_max", AGGREGATIONS)
def test_optimise_step_gradient_equals_the_whole_step_loss(aggregation, l_max, micro, memory_mib):
    samples = mixed_samples()
    config = GRPOConfig(
        micro_batch_sequences=micro,
        temperature=0.7,
        loss_aggregation=aggregation,
        max_response_tokens=l_max,
        max_grad_norm=1e9,
        micro_batch_memory_mib=memory_mib,
    )
    model = lora_model()
    loss, expected = reference_grads(model, samples, config)
    model.zero_grad(set_to_none=True)
    fresh = [Sample(s.prompt_ids, s.completion_ids, s.advantage) for s in samples]
    stats = trainer.optimise_step(
        model, _NoStep(model.parameters(), lr=0.0), fresh, config, pad_id=0
    )
    got = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    assert stats.loss == pytest.approx(loss, rel=1e-4, abs=1e-6)
    assert expected.keys() == got.keys() and any("lora_A" in n for n in got)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_clipped_ratios_give_the_same_gradient_through_the_shared_prefix(aggregation):
    """Sampler log-probs away from the trainer's (ratios outside 1 +/- clip_eps): still the whole-step loss."""
    samples = mixed_samples()
    config = GRPOConfig(
        micro_batch_sequences=2, temperature=0.7, loss_aggregation=aggregation, max_grad_norm=1e9
    )
    model = lora_model()
    with torch.no_grad():
        current, mask = completion_logprobs(
            model, samples, 0, config.temperature, min_shared_prefix_tokens=10**9
        )
    old = current + 0.4 * torch.randn(current.shape, generator=torch.Generator().manual_seed(2))
    with_old = [
        Sample(
            s.prompt_ids,
            s.completion_ids,
            s.advantage,
            old_logprobs=old[i, : len(s.completion_ids)].tolist(),
        )
        for i, s in enumerate(samples)
    ]
    model.zero_grad(set_to_none=True)
    model.train()
    logprobs, mask = completion_logprobs(
        model, samples, 0, config.temperature, min_shared_prefix_tokens=10**9
    )
    loss, stats = policy_loss(
        logprobs,
        old * mask,
        torch.tensor([s.advantage for s in samples]),
        mask,
        clip_eps=config.clip_eps,
        aggregation=aggregation,
    )
    loss.backward()
    expected = {
        n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None
    }
    assert stats["clip_frac"] > 0.1
    model.zero_grad(set_to_none=True)
    got_stats = trainer.optimise_step(
        model, _NoStep(model.parameters(), lr=0.0), with_old, config, pad_id=0
    )
    assert got_stats.loss == pytest.approx(loss.item(), rel=1e-4, abs=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(
            model.get_parameter(name).grad, grad, atol=1e-5, rtol=1e-4, msg=name
        )
