"""Packed bf16 linear weights: used only inside ``active`` under inference mode, dropped when the weights
change, never stale, and (on a CPU with bf16 units) giving F.linear's logits."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
import torch.nn.functional as F

from rewardbox.policy import packed_linear
from rewardbox.policy.packed_linear import PackedLinears
from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint
from tests.fixtures.tiny_models import tiny_llama

BF16_PACKING = packed_linear.available(torch.bfloat16, "cpu")
needs_packing = pytest.mark.skipif(not BF16_PACKING, reason="no oneDNN bf16 packing on this CPU")


@pytest.fixture
def counting_ops(monkeypatch):
    """Packing ops replaced by exact stand-ins that count their calls (runs on any CPU)."""
    calls = {"pack": 0, "linear": 0}

    def pack(weight):
        calls["pack"] += 1
        return weight.clone()

    def linear(x, packed, bias):
        calls["linear"] += 1
        return F.linear(x, packed, bias)

    monkeypatch.setattr(packed_linear, "pack_weight", pack)
    monkeypatch.setattr(packed_linear, "packed_linear", linear)
    return calls


def _model(dtype=torch.bfloat16):
    return tiny_llama(seed=5).to(dtype).eval()


def test_packed_weights_are_used_only_inside_active_under_inference_mode(counting_ops):
    model = _model()
    packed = PackedLinears(model)
    ids = torch.randint(1, 64, (2, 6))
    with torch.inference_mode():
        model(input_ids=ids)
    assert counting_ops == {"pack": 0, "linear": 0} and not packed.packed  # outside: F.linear

    with torch.inference_mode(), packed.active(version=1):
        model(input_ids=ids)
    layers = len(packed.layers)
    assert layers > 0 and counting_ops == {"pack": layers, "linear": layers}

    with packed.active(version=1):  # grad mode (the trainer's scoring/update): F.linear
        model.train()
        loss = model(input_ids=ids).logits.float().sum()
        loss.backward()
    assert counting_ops["linear"] == layers
    assert any(p.grad is not None for p in model.parameters())


def test_a_new_weights_version_repacks_and_a_drop_frees_the_copies(counting_ops):
    model = _model()
    packed = PackedLinears(model)
    ids = torch.randint(1, 64, (1, 5))
    layers = len(packed.layers)
    with torch.inference_mode():
        with packed.active(version=1):
            model(input_ids=ids)
        with packed.active(version=1):  # same weights: no repack
            model(input_ids=ids)
        assert counting_ops["pack"] == layers
        with packed.active(version=2):
            model(input_ids=ids)
        assert counting_ops["pack"] == 2 * layers
        packed.drop()
        assert not packed.packed
        with packed.active(version=3):  # entering packs nothing until the model runs
            pass
        assert not packed.packed and counting_ops["pack"] == 2 * layers


def test_weights_changed_in_place_are_never_served_stale(counting_ops):
    """The GRPO merge writes the weights in place and calls ``weights_changed``: the next decode must
    see the new weights, not the packed old ones (the stand-in ops keep a clone, so a stale copy
    gives the old logits)."""
    model = _model()
    packed = PackedLinears(model)
    ids = torch.randint(1, 64, (1, 5))
    with torch.inference_mode():
        with packed.active(version=1):
            before = model(input_ids=ids).logits
        assert counting_ops["linear"] == len(packed.layers)  # the packed path ran
        for layer in packed.layers:
            layer.weight.data.mul_(1.5)  # in place, like peft's merge
        with packed.active(version=1):  # nobody said the weights changed: the old copies serve
            stale = model(input_ids=ids).logits
        with packed.active(version=2):  # the policy's version moved (weights_changed)
            after = model(input_ids=ids).logits
        plain = model(input_ids=ids).logits
    assert torch.equal(stale, before)  # what the version guards against
    assert not torch.equal(before, after)
    assert torch.equal(after, plain)
    assert counting_ops["linear"] == 3 * len(packed.layers)


def test_a_replaced_weight_or_a_copied_layer_falls_back_to_f_linear(counting_ops):
    model = _model()
    packed = PackedLinears(model)
    layer = packed.layers[0]
    x = torch.randn(2, layer.in_features).to(torch.bfloat16)
    with torch.inference_mode(), packed.active(version=1):
        layer(x)
        assert counting_ops["linear"] == 1  # packed
        packs = counting_ops["pack"]
        layer.weight = torch.nn.Parameter(layer.weight.detach() * 2)  # new storage
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
        twin = copy.deepcopy(packed.layers[1])
        packed.drop()
        assert torch.equal(twin(x), F.linear(x, twin.weight, twin.bias))
    assert counting_ops["linear"] == 1  # neither call used a packed weight
    assert counting_ops["pack"] == packs  # and the copy did not pack the originals


def test_sampling_weights_drop_the_packed_copies_before_every_update_merged_or_not(
    counting_ops, monkeypatch, tmp_path
):
    """bf16 LoRA rollouts through ``LocalPolicy`` from merged weights give the tokens of unpacked
    weights before and after an update; the update never holds the copies, merged or not."""
    from peft import LoraConfig, get_peft_model

    from rewardbox.policy.base import ChatRequest
    from rewardbox.policy.local import LocalPolicy
    from rewardbox.training.merged_sampling import SamplingWeights

    monkeypatch.setattr(packed_linear, "available", lambda dtype, device: True)
    path = write_tiny_checkpoint(tmp_path / "ckpt")
    request = ChatRequest(
        messages=[{"role": "user", "content": "pack"}], tools=[], max_new_tokens=6, temperature=0.0
    )
    runs = {}
    for pack in (True, False):
        policy = LocalPolicy(path, dtype="bfloat16", num_threads=1, pack_weights=pack)
        try:
            torch.manual_seed(0)
            lora = get_peft_model(policy.model, LoraConfig(r=4, target_modules="all-linear"))
            for name, weight in lora.named_parameters():
                if "lora_B" in name:
                    weight.data.normal_(0, 0.5)  # a non-zero adapter: merging changes the weights
            weights = SamplingWeights(lora, policy, merge=pack)  # packed: merged; plain: unmerged
            tokens = []
            for _ in range(2):
                weights.for_rollouts()
                done = policy.generate_batch([request], [[5, 6, 7, 8]])[0]
                tokens.append(done.completion_token_ids)
                assert (policy.packed_linears is not None and policy.packed_linears.packed) == pack
                weights.for_update()
                assert policy.packed_linears is None or not policy.packed_linears.packed
                for name, weight in lora.named_parameters():
                    if "lora_B" in name:
                        weight.data.mul_(-1.0)  # the "update" moves the adapter
            runs[pack] = tokens
        finally:
            asyncio.run(policy.aclose())
    assert runs[True] == runs[False]
    assert counting_ops["linear"] > 0


def test_sampling_weights_without_a_merge_still_free_the_copies_before_the_update():
    from rewardbox.training.merged_sampling import SamplingWeights

    class Policy:
        released = 0

        def release_decode_memory(self):
            self.released += 1

    policy = Policy()
    SamplingWeights(torch.nn.Linear(2, 2), policy, merge=False).for_update()
    assert policy.released == 1


def test_only_bf16_on_a_cpu_is_packed(monkeypatch):
    assert not packed_linear.available(torch.float32, "cpu")
    assert not packed_linear.available(torch.float16, "cpu")
    assert not packed_linear.available(torch.bfloat16, "meta")
    monkeypatch.setattr(packed_linear, "has_bf16_units", lambda device: False)
    assert not packed_linear.available(torch.bfloat16, "cpu")


@needs_packing
def test_packed_bf16_decode_gives_f_linears_logits_and_tokens():
    """The real oneDNN ops: a left-padded prefill and greedy decode steps, packed and plain."""
    from transformers import DynamicCache

    model = _model()
    packed = PackedLinears(model)
    ids = torch.randint(1, 64, (3, 10))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0

    def run(use_packed):
        cache, m = DynamicCache(), mask.clone()
        scope = packed.active(version=use_packed) if use_packed else torch.inference_mode()
        with torch.inference_mode(), scope:
            out = model(input_ids=ids, attention_mask=m, past_key_values=cache, use_cache=True)
            logits = [out.logits[:, -1]]
            for _ in range(5):
                token = out.logits[:, -1:].argmax(-1)
                m = torch.cat([m, torch.ones_like(token)], dim=1)
                out = model(
                    input_ids=token, attention_mask=m, past_key_values=cache, use_cache=True
                )
                logits.append(out.logits[:, -1])
        return torch.stack(logits, 1)

    plain, ours = run(False), run(True)
    assert packed.packed
    torch.testing.assert_close(ours, plain, rtol=0, atol=2e-2)
    assert torch.equal(ours.argmax(-1), plain.argmax(-1))


@needs_packing
def test_local_policy_packs_bf16_weights_and_drops_them_when_the_weights_change(tmp_path):
    from rewardbox.policy.base import ChatRequest
    from rewardbox.policy.local import LocalPolicy

    path = write_tiny_checkpoint(tmp_path / "ckpt")
    fp32 = LocalPolicy(path, dtype="float32", num_threads=1)
    policy = LocalPolicy(path, dtype="bfloat16", num_threads=1, seed=0)
    try:
        assert fp32.packed_linears is None
        request = ChatRequest(
            messages=[{"role": "user", "content": "hello"}],
            tools=[],
            max_new_tokens=4,
            temperature=0.0,
        )

        async def ask():
            return await policy.complete(request)

        first = asyncio.run(ask())
        assert policy.packed_linears.packed
        policy.weights_changed()
        assert not policy.packed_linears.packed  # the update never holds the copies
        again = asyncio.run(ask())
        assert again.completion_token_ids == first.completion_token_ids
        assert policy.packed_linears.packed
    finally:
        asyncio.run(fp32.aclose())
        asyncio.run(policy.aclose())
