"""Continuous batching on a tiny real Llama built from a config (random weights, no download).

Rows that join a running batch mid-decode must give the tokens they give alone
(greedy: plain ``generate``; sampled: the same seed alone), with the same sampler
log-probs; a prefix-cache hit joins without prefilling the prefix; staggered
requests through the policy's worker share decode steps.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading

import pytest

from tests.fixtures.tiny_models import tiny_llama

torch = pytest.importorskip("torch")

from rewardbox.policy.base import ChatRequest  # noqa: E402
from rewardbox.policy.batching import Pending  # noqa: E402
from rewardbox.policy.local import LocalPolicy  # noqa: E402
from rewardbox.policy.prefix_cache import PrefixCache  # noqa: E402
from rewardbox.policy.running import RowSpec, RunningBatch  # noqa: E402
from rewardbox.training.logprobs import Sample, completion_logprobs  # noqa: E402

PAD = 0
SHARED = "rewardbox_cpu_decode"  # attention.NAME: rows keep a cached prefix shared
IMPLEMENTATIONS = pytest.mark.parametrize(
    "implementation", [None, SHARED], ids=["sdpa", "shared-prefix"]
)


def tiny_model(implementation: str | None = None):
    return tiny_llama(attn_implementation=implementation).eval()


PROMPTS = [[5, 9, 13, 2, 7], [3, 4], [11, 12, 13, 14, 15, 16, 17, 18, 19], [8], [21, 22, 23]]


def _staggered(batch: RunningBatch, specs: list[RowSpec], joins_at: list[int]) -> dict[int, object]:
    """Admit ``specs[i]`` before decode step ``joins_at[i]``; run to the end. Returns finished rows by spec index."""
    done, slot_of, step = {}, {}, 0
    with torch.inference_mode():
        while len(done) < len(specs):
            now = [i for i, at in enumerate(joins_at) if at == step]
            if now:
                slots, finished = batch.admit([specs[i] for i in now])
                slot_of.update(zip(slots, now))
                done.update((slot_of[r.slot], r) for r in finished)
            done.update((slot_of[r.slot], r) for r in batch.step())
            step += 1
    return done


def test_greedy_rows_joining_mid_batch_equal_plain_generate():
    model = tiny_model()
    eos = model.generation_config.eos_token_id
    budgets = [14, 10, 14, 6, 12]
    with torch.inference_mode():
        plain = [
            model.generate(
                input_ids=torch.tensor([p]),
                max_new_tokens=b,
                do_sample=False,
                pad_token_id=PAD,
                eos_token_id=eos,
            )[0, len(p) :].tolist()
            for p, b in zip(PROMPTS, budgets)
        ]
    batch = RunningBatch(model, [eos], PAD, "cpu")
    specs = [RowSpec(p, b, 0.0, i) for i, (p, b) in enumerate(zip(PROMPTS, budgets))]
    done = _staggered(batch, specs, joins_at=[0, 2, 2, 5, 9])
    assert [done[i].tokens for i in range(5)] == plain
    assert all(done[i].logprobs == [0.0] * len(plain[i]) for i in range(5))
    assert max(r.peak_rows for r in done.values()) >= 3  # rows really shared steps
    assert batch.row_steps / batch.steps > 1.5


def test_seeded_sampled_rows_are_the_same_joined_or_alone_and_logprobs_match_the_trainer():
    model = tiny_model()
    specs = [
        RowSpec(p, 12, t, 40 + i)
        for i, (p, t) in enumerate(zip(PROMPTS, [0.7, 1.0, 0.0, 0.7, 1.3]))
    ]
    with torch.inference_mode():
        alone = [RunningBatch(model, [], PAD, "cpu").decode_all([spec])[0] for spec in specs]
    done = _staggered(RunningBatch(model, [], PAD, "cpu"), specs, joins_at=[0, 1, 4, 4, 7])
    for i in range(5):
        assert done[i].tokens == alone[i].tokens, i
        assert done[i].logprobs == pytest.approx(alone[i].logprobs, abs=1e-5)
    assert len(set(done[0].tokens)) > 1
    samples = [Sample(PROMPTS[i], done[i].tokens, 1.0) for i in (0, 3)]
    with torch.no_grad():
        scored, mask = completion_logprobs(model, samples, PAD, temperature=0.7)
    for k, i in enumerate((0, 3)):
        assert scored[k, : int(mask[k].sum())].tolist() == pytest.approx(done[i].logprobs, abs=1e-4)


@IMPLEMENTATIONS
def test_a_prefix_cache_hit_joins_without_prefilling_the_prefix(implementation):
    model = tiny_model(implementation)
    prefix = [
        int(x) for x in torch.randint(3, 64, (40,), generator=torch.Generator().manual_seed(1))
    ]
    prompts = [prefix + [7, 8, 9], prefix + [10], prefix + [11, 12, 13, 14]]
    specs = [RowSpec(p, 8, 0.0, i) for i, p in enumerate(prompts)]
    with torch.inference_mode():
        plain = [RunningBatch(model, [], PAD, "cpu").decode_all([spec])[0].tokens for spec in specs]
    cache = PrefixCache(min_tokens=16)
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        done = _staggered(
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache), specs, joins_at=[0, 0, 3]
        )
    finally:
        hook.remove()
    assert [done[i].tokens for i in range(3)] == plain
    assert (cache.misses, cache.hits) == (
        1,
        1,
    )  # the first two rows computed it; the third reused it
    assert widths[0] == (1, 40) and widths[1] == (
        2,
        3,
    )  # prefix once at batch 1, then the suffixes only
    assert (1, 4) in widths  # the joiner prefilled its 4-token suffix, not 44 tokens
    assert done[2].cached_tokens == 40


@IMPLEMENTATIONS
def test_rows_of_two_domains_admitted_together_each_reuse_their_own_cached_prefix(implementation):
    """Issue #28's kind: one admit of rows from two domains (two long prefixes that share only a few
    tokens) prefilled every row's whole prompt, because one call's common prefix was the few shared
    tokens. Each domain's rows are now a call of their own and prefill only their suffixes."""
    model = tiny_model(implementation)
    gen = torch.Generator().manual_seed(2)
    opening = [3, 4, 5]  # both domains' prompts start alike (a chat template's first tokens)
    domain_a = opening + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    domain_b = opening + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    prompts = [domain_a + [7, 8], domain_b + [9], domain_a + [10, 11, 12], domain_b + [13, 14]]
    specs = [RowSpec(p, 6, 0.0, i) for i, p in enumerate(prompts)]
    with torch.inference_mode():
        plain = [RunningBatch(model, [], PAD, "cpu").decode_all([spec])[0].tokens for spec in specs]
    cache = PrefixCache(min_tokens=16)
    with torch.inference_mode():  # each domain's prefix is cached, as after its first request
        for prompt in (domain_a + [1], domain_b + [1]):
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(
                [RowSpec(prompt, 1, 0.0, 0)]
            )
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        done = _staggered(
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache), specs, joins_at=[0] * 4
        )
    finally:
        hook.remove()
    assert [done[i].tokens for i in range(4)] == plain
    prefills = [w for w in widths if w[1] > 1]
    assert sorted(prefills) == [(2, 2), (2, 3)]  # suffixes only: 2 rows x 2 and 2 rows x 3 columns
    assert all(done[i].cached_tokens == 43 for i in range(4))


