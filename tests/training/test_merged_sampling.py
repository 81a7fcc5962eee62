"""Rollouts sampled from merged LoRA weights equal the unmerged adapter's, and the trainer's unmerged
scoring matches the merged sampler (rewardbox.training.merged_sampling; tiny Llama from a config)."""

from __future__ import annotations

import threading

import pytest
import torch

from rewardbox.policy.running import RowSpec, RunningBatch
from rewardbox.training.config import GRPOConfig
from rewardbox.training.local import sampling_weights
from rewardbox.training.logprobs import Sample, completion_logprobs
from rewardbox.training.merged_sampling import SamplingWeights
from tests.fixtures.tiny_models import tiny_llama

PAD = 0
PROMPTS = [[5, 9, 13, 2, 7], [3, 4, 6], [11, 12, 13, 14, 15, 16], [8, 1]]


def lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_llama(max_position_embeddings=256, seed=seed),
        LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
        ),
    )
    for name, param in model.named_parameters():
        if "lora_B" in name:  # a trained adapter: B != 0, so merged and base weights differ
            param.data.normal_(0, 0.3)
    return model.eval()


def decode(model, specs):
    eos = model.config.eos_token_id
    with torch.inference_mode():
        rows = RunningBatch(model, [eos], PAD, "cpu").decode_all(specs)
    return [r.tokens for r in rows], [r.logprobs for r in rows]


def specs(temperature: float) -> list[RowSpec]:
    return [RowSpec(p, 12, temperature, 100 + i) for i, p in enumerate(PROMPTS)]


def lora_layers(model):
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def test_merged_sampling_equals_the_unmerged_adapter_and_the_trainers_scoring():
    model = lora_model()
    weights = SamplingWeights(model, merge=True)
    greedy_plain, _ = decode(model, specs(0.0))
    sampled_plain, logprobs_plain = decode(model, specs(0.9))
    with model.disable_adapter(), torch.inference_mode():  # the adapter changes the tokens
        base = decode(model, specs(0.0))[0]
    assert base != greedy_plain
    weights.for_rollouts()
    assert weights.merged and all(layer.merged for layer in lora_layers(model))
    greedy_merged, _ = decode(model, specs(0.0))
    sampled_merged, logprobs_merged = decode(model, specs(0.9))
    assert greedy_merged == greedy_plain
    assert sampled_merged == sampled_plain
    for a, b in zip(logprobs_merged, logprobs_plain):
        assert a == pytest.approx(b, abs=1e-5)
    weights.for_update()
    assert not weights.merged and not any(layer.merged for layer in lora_layers(model))
    samples = [Sample(p, t, 1.0, lp) for p, t, lp in zip(PROMPTS, sampled_merged, logprobs_merged)]
    with torch.no_grad():
        scored, mask = completion_logprobs(model, samples, PAD, temperature=0.9)
    for i, s in enumerate(samples):
        got = scored[i, : len(s.completion_ids)]
        assert got.tolist() == pytest.approx(s.old_logprobs, abs=1e-4)
    assert mask.sum() == sum(len(s.completion_ids) for s in samples)


def test_merge_unmerge_cycles_move_base_weights_by_ulps_only():
    model = lora_model(1)
    layers = lora_layers(model)
    before = [layer.base_layer.weight.detach().clone() for layer in layers]
    with torch.no_grad():
        out_before = model(input_ids=torch.tensor([PROMPTS[2]])).logits
    weights, cycles = SamplingWeights(model, merge=True), 20
    for _ in range(cycles):
        weights.for_rollouts()
        weights.for_update()
    assert weights.switches == 2 * cycles
    for layer, w0 in zip(layers, before):
        delta = layer.get_delta_weight("default").detach()
        ulp = torch.finfo(torch.float32).eps * float((w0.abs() + delta.abs()).max())
        drift = float((layer.base_layer.weight - w0).abs().max())
        assert drift <= cycles * ulp, (drift, ulp)
    with torch.no_grad():
        out_after = model(input_ids=torch.tensor([PROMPTS[2]])).logits
    torch.testing.assert_close(out_after, out_before, atol=1e-5, rtol=1e-5)


class _Policy:
    def __init__(self):
        self.generation_lock = threading.RLock()
        self.changed = 0

    def weights_changed(self):
        assert self.generation_lock._is_owned()
        self.changed += 1


def test_switching_holds_the_policy_lock_and_drops_its_prefix_cache():
    model, policy = lora_model(), _Policy()
    weights = SamplingWeights(model, policy, merge=True)
    weights.for_rollouts()
    weights.for_rollouts()  # already merged: nothing to do
    weights.for_update()
    weights.for_update()
    assert policy.changed == 2 and weights.switches == 2


def test_merging_only_for_on_policy_lora_when_asked():
    model, policy = lora_model(), _Policy()
    assert sampling_weights(GRPOConfig(), policy, model, on_policy=True).merge
    assert not sampling_weights(
        GRPOConfig(sample_merged=False), policy, model, on_policy=True
    ).merge
    assert not sampling_weights(GRPOConfig(), policy, model, on_policy=False).merge
    bf16 = sampling_weights(GRPOConfig(), policy, lora_model().to(torch.bfloat16), on_policy=True)
    assert bf16.merge and bf16.restore
    assert not sampling_weights(GRPOConfig(), policy, model, on_policy=True).restore
    full = GRPOConfig(finetune="full")
    assert not sampling_weights(full, policy, model, on_policy=True).merge
    off = SamplingWeights(model, merge=False)
    off.for_rollouts()
    assert not any(layer.merged for layer in lora_layers(model))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_merge_restores_the_base_weights_bit_for_bit(dtype):
    model = lora_model(2).to(dtype)
    layers = lora_layers(model)
    before = [layer.base_layer.weight.detach().clone() for layer in layers]
    with torch.no_grad():
        out_before = model(input_ids=torch.tensor([PROMPTS[2]])).logits
    weights = SamplingWeights(model, merge=True)
    assert weights.restore
    subtracting = lora_model(2).to(dtype)
    plain = SamplingWeights(subtracting, merge=True, restore=False)
    for _ in range(10):
        weights.for_rollouts()
        assert all(layer.merged for layer in layers)
        assert any(not torch.equal(m.base_layer.weight, w0) for m, w0 in zip(layers, before))
        with torch.no_grad():  # merged: the adapter is in the weights, not added again
            merged_out = model(input_ids=torch.tensor([PROMPTS[2]])).logits
        torch.testing.assert_close(merged_out, out_before, atol=0.15, rtol=0.05)
        weights.for_update()
        assert not weights._saved  # the copy is freed once restored
        plain.for_rollouts()
        plain.for_update()
    assert not any(layer.merged for layer in layers)
    for layer, w0 in zip(layers, before):
        assert torch.equal(layer.base_layer.weight, w0)
    with torch.no_grad():
        out_after = model(input_ids=torch.tensor([PROMPTS[2]])).logits
    assert torch.equal(out_after, out_before)
    # subtracting B A instead drifts in 16 bits: the kind of error the restore removes
    drifted = [
        not torch.equal(layer.base_layer.weight, w0)
        for layer, w0 in zip(lora_layers(subtracting), before)
    ]
    assert any(drifted)


def test_low_precision_merge_keeps_the_update_reaching_the_adapter():
    model = lora_model(3).to(torch.bfloat16)
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    weights = SamplingWeights(model, merge=True)
    weights.for_rollouts()
    weights.for_update()
    out = model(input_ids=torch.tensor([PROMPTS[0]])).logits.float().sum()
    out.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_A" in n]
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads)
