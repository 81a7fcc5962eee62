"""The shared-prefix KV cache gives exactly the tokens a plain left-padded batch gives."""

from __future__ import annotations

import torch

from rewardbox.policy.prefix_cache import PrefixCache, common_prefix_len
from tests.fixtures.tiny_models import tiny_llama


def tiny_model():
    return tiny_llama(max_position_embeddings=256).eval()


def left_pad(prompts, pad):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
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
        plain = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0
        )
    cache = PrefixCache(min_tokens=16)
    for attempt in range(2):  # a miss, then a hit on the same prefix
        inputs, width = cache.prepare(model, prompts, 0, torch.device("cpu"))
        with torch.inference_mode():
            cached = model.generate(**inputs, max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert torch.equal(plain[:, ids.shape[1] :], cached[:, width:]), attempt
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


def test_longest_cached_prefix_is_cropped_or_extended_and_tokens_stay_plain():
    """A lone prompt caches itself; a later prompt sharing only the domain prefix reuses a cropped copy
    (kept as its own entry); two rows sharing more than that extend it once. Tokens equal plain decoding."""
    model = tiny_model()
    domain = [
        int(x) for x in torch.randint(3, 64, (30,), generator=torch.Generator().manual_seed(3))
    ]
    lone, other = domain + [7, 8, 9, 10], domain + [11, 12]
    pair = [domain + [20, 21, 22, 23, 24, 5], domain + [20, 21, 22, 23, 24, 6, 7]]
    cache = PrefixCache(min_tokens=16)

    def tokens(prompts):
        inputs, width = cache.prepare(model, prompts, 0, torch.device("cpu"))
        prefix_len = inputs["cache"].get_seq_length()  # generate extends the batch's copy in place
        ids, mask = left_pad(prompts, pad=0)
        with torch.inference_mode():
            cached = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=0)[
                :, width:
            ]
            plain = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=6,
                do_sample=False,
                pad_token_id=0,
            )[:, ids.shape[1] :]
        assert torch.equal(cached, plain)
        return prefix_len

    assert (
        tokens([lone]) == len(lone) - 1 and cache.misses == 1
    )  # a lone prompt: all but its last token
    assert (
        tokens([other]) == len(domain) and cache.hits == 1
    )  # the shared part, cropped from that entry
    assert tuple(domain) in cache._entries
    assert tokens(pair) == len(domain) + 5 and cache.hits == 2  # extended once past the cached part
    assert tuple(pair[0][: len(domain) + 5]) in cache._entries and cache.misses == 1


def test_prefill_groups_split_rows_by_long_prefix_and_keep_short_ones_together():
    from rewardbox.policy.prefix_cache import prefill_groups

    a, b = [1, 2] + list(range(10, 60)), [1, 2] + list(range(100, 150))
    prompts = [a + [7], b + [8], a + [9, 9], b + [5], [3, 4]]
    nothing_cached = lambda _p: 0  # noqa: E731
    groups = prefill_groups(prompts, nothing_cached, min_tokens=16)
    assert sorted(groups) == groups and sorted(i for g in groups for i in g) == [0, 1, 2, 3, 4]
    assert [0, 2] in groups and [1, 3] in groups  # one call per long prefix
    # rows that share nothing worth caching and are short stay one call (a call costs call_tokens)
    assert prefill_groups([[1, 2], [3, 4, 5], [6]], nothing_cached, min_tokens=16) == [[0, 1, 2]]
    # one row, or none: one group
    assert prefill_groups([a], nothing_cached, min_tokens=16) == [[0]]
    assert prefill_groups([], nothing_cached, min_tokens=16) == [[]]


def test_prefill_groups_use_what_is_cached_for_a_lone_row():
    from rewardbox.policy.prefix_cache import prefill_groups

    a, b = list(range(10, 60)), list(range(100, 150))
    prompts = [a + [1], b + [2]]
    # both prefixes cached: two calls that prefill 1 token each beat one call of 51 columns per row
    cached = lambda p: 50  # noqa: E731
    assert prefill_groups(prompts, cached, min_tokens=16) == [[0], [1]]