def test_a_sliding_window_model_prefills_rows_of_two_domains_in_one_call():
    """A model with sliding-window layers keeps ``DynamicCache`` layers, which cannot be merged: the rows
    of one admit split into two prefill calls (two domains) merged the second call into the first and
    failed (``'DynamicSlidingWindowLayer' object has no attribute '_keys'``), so every row of the
    admit was a system error. Such a batch is prefilled in one call, as before the split."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        use_sliding_window=True,
        sliding_window=256,  # wider than every prompt: the tokens equal full attention's
        max_window_layers=0,
    )
    model = Qwen2ForCausalLM(config).eval()
    assert set(model.config.layer_types) == {"sliding_attention"}
    gen = torch.Generator().manual_seed(2)
    domain_a = [3, 4, 5] + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    domain_b = [3, 4, 5] + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    prompts = [domain_a + [7, 8], domain_b + [9], domain_a + [10, 11, 12], domain_b + [13, 14]]
    specs = [RowSpec(p, 6, 0.0, i) for i, p in enumerate(prompts)]
    cache = PrefixCache(min_tokens=16)
    with torch.inference_mode():
        plain = [RunningBatch(model, [], PAD, "cpu").decode_all([spec])[0].tokens for spec in specs]
        for prompt in (domain_a + [1], domain_b + [1]):  # both prefixes cached: two calls would pay
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(
                [RowSpec(prompt, 1, 0.0, 0)]
            )
        done = RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(specs)
    assert [row.tokens for row in done] == plain


def _domain(seed: int, n: int = 40) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [3, 4, 5] + [int(x) for x in torch.randint(6, 64, (n,), generator=gen)]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_shared_prefix_rows_keep_only_their_own_columns_and_their_tokens(temperature):
    """Rows from one cached prefix keep it once (``SharedPrefix``); their own buffer holds only their
    columns. Rows of two tasks (two extensions of one domain prefix) and of a second domain join the
    batch mid-decode: the merged batch keeps what the prefixes share, the rest moving into the rows'
    own columns. Every row's tokens and sampler log-probs equal the same row decoded alone without a
    cache (SDPA), and the sampled rows' log-probs equal the trainer's scoring."""
    model, reference = tiny_model(SHARED), tiny_model()
    domain_a, domain_b = _domain(2, n=70), _domain(3, n=70)  # over decode.FOLD_MIN_TOKENS
    task_1, task_2 = domain_a + [7, 8, 9, 10, 11, 12], domain_a + [13, 14, 15, 16, 17]
    prompts = [
        task_1 + [20],
        task_1 + [21, 22],  # two trials of task 1 (one call: the prefix cache extends the domain's)
        task_2 + [23],
        task_2 + [24, 25, 26],  # task 2: shares only the domain prefix with task 1's entry
        domain_b + [27, 28],  # another domain: shares 3 tokens
        domain_b + [29],
    ]
    specs = [RowSpec(p, 9, temperature, 60 + i) for i, p in enumerate(prompts)]
    with torch.inference_mode():
        alone = [RunningBatch(reference, [], PAD, "cpu").decode_all([spec])[0] for spec in specs]
        cache = PrefixCache(min_tokens=16)
        for prompt in (domain_a + [1], domain_b + [1]):  # each domain cached, as after a first turn
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(
                [RowSpec(prompt, 1, 0.0, 0)]
            )
        batch = RunningBatch(model, [], PAD, "cpu", prefix_cache=cache)
        assert batch.shared_prefix
        shared_lengths, widths = [], []
        done, slot_of, joins = {}, {}, {0: [0, 1], 2: [2, 3], 4: [4, 5]}
        step = 0
        while len(done) < len(specs):
            if step in joins:
                slots, finished = batch.admit([specs[i] for i in joins[step]])
                slot_of.update(zip(slots, joins[step]))
                done.update((slot_of[r.slot], r) for r in finished)
                if batch.rows is not None:
                    shared_lengths.append(sorted(p.length for p in batch.rows.shared))
                    widths.append(batch.rows.cache.get_seq_length())
            done.update((slot_of[r.slot], r) for r in batch.step())
            step += 1
    for i in range(len(specs)):
        assert done[i].tokens == alone[i].tokens, i
        assert done[i].logprobs == pytest.approx(alone[i].logprobs, abs=1e-5), i
    # task 1's rows share its extended entry; with task 2's, the two extensions fold into the domain
    # prefix; the second domain's rows keep theirs beside it (they share 3 tokens: no fold)
    assert shared_lengths[0] == [len(task_1)]
    assert shared_lengths[1] == [len(domain_a)]
    assert shared_lengths[2] == [len(domain_a), len(domain_b)]
    assert widths[0] < len(task_1)  # the rows' own columns: suffix and first token, not the prefix
    if temperature:
        picked = [i for i in range(len(specs)) if len(done[i].tokens) > 1][:3]
        samples = [Sample(prompts[i], done[i].tokens, 1.0) for i in picked]
        with torch.no_grad():
            scored, mask = completion_logprobs(reference, samples, PAD, temperature=temperature)
        for k, i in enumerate(picked):
            got = scored[k, : int(mask[k].sum())].tolist()
            assert got == pytest.approx(done[i].logprobs, abs=1e-4)


def test_a_batch_without_a_prefix_cache_or_with_sdpa_keeps_every_column_per_row():
    with torch.inference_mode():
        for model, cache in (
            (tiny_model(SHARED), None),
            (tiny_model(), PrefixCache(min_tokens=16)),
        ):
            batch = RunningBatch(model, [], PAD, "cpu", prefix_cache=cache)
            prompt = _domain(2) + [7]
            batch.admit([RowSpec(prompt, 4, 0.0, 0), RowSpec(prompt + [8], 4, 0.0, 1)])
            assert batch.rows.shared == []
            assert (
                batch.rows.cache.get_seq_length() == len(prompt) + 1
            )  # the longer prompt, all of it
    with pytest.raises(ValueError, match="cannot take a shared prefix"):
        RunningBatch(tiny_model(), [], PAD, "cpu", shared_prefix=True)


class _CharTokenizer:
    """One token per character (ids 3..63); enough of a tokenizer for the policy's worker."""

    def __call__(self, texts, add_special_tokens=False):
        class Encoded:
            input_ids = [[3 + ord(ch) % 61 for ch in text][-40:] for text in texts]

        return Encoded()

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i % 26) for i in ids)


