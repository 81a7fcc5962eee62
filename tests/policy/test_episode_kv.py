"""Each episode's own KV kept from one turn to the next (``rewardbox.policy.episode_kv``), on a tiny
real Llama built from a config (random weights, no download).

A second turn whose prompt starts with the first turn's prompt and completion must prefill only the
new tokens and give the tokens (and sampler log-probs) it gives without the reuse; KV from before a
weight change is never reused; the store stays within its byte budget.
"""

from __future__ import annotations

import pytest

from tests.fixtures.tiny_models import tiny_llama

IMPLEMENTATIONS = pytest.mark.parametrize(
    "implementation", [None, "rewardbox_cpu_decode"], ids=["sdpa", "shared-prefix"]
)

torch = pytest.importorskip("torch")

from rewardbox.policy.episode_kv import EpisodeEntry, EpisodeKV  # noqa: E402
from rewardbox.policy.prefix_cache import PrefixCache  # noqa: E402
from rewardbox.policy.running import RowSpec, RunningBatch  # noqa: E402

PAD = 0


def _tokens(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [int(x) for x in torch.randint(3, 64, (n,), generator=gen)]


DOMAIN, QUERY, TOOL = _tokens(40, 1), _tokens(12, 2), _tokens(5, 3)


def _warm(model, cache: PrefixCache) -> None:
    """The domain prefix cached, as after the domain's first request."""
    with torch.inference_mode():
        RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(
            [RowSpec(DOMAIN + [1], 1, 0.0, 0)]
        )


def _decode(model, cache, specs: list[RowSpec]) -> tuple[list, list[tuple[int, int]]]:
    """The finished rows of ``specs`` decoded together, and every forward call's input shape."""
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        with torch.inference_mode():
            done = RunningBatch(model, [], PAD, "cpu", prefix_cache=cache).decode_all(specs)
    finally:
        hook.remove()
    return done, widths


def _plain(model, spec: RowSpec):
    with torch.inference_mode():
        return RunningBatch(model, [], PAD, "cpu").decode_all([spec])[0]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
@IMPLEMENTATIONS
def test_a_second_turn_reuses_its_first_turns_kv_and_prefills_only_the_new_tokens(
    temperature, implementation
):
    """Issue #28's kind: turn k prefilled the query and turns 1..k-1 again (only the domain prefix
    came from the cache): 27 columns here where 6 are new (the last completion token, never fed, and
    the tool result)."""
    model = tiny_llama(attn_implementation=implementation).eval()
    cache = PrefixCache(min_tokens=16)
    _warm(model, cache)
    turn1 = RowSpec(DOMAIN + QUERY, 10, temperature, 7)
    first, _ = _decode(model, cache, [turn1])
    assert first[0].tokens == _plain(model, turn1).tokens
    turn2 = RowSpec(DOMAIN + QUERY + first[0].tokens + TOOL, 8, temperature, 8)
    done, widths = _decode(model, cache, [turn2])
    alone = _plain(model, turn2)
    assert done[0].tokens == alone.tokens
    assert done[0].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert widths[0] == (1, 1 + len(TOOL))  # the prefill call: new tokens only
    assert done[0].cached_tokens == len(DOMAIN + QUERY) + len(first[0].tokens) - 1
    # used once: the kept entry now is turn 2's (prompt + completion but its last token)
    keys = set(cache.episodes._entries)
    assert tuple(turn1.prompt_ids + first[0].tokens[:-1]) not in keys
    assert tuple(turn2.prompt_ids + done[0].tokens[:-1]) in keys and cache.episodes.taken == 1


@IMPLEMENTATIONS
def test_a_third_turn_reuses_the_second_and_the_entry_keeps_one_copy_of_the_domain_prefix(
    implementation,
):
    model = tiny_llama(attn_implementation=implementation).eval()
    cache = PrefixCache(min_tokens=16)
    _warm(model, cache)
    prompt = DOMAIN + QUERY
    for turn in range(3):
        done, widths = _decode(model, cache, [RowSpec(prompt, 6, 0.0, turn)])
        assert done[0].tokens == _plain(model, RowSpec(prompt, 6, 0.0, turn)).tokens
        if turn:
            assert widths[0] == (1, 1 + len(TOOL))
        prompt = prompt + done[0].tokens + TOOL
    entry = list(cache.episodes._entries.values())[-1]  # the newest: turn 3's
    assert entry.base_len == len(DOMAIN) and entry.base is next(iter(cache._entries.values()))
    # own columns only: the domain prefix's 40 columns stay in the prefix cache's entry
    assert entry.suffix[0][0].shape[2] == len(prompt) - len(TOOL) - 1 - len(DOMAIN)
    assert cache.episodes.nbytes(shared=list(cache._entries.values())) < cache.episodes.nbytes()


@IMPLEMENTATIONS
def test_rows_with_different_cached_lengths_admitted_together_each_reuse_their_own(implementation):
    """A second turn (its episode's KV kept) and a first turn of the same domain join in one admit:
    each is its own prefill call, of its new tokens only; one call would pad both to the domain
    prefix's suffix (2 x 47 columns)."""
    model = tiny_llama(attn_implementation=implementation).eval()
    cache = PrefixCache(min_tokens=16)
    _warm(model, cache)
    first, _ = _decode(model, cache, [RowSpec(DOMAIN + QUERY, 30, 0.0, 1)])
    specs = [
        RowSpec(DOMAIN + QUERY + first[0].tokens + TOOL, 6, 0.0, 2),
        RowSpec(DOMAIN + _tokens(12, 9), 6, 0.0, 3),
    ]
    done, widths = _decode(model, cache, specs)
    assert [row.tokens for row in done] == [_plain(model, spec).tokens for spec in specs]
    assert sorted(w for w in widths if w[1] > 1) == [(1, 1 + len(TOOL)), (1, 12)]


@IMPLEMENTATIONS
def test_kv_from_before_a_weight_change_is_never_reused(implementation):
    model = tiny_llama(attn_implementation=implementation).eval()
    cache = PrefixCache(min_tokens=16)
    _warm(model, cache)
    first, _ = _decode(model, cache, [RowSpec(DOMAIN + QUERY, 10, 0.0, 1)])
    cache.invalidate()  # LocalPolicy.weights_changed: a training step, a merge or unmerge
    assert len(cache.episodes) == 0
    turn2 = RowSpec(DOMAIN + QUERY + first[0].tokens + TOOL, 4, 0.0, 2)
    done, widths = _decode(model, cache, [turn2])
    assert done[0].cached_tokens == 0 or widths[0][1] > 1 + len(TOOL)
    # a row admitted before the change that finishes after it keeps nothing
    stale = PrefixCache(min_tokens=16)
    _warm(model, stale)
    kept = len(stale.episodes)
    with torch.inference_mode():
        batch = RunningBatch(model, [], PAD, "cpu", prefix_cache=stale)
        batch.admit([RowSpec(DOMAIN + QUERY, 5, 0.0, 1)])
        batch.step()
        stale.invalidate()
        while len(batch):
            batch.step()
    assert kept == 1 and len(stale.episodes) == 0


def test_a_sliding_window_model_keeps_no_episode_kv():
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
        sliding_window=256,
        max_window_layers=0,
    )
    model = Qwen2ForCausalLM(config).eval()
    cache = PrefixCache(min_tokens=16)
    spec = RowSpec(DOMAIN + QUERY, 6, 0.0, 1)
    done, _ = _decode(model, cache, [spec])
    assert done[0].tokens == _plain(model, spec).tokens
    assert len(cache.episodes) == 0


