"""The bf16 CPU attention: unpadded decode steps get an all-True mask; every other call is exactly SDPA's."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from rewardbox.policy import attention
from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint
from tests.fixtures.tiny_models import tiny_llama


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-attn")
    tiny_llama(seed=3).save_pretrained(path)
    return path


def _run(model, ids, mask, steps=4):
    """Prefill logits, then ``steps`` greedy decode steps' logits, with a left-padded batch."""
    cache = DynamicCache()
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        prefill, decode = out.logits, []
        for _ in range(steps):
            token = out.logits[:, -1:].argmax(-1)
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            out = model(input_ids=token, attention_mask=mask, past_key_values=cache, use_cache=True)
            decode.append(out.logits[:, -1])
    return prefill, torch.stack(decode, 1)


def _load(path, dtype, implementation):
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=implementation
    ).eval()


def test_bf16_unpadded_decode_steps_get_an_all_true_mask_and_padded_calls_are_sdpas(checkpoint):
    torch.manual_seed(0)
    ids = torch.randint(1, 64, (3, 12))
    ours_model = _load(checkpoint, torch.bfloat16, attention.register())
    sdpa_model = _load(checkpoint, torch.bfloat16, "sdpa")
    padded = torch.ones_like(ids)
    padded[0, :5] = 0
    padded[1, :2] = 0
    ours, sdpa = _run(ours_model, ids, padded), _run(sdpa_model, ids, padded)
    assert torch.equal(ours[0], sdpa[0]) and torch.equal(ours[1], sdpa[1])  # masked: SDPA's own

    calls = []
    real = attention.sdpa_attention_forward

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append(
            (query.shape[2], None if attention_mask is None else bool(attention_mask.all()))
        )
        return real(module, query, key, value, attention_mask, **kwargs)

    unpadded = torch.ones_like(ids)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "sdpa_attention_forward", spy)
        ours = _run(ours_model, ids, unpadded)
    decode_masks = {mask for q_len, mask in calls if q_len == 1}
    assert decode_masks == {True}  # every decode call got the all-True mask, none ran unmasked
    sdpa = _run(sdpa_model, ids, unpadded)
    assert torch.equal(ours[0], sdpa[0])  # prefill unchanged
    # the same attention through the masked kernel: equal up to bf16 rounding, same greedy tokens
    torch.testing.assert_close(ours[1], sdpa[1], rtol=0, atol=5e-2)
    assert torch.equal(ours[1].argmax(-1), sdpa[1].argmax(-1))


def test_fp32_calls_stay_on_sdpa_and_only_bf16_or_fp16_on_a_cpu_gets_the_decode_attention(
    checkpoint,
):
    torch.manual_seed(1)
    ids = torch.randint(1, 64, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    ours = _run(_load(checkpoint, torch.float32, attention.register()), ids, mask)
    sdpa = _run(_load(checkpoint, torch.float32, "sdpa"), ids, mask)
    assert torch.equal(ours[0], sdpa[0]) and torch.equal(ours[1], sdpa[1])
    assert attention.implementation_for(torch.device("cpu"), torch.float32) is None
    assert attention.implementation_for(torch.device("cpu"), torch.bfloat16) == attention.NAME
    assert attention.implementation_for(torch.device("cuda"), torch.bfloat16) is None


def test_local_policy_loads_bf16_with_the_decode_attention_and_fp32_with_sdpa(tmp_path):
    from rewardbox.policy.local import LocalPolicy

    path = write_tiny_checkpoint(tmp_path / "ckpt")
    for dtype, expected in (("bfloat16", attention.NAME), ("float32", "sdpa")):
        policy = LocalPolicy(path, dtype=dtype, num_threads=1)
        try:
            assert policy.model.config._attn_implementation == expected
        finally:
            asyncio.run(policy.aclose())
