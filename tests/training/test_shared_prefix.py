"""A group's shared prompt is encoded once per optimiser step, with the same log-probs and gradients as
scoring every row in full (rewardbox.training.shared_prefix)."""

from __future__ import annotations

import pytest
import torch

from rewardbox.training.config import GRPOConfig
from rewardbox.training.logprobs import Sample, completion_logprobs
from rewardbox.training.shared_prefix import plan_blocks, scored_micro_batches
from tests.fixtures.tiny_models import tiny_llama


def lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_llama(vocab_size=97, seed=seed),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "down_proj"]),
    )
    for (
        name,
        param,
    ) in model.named_parameters():  # B != 0 so the adapter (and the prefix's k/v) carry gradient
        if "lora_B" in name:
            param.data.normal_(0, 0.1)
    return model


def step_samples() -> list[Sample]:
    """Two groups of 3 sharing a 70-token system prefix; each group shares its 90-token first prompt;
    one second-turn sample extends a first-turn prompt."""
    g = torch.Generator().manual_seed(3)
    system = torch.randint(3, 97, (70,), generator=g).tolist()
    samples = []
    for group in range(2):
        prompt = system + torch.randint(3, 97, (20,), generator=g).tolist()
        for row in range(3):
            completion = torch.randint(3, 97, (5 + 2 * row + group,), generator=g).tolist()
            samples.append(Sample(prompt, completion, advantage=(-1) ** row * (0.5 + group)))
    later = samples[0].prompt_ids + samples[0].completion_ids + [5, 6, 7]
    samples.append(Sample(later, [8, 9, 10, 11], advantage=0.7))
    return sorted(samples, key=lambda s: s.prompt_ids)


def grads_of(model, batches_loss) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    batches_loss()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def surrogate(logprobs, mask, batch):
    adv = torch.tensor([s.advantage for s in batch])
    return ((logprobs * mask).sum(dim=1) * adv).sum()


def test_plan_shares_each_groups_prompt_and_covers_every_sample_once():
    samples = step_samples()
    blocks = plan_blocks(samples, min_shared=16)
    assert [s for b in blocks for s in b.samples] == samples
    # each group's first prompt (90 tokens, 89 shareable) beats the 70-token system prefix for all 7
    assert sorted(b.prefix_len for b in blocks if len(b.samples) > 1) == [89, 89]
    assert [b.prefix_len for b in plan_blocks(samples, min_shared=1000)] == [0] * len(
        plan_blocks(samples, 1000)
    )
    assert plan_blocks([], 16) == []


@pytest.mark.parametrize("micro", [1, 2, 3])
def test_gradients_equal_scoring_every_row_in_full(micro):
    samples = step_samples()
    model = lora_model()
    model.train()

    def full():
        for i in range(0, len(samples), micro):
            batch = samples[i : i + micro]
            logprobs, mask = completion_logprobs(
                model, batch, pad_id=0, temperature=0.7, min_shared_prefix_tokens=10**9
            )
            surrogate(logprobs, mask, batch).backward()

    seen = []

    def shared():
        for batch, logprobs, mask in scored_micro_batches(
            model, samples, 0, 0.7, micro, min_shared=16
        ):
            seen.append((batch, logprobs.detach()))
            surrogate(logprobs, mask, batch).backward()

    expected, got = grads_of(model, full), grads_of(model, shared)
    assert expected.keys() == got.keys() and any("lora_A" in n for n in got)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)
    assert sorted(len(b) for b, _ in seen) and sum(len(b) for b, _ in seen) == len(samples)
    with torch.no_grad():
        for batch, logprobs in seen:
            ref, _ = completion_logprobs(model, batch, 0, 0.7, min_shared_prefix_tokens=10**9)
            torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)


def test_each_group_prompt_runs_once_per_step():
    samples = step_samples()
    model = lora_model()
    calls = []
    handle = model.get_decoder().register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        for batch, logprobs, mask in scored_micro_batches(model, samples, 0, 1.0, 1, min_shared=16):
            surrogate(logprobs, mask, batch).backward()
    finally:
        handle.remove()
    prefix_runs = [shape for shape in calls if shape[1] == 89]
    assert (
        len(prefix_runs) == 2
    )  # one per group, not one per micro-batch (6 micro-batches share them)
    assert len(calls) == 2 + len(samples)


def test_optimise_step_uses_the_shared_prefix_and_matches_the_plain_update():
    from rewardbox.training import trainer

    samples = step_samples()
    config = GRPOConfig(micro_batch_sequences=2, temperature=0.7, learning_rate=1e-2)
    results = []
    for share in (True, False):
        model = lora_model()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        fresh = [Sample(s.prompt_ids, s.completion_ids, s.advantage) for s in samples]
        if share:
            stats = trainer.optimise_step(model, optimizer, fresh, config, pad_id=0)
        else:
            stats = _plain_step(trainer, model, optimizer, fresh, config)
        results.append(
            (
                stats.loss,
                {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad},
            )
        )
    (loss_a, params_a), (loss_b, params_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-7)
    for name in params_a:
        torch.testing.assert_close(params_a[name], params_b[name], atol=1e-6, rtol=1e-5)


def _plain_step(trainer, model, optimizer, samples, config):
    """optimise_step with every row scored in full (no prefix shared anywhere)."""
    from functools import partial

    import rewardbox.training.shared_prefix as sp

    original = trainer.scored_micro_batches
    trainer.scored_micro_batches = partial(sp.scored_micro_batches, min_shared=10**9)
    try:
        return trainer.optimise_step(model, optimizer, samples, config, pad_id=0)
    finally:
        trainer.scored_micro_batches = original