def test_kept_entries_stay_within_the_byte_budget_and_batches_get_views_not_copies():
    model = tiny_model()
    # tiny Llama: 2 layers x (keys + values) x 2 KV heads x 8 head dim x 4 bytes = 256 bytes per token
    per_token = 2 * 2 * 2 * 8 * 4
    cache = PrefixCache(min_tokens=4, max_entries=10, max_bytes=int(2.5 * 40 * per_token))
    for start in range(5):  # five different 40-token prefixes, two rows each
        shared = [(start * 7 + i) % 60 + 2 for i in range(40)]
        inputs, _ = cache.prepare(model, [shared + [1], shared + [3]], 0, "cpu")
        assert cache.nbytes() <= cache.max_bytes
        assert len(cache._entries) <= 2
        kept = cache._entries[tuple(shared)]
        batch_keys = inputs["cache"].layers[0].keys
        assert batch_keys.shape[0] == 2
        assert (
            batch_keys.untyped_storage().data_ptr()
            == kept.layers[0].keys.untyped_storage().data_ptr()
        )
    assert cache.nbytes() == 2 * 40 * per_token
    lone = PrefixCache(min_tokens=4, max_bytes=10 * per_token)  # one entry is over the budget
    prepared = lone.prepare(model, [list(range(2, 42)) + [1], list(range(2, 42)) + [3]], 0, "cpu")
    assert prepared is not None and lone.nbytes() == 0


def test_a_full_cache_evicts_what_is_cheapest_to_compute_again():
    """Three domains' prefixes and one task's extension of the first, with room for three entries. Plain
    LRU evicted the least recently used domain prefix (all of it to compute again); now what goes is what
    costs least to redo: the domain prefix the extension still holds (a crop, nothing to compute)."""
    cache = PrefixCache(min_tokens=4, max_entries=3, max_bytes=None)
    a, b, c = list(range(10, 50)), list(range(100, 140)), list(range(200, 240))
    for key in (b, a, a + [1, 2, 3]):  # b least recently used: plain LRU evicted it
        cache._store(key, object())
    cache._store(c, object())
    assert set(cache._entries) == {tuple(a + [1, 2, 3]), tuple(b), tuple(c)}
    assert [cache.cached_len(p + [7]) for p in (a, b, c)] == [
        40,
        40,
        40,
    ]  # every domain still served
    # among entries that share nothing, the least recently used of the cheapest goes (b: 40 tokens to
    # redo, the older extension 43)
    cache._store(list(range(300, 340)), object())
    assert tuple(b) not in cache._entries and tuple(a + [1, 2, 3]) in cache._entries


def test_an_entry_over_the_byte_budget_is_used_once_and_evicts_nothing():
    """Two domain prefixes fit the budget; a third prefix alone is over it. It is used once and not
    kept, as the docs say, and the two kept prefixes stay: before, storing it evicted them first (the
    eviction loop ran until the budget held, the newcomer last), so one long prompt emptied the cache."""
    model = tiny_model()
    per_token = (
        2 * 2 * 2 * 8 * 4
    )  # tiny Llama: 2 layers x (keys + values) x 2 KV heads x 8 x 4 bytes
    cache = PrefixCache(min_tokens=4, max_entries=10, max_bytes=100 * per_token)
    a, b, long = list(range(2, 32)), list(range(32, 62)), [(i * 5) % 60 + 2 for i in range(120)]
    with torch.inference_mode():
        for shared in (a, b):
            cache.prepare(model, [shared + [1], shared + [3]], 0, "cpu")
        assert set(cache._entries) == {tuple(a), tuple(b)}
        prepared = cache.prepare(model, [long + [1], long + [3]], 0, "cpu")
    assert prepared is not None and prepared[0]["cache"].get_seq_length() == len(long)
    assert set(cache._entries) == {tuple(a), tuple(b)}
    assert cache.nbytes() <= cache.max_bytes