def _tiny_policy(model) -> LocalPolicy:
    policy = LocalPolicy.__new__(LocalPolicy)
    policy.name, policy.max_batch_size, policy.batch_wait_s = "tiny", 8, 0.0
    policy.model, policy.tokenizer, policy.device = model, _CharTokenizer(), torch.device("cpu")
    policy.context_tokens, policy.stop_token_ids, policy.pad_token_id = 512, [1], PAD
    policy.temperature = policy.max_new_tokens = None
    policy._rng, policy.guided_tool_calls, policy._vocabulary = random.Random(0), False, None
    policy.prefix_cache = PrefixCache(min_tokens=10_000)
    policy.generation_lock, policy._weights_version = threading.RLock(), 0
    policy._queue, policy._waiting, policy._slots = queue.Queue(), [], {}
    policy._batch, policy._batch_version = policy._new_batch(), 0
    return policy


def _request(i: int) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "user", "content": f"turn {i} of an episode"}],
        tools=[],
        max_new_tokens=10,
        temperature=0.0 if i % 2 else 0.8,
        seed=100 + i,
    )


def test_staggered_requests_share_decode_steps_and_keep_their_tokens():
    """One request arrives per worker tick (as episodes' turns do): they decode together, each row's
    tokens equal the same request decoded alone; the old batch-to-its-end worker gave 1 row per step."""
    policy = _tiny_policy(tiny_model())
    widths = []
    policy.model.register_forward_pre_hook(
        lambda _m, _a, kw: (
            widths.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] == 1 else None
        ),
        with_kwargs=True,
    )
    loop = asyncio.new_event_loop()
    try:
        pendings = [Pending(_request(i), None, loop.create_future(), loop, 0.0) for i in range(6)]
        for pending in pendings:
            policy._queue.put(pending)
            policy._tick()
        while policy._slots:
            policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
        joined = [p.future.result() for p in pendings]
    finally:
        loop.close()
    rows_per_step = sum(widths) / len(widths)
    assert rows_per_step >= 3.0, widths
    alone = [policy.generate_batch([p.request], [p.prompt_ids])[0] for p in pendings]
    assert [c.completion_token_ids for c in joined] == [c.completion_token_ids for c in alone]
    assert max(c.extra["batch_size"] for c in joined) >= 4


