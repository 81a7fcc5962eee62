"""The shared-prefix KV cache gives exactly the tokens a plain left-padded batch gives."""

from __future__ import annotations

import torch

from rewardbox.policy.prefix_cache import PrefixCache, common_prefix_len


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def left_pad(prompts, pad):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def test_common_prefix_len_leaves_every_row_a_token():
    assert common_prefix_len([[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 3, 4, 5]]) == 3
    assert common_prefix_len([[1, 2], [1, 2]]) == 1
    assert common_prefix_len([[5], [6]]) == 0


def test_cached_prefix_generation_equals_plain_generation():
    model = tiny_model()
    prefix = [int(x) for x in torch.randint(3, 64, (70,))]
    prompts = [prefix + [7, 8, 9], prefix + [10], prefix + [11, 12, 13, 14, 15]]
    ids, mask = left_pad(prompts, pad=0)
    with torch.inference_mode():
        plain = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    cache = PrefixCache(min_tokens=16)
    for attempt in range(2):  # a miss, then a hit on the same prefix
        inputs, width = cache.prepare(model, prompts, 0, torch.device("cpu"))
        with torch.inference_mode():
            cached = model.generate(**inputs, max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert torch.equal(plain[:, ids.shape[1]:], cached[:, width:]), attempt
    assert (cache.misses, cache.hits) == (1, 1)


def test_short_prefix_and_invalidate():
    model = tiny_model()
    cache = PrefixCache(min_tokens=16)
    assert cache.prepare(model, [[1, 2, 3], [1, 2, 4]], 0, torch.device("cpu")) is None
    prompts = [[5] * 20 + [1], [5] * 20 + [2]]
    cache.prepare(model, prompts, 0, torch.device("cpu"))
    cache.invalidate()
    cache.prepare(model, prompts, 0, torch.device("cpu"))
    assert cache.misses == 2
