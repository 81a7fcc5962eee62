"""The local policy's decode loop and per-row sampler on a tiny real Llama (no weights download).

The decode loop must give the tokens ``generate`` gives, let finished rows leave
the batch without changing the others, reuse a prefix cache exactly, and record
log-probs equal to the trainer's scoring of the same tokens.
"""

from __future__ import annotations

import pytest

from tests.fixtures.tiny_models import tiny_llama

torch = pytest.importorskip("torch")

from rewardbox.policy.decode import decode_batch  # noqa: E402
from rewardbox.policy.prefix_cache import PrefixCache  # noqa: E402
from rewardbox.policy.sampling import PerRowSampler  # noqa: E402
from rewardbox.training.logprobs import Sample, completion_logprobs  # noqa: E402

PAD = 0


def tiny_model():
    return tiny_llama(max_position_embeddings=256).eval()


def left_pad(prompts):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), PAD)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return ids, mask


PROMPTS = [[5, 9, 13, 2, 7], [3, 4], [11, 12, 13, 14, 15, 16, 17], [8]]


def _decode(
    model, prompts, budgets, stops=(), temperatures=None, seeds=None, cache=None, inputs=None
):
    sampler = PerRowSampler(
        seeds or list(range(len(prompts))), temperatures=temperatures or [0.0] * len(prompts)
    )
    ids, mask = inputs if inputs is not None else left_pad(prompts)
    with torch.inference_mode():
        rows = decode_batch(
            model, ids, mask, budgets=budgets, stop_token_ids=stops, sampler=sampler, cache=cache
        )
    return rows, sampler


def test_greedy_decode_equals_plain_generate():
    model = tiny_model()
    ids, mask = left_pad(PROMPTS)
    with torch.inference_mode():
        plain = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=PAD
        )[:, ids.shape[1] :].tolist()
    eos = model.generation_config.eos_token_id  # generate stops rows there and pads them after
    expected = [row[: row.index(eos) + 1] if eos in row else row for row in plain]
    assert any(len(row) < 10 for row in expected) and any(len(row) == 10 for row in expected)
    rows, sampler = _decode(model, PROMPTS, budgets=[10, 10, 10, 10], stops=[eos])
    assert rows == expected
    assert sampler.logprobs == [
        [0.0] * len(row) for row in rows
    ]  # greedy: one-hot processed distribution


def test_rows_leave_at_their_stop_token_or_budget_and_the_rest_are_unchanged():
    model = tiny_model()
    free, _ = _decode(model, PROMPTS, budgets=[12] * 4)
    first = next(k for k in range(2, 12) if free[0][k] not in free[0][:k])
    stop = free[0][first]  # row 0 stops at this token; others stop wherever they meet it
    budgets = [12, 3, 12, 7]
    rows, sampler = _decode(model, PROMPTS, budgets=budgets, stops=[stop])
    for row, alone, budget in zip(rows, free, budgets):
        end = next((i + 1 for i, t in enumerate(alone) if t == stop), len(alone))
        assert row == alone[: min(end, budget)]
    assert len(rows[0]) == first + 1 and len(rows[1]) <= 3 and max(map(len, rows)) > first + 1
    assert [len(lp) for lp in sampler.logprobs] == [len(r) for r in rows]


def test_prefix_cache_decode_equals_plain_decode():
    model = tiny_model()
    prefix = [int(x) for x in torch.randint(3, 64, (40,))]
    prompts = [prefix + [7, 8, 9], prefix + [10], prefix + [11, 12, 13, 14]]
    plain, _ = _decode(model, prompts, budgets=[8, 8, 8])
    cache = PrefixCache(min_tokens=16)
    inputs, _ = cache.prepare(model, prompts, PAD, torch.device("cpu"))
    cached, _ = _decode(
        model,
        prompts,
        budgets=[8, 8, 8],
        cache=inputs["cache"],
        inputs=(inputs["input_ids"], inputs["attention_mask"]),
    )
    assert cached == plain