def test_a_prefix_the_prompt_does_not_extend_is_refused():
    from rewardbox.training.logprobs import SharedPrefix

    model = lora_model()
    with pytest.raises(ValueError, match="shared prefix"):
        completion_logprobs(
            model, [Sample([1, 2, 3], [4], 1.0)], 0, prefix=SharedPrefix([1, 2, 3], [])
        )
    with pytest.raises(ValueError, match="micro_batch_sequences"):
        next(scored_micro_batches(model, [Sample([1, 2], [3], 1.0)], 0, 1.0, 0))


def test_micro_batches_are_sized_from_the_memory_budget():
    from rewardbox.training.shared_prefix import activation_bytes_per_token, micro_batch_rows

    model = lora_model()
    per_token = activation_bytes_per_token(model)
    assert per_token == 2 * (16 * 32 + 4 * 64) * 4
    rows = [Sample([1] * 100, [2] * 20, 1.0), Sample([1] * 100, [2] * 40, 1.0)]
    assert micro_batch_rows(rows, 90, 8, None, per_token) == 8  # no budget: the count alone
    assert (
        micro_batch_rows(rows, 90, 8, 3 * 50 * per_token, per_token) == 3
    )  # longest row: 50 tokens after the prefix
    assert micro_batch_rows(rows, 0, 8, 1, per_token) == 1  # never below one row
    samples = step_samples()
    sizes = [
        len(b)
        for b, _, _ in scored_micro_batches(
            model, samples, 0, 1.0, 3, min_shared=16, memory_budget_bytes=12 * per_token
        )
    ]
    assert sizes and max(sizes) == 1 and sum(sizes) == len(samples)


def _saved_bytes_per_decoder_call(model):
    """A context that records, per call of the decoder with gradients, the bytes autograd saved for
    backward (each storage once; parameters excluded): what that forward keeps until its backward."""
    from contextlib import contextmanager

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    calls: list[dict[int, int]] = []

    def pack(tensor):
        storage = tensor.untyped_storage()
        if calls and storage.data_ptr() not in params:
            calls[-1][storage.data_ptr()] = storage.nbytes()
        return tensor

    decoder = model.get_decoder()

    @contextmanager
    def recording():
        pre = decoder.register_forward_pre_hook(lambda *_: calls.append({}))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            try:
                yield calls
            finally:
                pre.remove()

    return recording()


def test_a_prefix_over_the_budget_is_recomputed_in_chunks_with_the_same_gradients():
    """Budget for ~25 prefix tokens: the 89-token prefixes run without a graph and are recomputed in
    4 chunks, last first; gradients and log-probs equal full scoring; no decoder call with gradients
    keeps more than the budget."""
    from rewardbox.training.shared_prefix import activation_bytes_per_token, prefix_plan

    samples = step_samples()
    model = lora_model()
    model.train()
    budget = 25 * activation_bytes_per_token(model, 89)
    block = next(b for b in plan_blocks(samples, 16) if b.prefix_len)
    plan = prefix_plan(model, block, budget)
    assert plan.chunk_tokens == 25 and plan.row_budget_bytes == budget

    def full():
        for s in samples:
            logprobs, mask = completion_logprobs(model, [s], 0, 0.7, 10**9)
            surrogate(logprobs, mask, [s]).backward()

    seen = []

    def chunked():
        for batch, logprobs, mask in scored_micro_batches(
            model, samples, 0, 0.7, 3, min_shared=16, memory_budget_bytes=budget
        ):
            seen.append((batch, logprobs.detach()))
            surrogate(logprobs, mask, batch).backward()

    expected = grads_of(model, full)
    with _saved_bytes_per_decoder_call(model) as calls:
        got = grads_of(model, chunked)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)
    with torch.no_grad():
        for batch, logprobs in seen:
            ref, _ = completion_logprobs(model, batch, 0, 0.7, min_shared_prefix_tokens=10**9)
            torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    kept = [sum(c.values()) for c in calls if c]
    assert len(kept) == len(seen) + 2 * 4  # every micro-batch, and 4 recomputed chunks per prefix
    assert max(kept) <= budget, (max(kept), budget)


def test_a_prefix_that_fits_keeps_its_graph_and_leaves_the_rest_to_the_rows():
    from rewardbox.training.shared_prefix import activation_bytes_per_token, prefix_plan

    samples = step_samples()
    model = lora_model()
    block = next(b for b in plan_blocks(samples, 16) if b.prefix_len)
    prefix_bytes = 89 * activation_bytes_per_token(model, 89)
    plan = prefix_plan(model, block, 10 * prefix_bytes)
    assert plan.chunk_tokens is None and plan.row_budget_bytes == 9 * prefix_bytes
    assert prefix_plan(model, block, None).chunk_tokens is None


def test_saved_activations_stay_within_the_estimate():
    """The per-token estimate bounds what a micro-batch really keeps (tiny Llama, math attention)."""
    from rewardbox.training.shared_prefix import activation_bytes_per_token

    samples = step_samples()
    model = lora_model()
    model.train()
    with _saved_bytes_per_decoder_call(model) as calls:
        for s in samples:
            logprobs, mask = completion_logprobs(model, [s], 0, 0.7, 10**9)
            surrogate(logprobs, mask, [s]).backward()
    for s, kept in zip(samples, calls):
        tokens = len(s.prompt_ids) + len(s.completion_ids)
        assert sum(kept.values()) <= tokens * activation_bytes_per_token(model, tokens)