def test_rows_decoding_when_the_weights_change_fail_as_system_errors():
    from rewardbox.errors import EndpointError

    policy = _tiny_policy(tiny_model())
    loop = asyncio.new_event_loop()
    try:
        pending = Pending(_request(1), None, loop.create_future(), loop, 0.0)
        policy._queue.put(pending)
        policy._tick()
        assert policy._slots
        policy.weights_changed()
        policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
        with pytest.raises(EndpointError, match="weights"):
            pending.future.result()
    finally:
        loop.close()
    assert not policy._slots and len(policy._batch) == 0


def test_a_cancelled_request_leaves_the_batch_and_the_others_keep_their_tokens():
    policy = _tiny_policy(tiny_model())
    widths = []
    policy.model.register_forward_pre_hook(
        lambda _m, _a, kw: (
            widths.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] == 1 else None
        ),
        with_kwargs=True,
    )
    loop = asyncio.new_event_loop()
    try:
        pendings = [Pending(_request(i), None, loop.create_future(), loop, 0.0) for i in range(3)]
        for pending in pendings:
            policy._queue.put(pending)
        policy._tick()
        pendings[1].future.cancel()
        while policy._slots:
            policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
        kept = [pendings[i].future.result() for i in (0, 2)]
    finally:
        loop.close()
    assert widths[0] == 3 and set(widths[1:]) <= {
        1,
        2,
    }  # the cancelled row decoded one step, then left
    alone = [
        policy.generate_batch([pendings[i].request], [pendings[i].prompt_ids])[0] for i in (0, 2)
    ]
    assert [c.completion_token_ids for c in kept] == [c.completion_token_ids for c in alone]


