"""A group's shared prompt is encoded once per optimiser step, with the same log-probs and gradients as
scoring every row in full (rewardbox.training.shared_prefix)."""

from __future__ import annotations

import pytest
import torch

from rewardbox.training.config import GRPOConfig
from rewardbox.training.logprobs import Sample, completion_logprobs
from rewardbox.training.shared_prefix import plan_blocks, scored_micro_batches, tokens_run
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


def deep_samples() -> list[Sample]:
    """``step_samples`` plus later turns that nest three deep: two third-turn samples extend one
    second-turn prompt, which extends a first turn (system 70 -> group 89 -> turn two -> turn three)."""
    samples = step_samples()
    second = next(s for s in samples if len(s.prompt_ids) > 90)
    for tail in ([12, 13] * 3, [14, 15] * 3):
        third = second.prompt_ids + second.completion_ids + [20] * 30 + tail
        samples.append(Sample(third, [16, 17, 18], advantage=-0.3))
    return sorted(samples, key=lambda s: s.prompt_ids)


def _flat_tokens(samples, min_shared) -> int:
    """Tokens run when every block is encoded from the start (no nesting): the plan before nesting."""
    from rewardbox.policy.prefix_cache import common_prefix_len

    n = len(samples)
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    best = [0] + [1 << 62] * n
    for j in range(1, n + 1):
        for i in range(j):
            group = samples[i:j]
            p = 0
            if j - i > 1:
                p = min(common_prefix_len([s.prompt_ids for s in group]),
                        min(len(s.prompt_ids) for s in group) - 1)  # fmt: skip
                p = p if p >= min_shared else 0
            best[j] = min(best[j], best[i] + p + sum(lengths[i:j]) - (j - i) * p)
    return best[n]


def _check_plan(blocks, samples, min_shared):
    """Every sample once; each block's samples start with its prefix and keep an own token; a nested
    prefix extends its parent's by at least ``min_shared`` tokens."""

    def walk(block, below):
        assert block.prefix_len == 0 or block.prefix_len - below >= min_shared
        ids = block.all_samples()[0].prompt_ids[: block.prefix_len]
        for s in block.all_samples():
            assert s.prompt_ids[: block.prefix_len] == ids and len(s.prompt_ids) > block.prefix_len
        for child in block.children:
            assert child.prefix_len > block.prefix_len
            walk(child, block.prefix_len)

    for block in blocks:
        walk(block, 0)
    planned = [s for b in blocks for s in b.all_samples()]
    assert sorted(map(id, planned)) == sorted(map(id, samples))


def test_plan_nests_each_groups_prompt_in_the_system_prefix_and_covers_every_sample_once():
    samples = step_samples()
    blocks = plan_blocks(samples, min_shared=16)
    _check_plan(blocks, samples, 16)
    # the 70-token system prefix once, each group's 19 more tokens once on top of it
    assert [(b.prefix_len, [c.prefix_len for c in b.children]) for b in blocks] == [(70, [89, 89])]
    assert tokens_run(blocks) == _flat_tokens(samples, 16) - 89 - 89 + 70 + 19 + 19
    # extensions shorter than min_shared stay unshared: the groups' prompts, not the system prefix
    assert sorted(b.prefix_len for b in plan_blocks(samples, min_shared=20)) == [89, 89]
    assert [b.prefix_len for b in plan_blocks(samples, min_shared=1000)] == [0]
    assert plan_blocks([], 16) == []


def test_later_turns_nest_on_the_turn_they_extend():
    samples = deep_samples()
    blocks = plan_blocks(samples, min_shared=16)
    _check_plan(blocks, samples, 16)
    from rewardbox.policy.prefix_cache import common_prefix_len

    third = [s.prompt_ids for s in samples if s.completion_ids == [16, 17, 18]]
    shared = common_prefix_len(third)  # the third turns' common prompt, past turn two's

    def lengths(block):
        return [block.prefix_len] + [x for c in block.children for x in lengths(c)]

    nested = lengths(blocks[0])
    assert nested[:2] == [70, 89] and sorted(nested) == [70, 89, 89, shared], nested
    assert tokens_run(blocks) < _flat_tokens(samples, 16)


def test_a_prefix_can_be_shared_by_some_of_the_runs_under_it():
    """A review's case: four samples share 30 tokens and two more share the first 20 with them. Sharing
    the 20 with all six would keep the four from nesting their 30 (10 more < min_shared 16); the plan
    shares the 30 among the four and leaves the 20 to the two (62 tokens, as the flat plan)."""
    system, longer = list(range(10, 30)), list(range(10, 30)) + list(range(40, 50))
    samples = sorted(
        [Sample(longer + [60 + i], [1], 1.0) for i in range(4)]
        + [Sample(system + [70], [1], 1.0), Sample(system + [71], [1], 1.0)],
        key=lambda s: s.prompt_ids,
    )
    blocks = plan_blocks(samples, 16)
    _check_plan(blocks, samples, 16)
    assert tokens_run(blocks) == _flat_tokens(samples, 16) == 62
    assert sorted(b.prefix_len for b in blocks) == [20, 30]