def test_seeded_rows_do_not_depend_on_the_company_and_logprobs_match_the_trainer():
    model = tiny_model()
    alone, alone_sampler = _decode(model, PROMPTS[:1], budgets=[12], temperatures=[0.7], seeds=[42])
    free, _ = _decode(
        model, PROMPTS, budgets=[12] * 4, temperatures=[0.7, 1.0, 0.0, 0.7], seeds=[42, 1, 2, 3]
    )
    stop = free[1][1]  # a stop token that ends some other rows early
    mixed, sampler = _decode(
        model,
        PROMPTS,
        budgets=[12, 2, 12, 5],
        stops=[stop] if stop not in alone[0] else [],
        temperatures=[0.7, 1.0, 0.0, 0.7],
        seeds=[42, 1, 2, 3],
    )
    assert mixed[0] == alone[0] and len(set(alone[0])) > 1
    assert sampler.logprobs[0] == pytest.approx(alone_sampler.logprobs[0], abs=1e-5)
    samples = [Sample(PROMPTS[0], mixed[0], 1.0), Sample(PROMPTS[3], mixed[3], 1.0)]
    with torch.no_grad():
        scored, mask = completion_logprobs(model, samples, PAD, temperature=0.7)
    for i, row in enumerate((0, 3)):
        n = int(mask[i].sum())
        assert scored[i, :n].tolist() == pytest.approx(sampler.logprobs[row], abs=1e-4)


def test_sampler_greedy_scaled_and_one_hot_rows():
    scores = torch.tensor([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0], [0.0, float("-inf"), float("-inf")]])
    sampler = PerRowSampler([1, 2, 3], temperatures=[0.0, 2.0, 0.5])
    state = sampler.generators[2].get_state()
    chosen = sampler.draw(scores, [0, 1, 2])
    assert chosen[0] == 1 and chosen[2] == 0
    assert sampler.logprobs[0] == [0.0] and sampler.logprobs[2] == [0.0]
    expected = torch.log_softmax(scores[1] / 2.0, -1)[int(chosen[1])].item()
    assert sampler.logprobs[1] == [pytest.approx(expected, abs=1e-6)]
    assert torch.equal(sampler.generators[2].get_state(), state)  # a one-hot row draws nothing
    again = PerRowSampler([1, 2, 3], temperatures=[0.0, 2.0, 0.5])
    assert again.draw(scores[1:2], [1]).tolist() == [int(chosen[1])]  # row 1 alone: the same draw
    with pytest.raises(ValueError, match="temperatures"):
        PerRowSampler([1, 2], temperatures=[1.0])


def test_kv_cache_is_written_in_place_and_equals_concatenation():
    from transformers import DynamicCache

    from rewardbox.policy.kv_cache import PreallocatedLayer, preallocated_cache

    model = tiny_model()
    ids = torch.tensor([[5, 9, 13, 2, 7, 1], [3, 4, 6, 8, 10, 12]])
    outs = {}
    for name, make in (
        ("dynamic", lambda: DynamicCache(config=model.config)),
        ("preallocated", lambda: preallocated_cache(model.config, capacity=8)),
    ):
        cache, logits, pointers = make(), [], set()
        with torch.inference_mode():
            out = model(input_ids=ids[:, :4], cache=cache, use_cache=True)
            for step in range(4, 6 + 6):  # past the capacity of 8: the buffer grows once
                token = ids[:, step : step + 1] if step < 6 else out.logits[:, -1:].argmax(-1)
                out = model(input_ids=token, cache=cache, use_cache=True)
                logits.append(out.logits)
                if isinstance(cache.layers[0], PreallocatedLayer):
                    pointers.add(cache.layers[0]._keys.data_ptr())
            cache.batch_select_indices(torch.tensor([1]))
            logits.append(model(input_ids=torch.tensor([[3]]), cache=cache, use_cache=True).logits)
        outs[name] = (torch.cat([x[-1:] for x in logits]), cache.get_seq_length(), pointers)
    assert torch.equal(outs["dynamic"][0], outs["preallocated"][0])
    assert outs["dynamic"][1] == outs["preallocated"][1] == 13
    assert (
        len(outs["preallocated"][2]) == 2
    )  # one buffer up to capacity 8, one after doubling: no copy per step


def test_decode_uses_the_preallocated_cache():
    from rewardbox.policy import decode
    from rewardbox.policy.kv_cache import PreallocatedLayer

    seen = []
    real = decode._decode_cache
    decode._decode_cache = lambda *a, **kw: seen.append(real(*a, **kw)) or seen[-1]
    try:
        rows, _ = _decode(tiny_model(), PROMPTS, budgets=[4, 4, 4, 4])
    finally:
        decode._decode_cache = real
    assert isinstance(seen[0].layers[0], PreallocatedLayer) and all(len(r) == 4 for r in rows)