def test_requests_wait_while_the_kv_budget_is_full_and_all_complete_with_their_tokens():
    """A KV budget for two rows of (40-token prompt + 10-token budget): six requests queued at once
    decode at most two at a time, the running buffer never reserves more than the budget, and each
    row's tokens equal the request decoded alone."""
    from rewardbox.policy.kv_cache import kv_bytes_per_position
    from rewardbox.policy.prefix_cache import cache_nbytes

    policy = _tiny_policy(tiny_model())
    per_position = kv_bytes_per_position(policy.model.config, torch.float32)
    assert per_position == 2 * 2 * 2 * 8 * 4
    policy.kv_cache_bytes = 2 * (40 + 10) * per_position
    widths, reserved = [], []

    def watch(_m, _a, kw):
        if kw["input_ids"].shape[1] == 1:
            widths.append(kw["input_ids"].shape[0])
            reserved.append(cache_nbytes([policy._batch.rows.cache]))

    handle = policy.model.register_forward_pre_hook(watch, with_kwargs=True)
    loop = asyncio.new_event_loop()
    try:
        pendings = [Pending(_request(i), None, loop.create_future(), loop, 0.0) for i in range(6)]
        for pending in pendings:
            policy._queue.put(pending)
        policy._tick()
        while policy._slots or policy._waiting:
            policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
        joined = [p.future.result() for p in pendings]
    finally:
        loop.close()
        handle.remove()
    assert max(widths) == 2 and max(reserved) <= policy.kv_cache_bytes
    alone = [policy.generate_batch([p.request], [p.prompt_ids])[0] for p in pendings]
    assert [c.completion_token_ids for c in joined] == [c.completion_token_ids for c in alone]
    policy.kv_cache_bytes = 1  # smaller than any row: a lone request still runs
    assert policy._rows_that_fit(pendings[:3]) == 1