@pytest.mark.parametrize("seed", range(40))
def test_the_nested_plan_never_runs_more_tokens_than_flat_blocks(seed):
    """Random steps of groups with later turns: a valid plan, never more tokens than the flat one."""
    gen = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(3, 97, (n,), generator=gen).tolist()

    system = ids(int(torch.randint(0, 120, (1,), generator=gen)))
    samples = []
    for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
        prompt = system + ids(int(torch.randint(1, 80, (1,), generator=gen)))
        for _ in range(int(torch.randint(1, 5, (1,), generator=gen))):
            turn = prompt
            for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
                done = ids(int(torch.randint(1, 30, (1,), generator=gen)))
                samples.append(Sample(turn, done, 1.0))
                turn = turn + done + ids(int(torch.randint(1, 90, (1,), generator=gen)))
    samples.sort(key=lambda s: s.prompt_ids)
    for min_shared in (1, 16, 64):
        blocks = plan_blocks(samples, min_shared)
        _check_plan(blocks, samples, min_shared)
        assert tokens_run(blocks) <= _flat_tokens(samples, min_shared)


@pytest.mark.parametrize("make", [step_samples, deep_samples])
@pytest.mark.parametrize("micro", [1, 2, 3])
def test_gradients_equal_scoring_every_row_in_full(micro, make):
    samples = make()
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
    # the system prefix once, each group's 19 more tokens once (not once per micro-batch)
    assert [shape[1] for shape in calls if shape[1] >= 19] == [70, 19, 19]
    assert len(calls) == 3 + len(samples)


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


def _recomputed_chunks(model, blocks, budget, encoded=0) -> int:
    """Chunks ``scored_micro_batches`` recomputes with gradients for ``blocks`` (what ``prefix_plan`` says)."""
    from rewardbox.training.shared_prefix import prefix_plan

    total = 0
    for block in blocks:
        plan = prefix_plan(model, block, budget, encoded)
        if plan.chunk_tokens is not None:
            total += -(-(block.prefix_len - encoded) // plan.chunk_tokens)
        total += _recomputed_chunks(
            model, block.children, plan.row_budget_bytes, max(encoded, block.prefix_len)
        )
    return total


@pytest.mark.parametrize("make", [step_samples, deep_samples])
def test_a_prefix_over_the_budget_is_recomputed_in_chunks_with_the_same_gradients(make):
    """Budget for ~25 prefix tokens: the 70-token system prefix runs without a graph and is recomputed
    in 3 chunks of 27, last first, and the nested extensions that do not fit are recomputed on top of
    it; gradients and log-probs equal full scoring; no decoder call with gradients keeps more than
    the budget."""
    from rewardbox.training.shared_prefix import (
        activation_bytes_per_token,
        prefix_plan,
        state_bytes_per_token,
    )

    samples = make()
    model = lora_model()
    model.train()
    budget = 25 * activation_bytes_per_token(model, 89)
    blocks = plan_blocks(samples, 16)
    plan = prefix_plan(model, blocks[0], budget)
    assert blocks[0].prefix_len == 70
    left = budget - 70 * state_bytes_per_token(model)  # the prefix's states and their gradient
    assert plan.chunk_tokens == left // activation_bytes_per_token(model, 70) == 24
    assert plan.row_budget_bytes == left
    chunks = _recomputed_chunks(model, blocks, budget)
    assert chunks > 3  # nested extensions are recomputed too (on top of the system prefix)

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
    assert len(kept) == len(seen) + chunks  # every micro-batch, and each recomputed chunk
    assert max(kept) <= budget, (max(kept), budget)


def test_a_prefix_that_fits_keeps_its_graph_and_leaves_the_rest_to_the_rows():
    from rewardbox.training.shared_prefix import (
        activation_bytes_per_token,
        prefix_plan,
        state_bytes_per_token,
    )

    samples = step_samples()
    model = lora_model()
    state = state_bytes_per_token(model)
    assert (
        state == 4 * 2 * 2 * 8 * 4
    )  # keys, values and their gradient: 2 layers, 2 KV heads of 8, fp32
    block = plan_blocks(samples, 16)[0]
    prefix_bytes = 70 * activation_bytes_per_token(model, 70)
    plan = prefix_plan(model, block, 10 * prefix_bytes)
    assert plan.chunk_tokens is None
    assert plan.row_budget_bytes == 9 * prefix_bytes - 70 * state
    assert prefix_plan(model, block, None).chunk_tokens is None
    # a nested block's graph is its extension, at its whole prefix's context; its states all 89 columns
    child = block.children[0]
    extension = 19 * activation_bytes_per_token(model, 89)
    nested = prefix_plan(model, child, plan.row_budget_bytes, encoded=70)
    assert nested.chunk_tokens is None
    assert nested.row_budget_bytes == plan.row_budget_bytes - extension - 89 * state


def test_a_prefix_counts_the_rows_under_it_after_their_own_deeper_prefix():
    """The system prefix keeps its graph when it and the largest row fit, that row counted after its
    group's 89-token prefix (where it runs), not after the system's 70."""
    from rewardbox.training.shared_prefix import (
        activation_bytes_per_token,
        prefix_plan,
        state_bytes_per_token,
    )

    samples = step_samples()
    model = lora_model()
    block = plan_blocks(samples, 16)[0]
    assert not block.samples and block.prefix_len == 70
    row = max(
        (len(s.prompt_ids) + len(s.completion_ids) - 89)
        * activation_bytes_per_token(model, len(s.prompt_ids) + len(s.completion_ids))
        for s in samples
    )
    fits = 70 * (activation_bytes_per_token(model, 70) + state_bytes_per_token(model)) + row
    assert prefix_plan(model, block, fits).chunk_tokens is None
    assert prefix_plan(model, block, fits - 1).chunk_tokens is not None


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