def _entry(columns: int, base=None, base_len: int = 0) -> EpisodeEntry:
    pair = (torch.zeros(1, 2, columns, 4), torch.zeros(1, 2, columns, 4))
    return EpisodeEntry(base, base_len, [pair, (pair[0].clone(), pair[1].clone())])


def test_the_store_keeps_within_its_byte_budget_oldest_first_and_over_budget_entries_stay_out():
    per_column = 2 * 2 * 2 * 4 * 4  # layers x (keys, values) x heads x dim x 4 bytes
    store = EpisodeKV(max_bytes=100 * per_column, max_entries=8)
    for i in range(5):
        store.keep([i] * 30, _entry(30), store.generation)
        assert store.nbytes() <= 100 * per_column
    assert len(store) == 3 and store.evicted == 2
    assert store.match([4] * 30) == 30 and store.match([0] * 30) == 0  # the oldest went
    store.keep([9] * 200, _entry(200), store.generation)  # over the budget by itself
    assert len(store) == 3 and store.match([9] * 200) == 0
    store.keep([7] * 10, _entry(10), store.generation - 1)  # computed before a clear
    assert store.match([7] * 10) == 0
    assert store.take([4] * 30 + [5], at_least=30) is None  # must hold more than the prefix entry
    assert store.take([4] * 30 + [5], at_least=16)[0] == 30 and len(store) == 2