def test_the_profile_kv_budget_reaches_the_local_policy():
    from rewardbox.policy.config import PolicyConfig

    assert PolicyConfig(kind="local").constructor_kwargs()["kv_cache_mib"] == 2048
    assert (
        PolicyConfig(kind="local", kv_cache_mib=None).constructor_kwargs()["kv_cache_mib"] is None
    )


def test_a_fault_in_one_prefill_call_fails_the_whole_admit_and_leaves_no_row_behind():
    """An admit of two domains' rows runs two prefill calls; the second one fails (a model fault, e.g.
    out of memory). Every row of the admit fails as a system error, and none stays in the running
    batch: before, the first call's rows kept decoding with no request behind them, and when they
    finished the worker's settle raised KeyError, which ended the worker thread (every later request
    waited forever)."""
    from rewardbox.errors import EndpointError

    model = tiny_model()
    policy = _tiny_policy(model)
    policy.prefix_cache = PrefixCache(min_tokens=16)
    policy._batch = policy._new_batch()
    gen = torch.Generator().manual_seed(2)
    domain_a = [3, 4, 5] + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    domain_b = [3, 4, 5] + [int(x) for x in torch.randint(6, 64, (40,), generator=gen)]
    prompts = [domain_a + [7, 8], domain_b + [9], domain_a + [10, 11, 12], domain_b + [13, 14]]
    with torch.inference_mode():  # both prefixes cached: the admit is two prefill calls
        for prompt in (domain_a + [1], domain_b + [1]):
            RunningBatch(model, [], PAD, "cpu", prefix_cache=policy.prefix_cache).decode_all(
                [RowSpec(prompt, 1, 0.0, 0)]
            )
    prefills = []

    def fail_the_second_prefill(_m, _a, kw):
        if kw["input_ids"].shape[1] > 1:
            prefills.append(tuple(kw["input_ids"].shape))
            if len(prefills) == 2:
                raise RuntimeError("out of memory")

    hook = model.register_forward_pre_hook(fail_the_second_prefill, with_kwargs=True)
    loop = asyncio.new_event_loop()
    try:
        pendings = [Pending(_request(i), None, loop.create_future(), loop, 0.0) for i in range(4)]
        for pending, prompt in zip(pendings, prompts):
            pending.prompt_ids = prompt
        with policy.generation_lock, torch.inference_mode():
            policy._admit(pendings)
        hook.remove()
        assert len(prefills) == 2 and len(policy._batch) == 0 and not policy._slots
        fresh = Pending(_request(9), None, loop.create_future(), loop, 0.0)
        policy._queue.put(fresh)
        policy._tick()  # the worker goes on serving
        while policy._slots or policy._waiting:
            policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
        for pending in pendings:
            with pytest.raises(EndpointError, match="out of memory"):
                pending.future.result()
        assert fresh.future.result().completion_token_ids
    finally:
        hook.remove()
        loop.close()


