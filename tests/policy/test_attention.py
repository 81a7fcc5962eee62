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
    # masked: SDPA's own kernel (the prefill's query heads grouped per key/value head), so equal up
    # to the order of bf16 sums, and the same greedy tokens
    for mine, theirs in zip(ours, sdpa):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=2e-2)
        assert torch.equal(mine.argmax(-1), theirs.argmax(-1))

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
    assert torch.equal(ours[0], sdpa[0])  # an unmasked (causal) prefill: SDPA's own call
    # the same attention through the masked kernel: equal up to bf16 rounding, same greedy tokens
    torch.testing.assert_close(ours[1], sdpa[1], rtol=0, atol=5e-2)
    assert torch.equal(ours[1].argmax(-1), sdpa[1].argmax(-1))


def test_fp32_calls_are_sdpas_and_every_cpu_model_gets_the_attention(checkpoint):
    torch.manual_seed(1)
    ids = torch.randint(1, 64, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    ours = _run(_load(checkpoint, torch.float32, attention.register()), ids, mask)
    sdpa = _run(_load(checkpoint, torch.float32, "sdpa"), ids, mask)
    # the padded prefill runs grouped (SDPA's kernel, fp32 sums in another order), decode as SDPA
    torch.testing.assert_close(ours[0], sdpa[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(ours[1], sdpa[1], rtol=0, atol=1e-6)
    assert attention.implementation_for(torch.device("cpu"), torch.float32) == attention.NAME
    assert attention.implementation_for(torch.device("cpu"), torch.bfloat16) == attention.NAME
    assert attention.implementation_for(torch.device("cuda"), torch.bfloat16) is None


def test_local_policy_loads_every_dtype_on_a_cpu_with_the_attention(tmp_path):
    from rewardbox.policy.local import LocalPolicy

    path = write_tiny_checkpoint(tmp_path / "ckpt")
    for dtype, shared in (("bfloat16", True), ("float32", True), ("float32", False)):
        policy = LocalPolicy(path, dtype=dtype, num_threads=1, shared_prefix=shared)
        try:
            assert policy.model.config._attn_implementation == attention.NAME
            assert policy._batch.shared_prefix is shared  # on unless turned off
        finally:
            asyncio.run(policy.aclose())


def _module(layer_idx: int = 0):
    module = torch.nn.Module()
    module.layer_idx, module.num_key_value_groups, module.is_causal = layer_idx, 3, True
    return module.eval()


def _shared_source(keys, values):
    """A batch-1 cache-like holder of one layer's prefix keys/values."""
    layer = type("Layer", (), {})()
    layer.keys, layer.values = keys, values
    return type("Source", (), {"layers": [layer]})()


def _reference(query, keys, values, mask):
    """SDPA over the concatenated keys (grouped heads repeated), ``[B, L, heads, D]``."""
    group = query.shape[1] // keys.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query.float(),
        keys.float().repeat_interleave(group, 1),
        values.float().repeat_interleave(group, 1),
        attn_mask=mask,
    )
    return out.transpose(1, 2)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("using", [None, [True, False, True, True]])
def test_shared_prefix_attention_equals_one_softmax_over_prefix_and_own_keys(
    dtype, tolerance, using
):
    """Decode (one query position) with padded own columns, some rows not using the prefix."""
    torch.manual_seed(4)
    batch, heads, kv_heads, dim, prefix, own = 4, 9, 3, 16, 37, 11
    query = torch.randn(batch, heads, 1, dim, dtype=dtype)
    shared_k = torch.randn(
        1, kv_heads, prefix + 5, dim, dtype=dtype
    )  # the entry holds more columns
    shared_v = torch.randn(1, kv_heads, prefix + 5, dim, dtype=dtype)
    own_k = torch.randn(batch, kv_heads, own, dim, dtype=dtype)
    own_v = torch.randn(batch, kv_heads, own, dim, dtype=dtype)
    mask = torch.ones(batch, 1, 1, own, dtype=torch.bool)
    mask[1, ..., :4] = False  # left pads of a shorter row
    mask[2, ..., :7] = False
    rows = None if using is None else torch.tensor(using)
    shared = [
        attention.SharedPrefix(tuple(range(prefix)), _shared_source(shared_k, shared_v), rows)
    ]
    out = attention.shared_prefix_attention(_module(), query, own_k, own_v, mask, None, shared)
    assert out.shape == (batch, 1, heads, dim) and out.dtype == dtype
    for row in range(batch):
        uses = using is None or using[row]
        keys = (
            torch.cat([shared_k[:, :, :prefix], own_k[row : row + 1]], 2)
            if uses
            else own_k[row : row + 1]
        )
        values = (
            torch.cat([shared_v[:, :, :prefix], own_v[row : row + 1]], 2)
            if uses
            else own_v[row : row + 1]
        )
        row_mask = mask[row : row + 1]
        if uses:
            row_mask = torch.cat([torch.ones(1, 1, 1, prefix, dtype=torch.bool), row_mask], -1)
        expected = _reference(query[row : row + 1], keys, values, row_mask)
        torch.testing.assert_close(out[row : row + 1].float(), expected, rtol=0, atol=tolerance)


def test_shared_prefix_attention_at_prefill_is_causal_over_own_columns_and_pads_see_the_prefix():
    torch.manual_seed(5)
    batch, heads, kv_heads, dim, prefix, length = 2, 6, 2, 8, 20, 6
    query = torch.randn(batch, heads, length, dim)
    shared_k, shared_v = (
        torch.randn(1, kv_heads, prefix, dim),
        torch.randn(1, kv_heads, prefix, dim),
    )
    own_k, own_v = (
        torch.randn(batch, kv_heads, length, dim),
        torch.randn(batch, kv_heads, length, dim),
    )
    padding = torch.ones(batch, length, dtype=torch.bool)
    padding[1, :2] = False  # row 1's first two columns are left pads
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = (causal[None] & padding[:, None, :])[:, None]  # [B, 1, L, S], as sdpa_mask builds it
    shared = [attention.SharedPrefix(tuple(range(prefix)), _shared_source(shared_k, shared_v))]
    module = _module()
    module.num_key_value_groups = heads // kv_heads
    out = attention.shared_prefix_attention(module, query, own_k, own_v, mask, None, shared)
    full = torch.cat([torch.ones(batch, 1, length, prefix, dtype=torch.bool), mask], -1)
    expected = _reference(
        query,
        torch.cat([shared_k.expand(batch, -1, -1, -1), own_k], 2),
        torch.cat([shared_v.expand(batch, -1, -1, -1), own_v], 2),
        full,
    )
    assert torch.isfinite(out).all()  # the pad queries (no own key) take the prefix's part alone
    torch.testing.assert_close(out, expected, rtol=0, atol=2e-6)
    unmasked = attention.shared_prefix_attention(module, query, own_k, own_v, None, None, shared)
    torch.testing.assert_close(unmasked[0], out[0], rtol=0, atol=2e-6)  # None: causal (L == S)


def test_shared_prefix_attention_refuses_other_devices():
    module = _module()
    shared = attention.SharedPrefix(
        (1,), _shared_source(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    )
    x = torch.zeros(1, 9, 1, 4, device="meta")
    with pytest.raises(ValueError, match="runs on a CPU"):
        attention.attention_forward(module, x, x[:, :3], x[:, :3], None, shared_prefix=shared)


def test_two_prefixes_in_one_batch_each_serve_only_their_rows():
    """Rows of two domains decode together, each domain's prefix kept once: each row's result is one
    softmax over its own prefix and its own keys; a row in neither attends to its own keys alone."""
    torch.manual_seed(6)
    batch, heads, kv_heads, dim, own = 5, 9, 3, 16, 7
    query = torch.randn(batch, heads, 1, dim)
    own_k, own_v = torch.randn(batch, kv_heads, own, dim), torch.randn(batch, kv_heads, own, dim)
    mask = torch.ones(batch, 1, 1, own, dtype=torch.bool)
    mask[3, ..., :2] = False
    prefixes, members = [], ([0, 3], [1, 4])  # row 2 uses neither
    for length, rows in zip((30, 45), members):
        keys, values = torch.randn(1, kv_heads, length, dim), torch.randn(1, kv_heads, length, dim)
        using = torch.zeros(batch, dtype=torch.bool)
        using[rows] = True
        prefixes.append(
            attention.SharedPrefix(tuple(range(length)), _shared_source(keys, values), using)
        )
    out = attention.shared_prefix_attention(_module(), query, own_k, own_v, mask, None, prefixes)
    for row in range(batch):
        keys, values, row_mask = own_k[row : row + 1], own_v[row : row + 1], mask[row : row + 1]
        for prefix, rows in zip(prefixes, members):
            if row in rows:
                pk, pv = prefix.layer(0)
                keys, values = torch.cat([pk, keys], 2), torch.cat([pv, values], 2)
                ones = torch.ones(1, 1, 1, prefix.length, dtype=torch.bool)
                row_mask = torch.cat([ones, row_mask], -1)
        expected = _reference(query[row : row + 1], keys, values, row_mask)
        torch.testing.assert_close(out[row : row + 1], expected, rtol=0, atol=2e-6)


def test_concatenate_widens_rows_and_makes_equal_prefixes_one():
    source = object()
    a = [attention.SharedPrefix((1, 2, 3), source)]
    b = [
        attention.SharedPrefix((1, 2, 3), source, torch.tensor([True, False])),
        attention.SharedPrefix((7, 8), source, torch.tensor([False, True])),
    ]
    out = attention.concatenate([(a, 3), ([], 1), (b, 2)])
    assert [(p.tokens, p.rows.tolist()) for p in out] == [
        ((1, 2, 3), [True, True, True, False, True, False]),
        ((7, 8), [False, False, False, False, False, True]),
    ]


def test_only_models_with_plain_full_attention_take_a_shared_prefix():
    """A Mistral config windows every layer without ``layer_types``; with a shared prefix its rows
    attended to the whole prefix and decoded other tokens than alone. Such models keep a copy per row,
    and a layer that passes a window to the shared-prefix path is refused."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    name = attention.register()
    assert attention.takes_shared_prefix(tiny_llama(attn_implementation=name))
    assert not attention.takes_shared_prefix(tiny_llama())  # SDPA
    windowed = MistralForCausalLM(MistralConfig(sliding_window=8, **sizes))
    windowed.set_attn_implementation(name)
    assert not attention.takes_shared_prefix(windowed)
    qwen = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **sizes))
    qwen.set_attn_implementation(name)
    assert attention.takes_shared_prefix(qwen)
    shared = [
        attention.SharedPrefix(
            (1,), _shared_source(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
        )
    ]
    x = torch.zeros(1, 9, 1, 4)
    with pytest.raises(ValueError, match="sliding_window"):
        attention.attention_forward(
            _module(), x, x[:, :3], x[:, :3], None, shared_prefix=shared, sliding_window=8
        )


def test_the_additive_mask_is_built_once_per_mask_tensor_not_per_layer():
    mask = torch.tensor([[[[True, False, True]]]])
    first = attention._additive(mask, torch.bfloat16)
    assert first.tolist() == [[[[0.0, float("-inf"), 0.0]]]] and first.dtype == torch.bfloat16
    assert attention._additive(mask, torch.bfloat16) is first  # the next layer's call: reused
    assert attention._additive(mask, torch.float32) is not first  # another dtype: converted
    assert attention._additive(mask.clone(), torch.float32).dtype == torch.float32
    tiled = attention._additive(mask, torch.float32, 3)  # a grouped query block's rows
    assert tiled.shape == (1, 1, 3, 3) and tiled.tolist() == [[[[0.0, float("-inf"), 0.0]] * 3]]
    assert attention._additive(mask, torch.float32, 3) is tiled
    assert attention._additive(mask, torch.float32).shape == (1, 1, 1, 3)  # another group: built
    two_rows = torch.tensor([[[[True, False], [True, True]]]])
    assert attention._additive(two_rows, torch.float32, 2)[0, 0, :, 1].tolist() == [
        float("-inf"),
        0.0,
        float("-inf"),
        0.0,  # row g L + l is row l
    ]


def _grouped_inputs(dtype, batch=3, length=5, columns=9, padded=True):
    """Query ``[B, 6, L, 4]``, keys/values ``[B, 2, S, 4]`` (grouped 3 to 1) and a boolean mask: the
    first ``S - L`` columns a prefix every query sees, the rest causal, row 0 left-padded by 2 (its
    first 2 queries fully masked, its first 2 columns seen by none)."""
    torch.manual_seed(7)
    query = torch.randn(batch, 6, length, 4, dtype=dtype)
    keys = torch.randn(batch, 2, columns, 4, dtype=dtype)
    values = torch.randn(batch, 2, columns, 4, dtype=dtype)
    mask = torch.ones(batch, 1, length, columns, dtype=torch.bool)
    mask[:, :, :, columns - length :] = torch.ones(length, length).tril().bool()
    if padded:
        mask[0, :, :, :2] = False
        mask[0, :, :2] = False
    return query, keys, values, mask


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("padded", [False, True])
def test_grouped_query_blocks_equal_sdpa_over_repeated_keys_forward_and_backward(
    dtype, tolerance, padded
):
    query, keys, values, mask = _grouped_inputs(dtype, padded=padded)
    upstream = torch.randn(3, 5, 6, 4, dtype=dtype)

    def run(attend):
        leaves = [t.clone().requires_grad_() for t in (query, keys, values)]
        out = attend(*leaves)
        (out * upstream).sum().backward()
        return [out] + [leaf.grad for leaf in leaves]

    ours = run(lambda q, k, v: attention.grouped_query_attention(q, k, v, mask, scaling=0.5))
    theirs = run(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask, scale=0.5
        ).transpose(1, 2)
    )
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape and mine.dtype == dtype
        assert torch.isfinite(mine).all()  # fully masked queries give no NaN, forward or backward
        torch.testing.assert_close(mine.float(), reference.float(), rtol=0, atol=tolerance)
    if padded:  # a fully masked query: SDPA's answer, and no gradient into its query
        assert torch.equal(ours[0][0, :2], theirs[0][0, :2])
        assert not ours[1][0, :, :2].any()


def test_masked_multi_position_calls_with_grouped_heads_run_grouped_and_others_run_sdpa():
    query, keys, values, mask = _grouped_inputs(torch.float32, padded=False)
    grouped, sdpa = [], []
    real_grouped, real_sdpa = attention.grouped_query_attention, attention.sdpa_attention_forward
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            attention,
            "grouped_query_attention",
            lambda *a, **k: grouped.append(a[0].shape) or real_grouped(*a, **k),
        )
        patch.setattr(
            attention,
            "sdpa_attention_forward",
            lambda m, q, *a, **k: sdpa.append(q.shape) or real_sdpa(m, q, *a, **k),
        )
        module = _module()
        out, _ = attention.attention_forward(module, query, keys, values, mask, scaling=0.5)
        assert out.shape == (3, 5, 6, 4) and grouped == [query.shape] and sdpa == []
        attention.attention_forward(module, query, keys[:, :, 4:], values[:, :, 4:], None)
        full, ungrouped = keys.repeat_interleave(3, 1), _module()  # no grouped heads
        ungrouped.num_key_value_groups = 1
        attention.attention_forward(ungrouped, query, full, full, mask)
        attention.attention_forward(module, query[:, :, :1], keys, values, mask[:, :, :1])
        attention.attention_forward(module, query, keys, values, mask, sliding_window=4)
    assert len(grouped) == 1  # causal (no mask), ungrouped, one position, a window: SDPA's
    assert [shape[2] for shape in sdpa] == [5, 5, 1, 5]