def test_fold_plan_folds_task_extensions_of_one_domain_and_keeps_domains_apart():
    from rewardbox.policy.decode import fold_plan

    domain_a, domain_b = tuple(range(100, 1100)), (1, 2, 3) + tuple(range(2000, 2996))
    task_1, task_2 = domain_a + tuple(range(50)), domain_a + tuple(range(60, 120))
    # two tasks' extensions, 4 rows each: 1,000 + 8 rows x 60 columns a step against 2,110
    assert fold_plan([(task_1, 4), (task_2, 4)], 8) == [1000, 1000]
    # but not in a batch of 80 rows, which the moved columns would pad: 1,000 + 80 x 60 > 2,110
    assert fold_plan([(task_1, 40), (task_2, 40)], 80) == [1050, 1060]
    # two domains (3 tokens in common) never fold, even at one row each (3 + 2 x 1,047 > 2,049)
    assert fold_plan([(task_1, 4), (domain_b, 4)], 8) == [1050, 999]
    assert fold_plan([(domain_a, 1), (domain_b, 1)], 2) == [1000, 999]
    # short prefixes sharing a few tokens: 3 + 2 x 200 < 406 would fold, but 3 tokens save nothing
    # for the rows that later join and are padded to the moved 200 columns
    short_a, short_b = domain_b[:203], (1, 2, 3) + tuple(range(500, 700))
    assert fold_plan([(short_a, 1), (short_b, 1)], 2) == [203, 203]
    # the same tokens fold whatever their length (nothing moves)
    assert fold_plan([(short_a[:10], 1), (short_a[:10], 2)], 3) == [10, 10]
    same = fold_plan([(domain_a, 3), (domain_a, 2)], 5)
    assert same == [1000, 1000]  # the same prefix: nothing moves
    # three prefixes of domain a: both extensions fold into it; domain b stays as it is
    mixed = fold_plan([(task_1, 2), (domain_b, 5), (domain_a, 1), (task_2, 2)], 10)
    assert mixed == [1000, 999, 1000, 1000]
    assert fold_plan([], 0) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_admits_of_domains_tasks_and_next_turns_keep_every_rows_tokens(seed):
    """Random traffic through one running batch with shared prefixes: rows of two domains and several
    tasks, next turns of finished rows (their episode KV), joining at random steps in random groups,
    budgets and temperatures mixed. Every row's tokens and sampler log-probs equal the same row
    decoded alone with SDPA and no cache (fp32), whatever the folds, rebases and trims did."""
    rng = random.Random(seed)
    model, reference = tiny_model(SHARED), tiny_model()
    domains = [_domain(10 + seed, n=70), _domain(20 + seed, n=40)]
    tasks = [
        d + [rng.randrange(6, 64) for _ in range(rng.randint(3, 9))]
        for d in domains
        for _ in (0, 1)
    ]
    cache = PrefixCache(min_tokens=16)
    batch = RunningBatch(model, [], PAD, "cpu", prefix_cache=cache)
    specs, done, slot_of, pending = [], {}, {}, []
    with torch.inference_mode():
        for domain in domains:  # each domain cached, as after a first turn
            RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(
                [RowSpec(domain + [1], 1, 0.0, 0)]
            )
        for step in range(40):
            if step < 30 and (step % 4 == 0 or rng.random() < 0.3):
                group = []
                for _ in range(rng.randint(1, 3)):
                    if pending and rng.random() < 0.5:  # a finished row's next turn
                        prompt = pending.pop(0) + [rng.randrange(6, 64) for _ in range(3)]
                    else:
                        prompt = rng.choice(tasks) + [rng.randrange(6, 64)]
                    specs.append(
                        RowSpec(
                            prompt,
                            rng.randint(2, 8),
                            rng.choice([0.0, 0.8]),
                            seed * 100 + len(specs),
                        )
                    )
                    group.append(len(specs) - 1)
                slots, finished = batch.admit([specs[i] for i in group])
                slot_of.update(zip(slots, group))
                for row in finished:
                    done[slot_of[row.slot]] = row
            for row in batch.step():
                done[slot_of[row.slot]] = row
                spec = specs[slot_of[row.slot]]
                pending.append(spec.prompt_ids + row.tokens)
        while batch.rows is not None:
            for row in batch.step():
                done[slot_of[row.slot]] = row
        alone = [RunningBatch(reference, [], PAD, "cpu").decode_all([spec])[0] for spec in specs]
    assert len(done) == len(specs) >= 8
    for i, spec in enumerate(specs):
        assert done[i].tokens == alone[i].tokens, (i, spec.prompt_ids[-6:])
        assert done[i].logprobs == pytest.approx(alone[i].logprobs, abs=1e-5), i
    assert cache.episodes.taken > 0  # next turns reused their episode's KV
