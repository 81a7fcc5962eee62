"""The shared-prefix rows of the benchmarks: the campaign A/B's rows and the floor's decode way."""

from __future__ import annotations

import pytest
import torch

from benchmarks import floor, floor_model, precision
from rewardbox.policy.attention import NAME
from tests.fixtures.tiny_models import tiny_llama


def _result(wall, decode, prefill):
    return {
        "wall_s": wall,
        "decode_rows_per_s": decode,
        "prefill_columns_per_s": prefill,
        "outcomes": {},
        "first_turns": {},
    }


def test_setting_rows_pair_each_campaign_with_its_anchor_and_count_identical_tokens():
    runs = {
        "shared prefix": [_result(60.0, 90.0, 800.0), _result(66.0, 80.0, 700.0)],
        "a copy per row": [_result(80.0, 60.0, 750.0), _result(60.0, 64.0, 690.0)],
    }
    greedy = {"shared prefix": [[1, 2], [3], [5]], "a copy per row": [[1, 2], [4], [5]]}
    wall, decode, prefill, tokens = precision.setting_rows(runs, greedy, 18, 1, "t", "anchor")
    assert wall["value"] == pytest.approx(63.0) and wall["anchor"] == pytest.approx(70.0)
    assert "ratios 0.93" in wall["row"]  # the median of 0.75 and 1.1 (0.925), not 63 / 70 (0.9)
    assert "first_turns" not in wall["detail"]["shared prefix"][0]
    assert wall["detail"]["tasks"] == 18
    assert decode["value"] == pytest.approx(85.0) and decode["anchor"] == pytest.approx(62.0)
    assert prefill["value"] == pytest.approx(750.0) and prefill["anchor"] == pytest.approx(720.0)
    assert tokens["value"] == pytest.approx(2 / 3) and "(2 of 3)" in tokens["row"]


def test_the_floor_measures_a_shared_prefix_way_only_where_the_model_takes_one():
    ours, sdpa = tiny_llama(attn_implementation=NAME).eval(), tiny_llama().eval()
    assert floor_model._shared_tokens(ours, 1100) == 1100 - floor.OWN_TOKENS
    assert floor_model._shared_tokens(sdpa, 1100) == 0
    assert floor_model._shared_tokens(ours, floor.OWN_TOKENS) == 0
    ways = floor_model._decode_weights(None, 60)
    assert [(label, shared) for label, _, shared in ways] == [
        ("", 0),
        (", 60-token shared prefix", 60),
    ]
    assert [label for label, _, _ in floor_model._decode_weights(None)] == [""]
    tok_s = floor.decode_tok_s(ours, 3, 80, steps=3, repeats=1, shared_tokens=60)
    assert tok_s > 0
    with pytest.raises(ValueError, match="own"):
        floor.decode_tok_s(ours, 3, 80, steps=1, repeats=1, shared_tokens=80)


def test_the_floors_shared_prefix_rows_decode_as_rows_with_a_copy_each():
    """The timed way must compute what the per-row way does: the same greedy tokens from one context."""
    from rewardbox.policy.attention import SharedPrefix
    from rewardbox.policy.decode import advance, prefill
    from rewardbox.policy.prefix_cache import expanded

    model = tiny_llama(attn_implementation=NAME).eval()
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 64, (1, 30), generator=gen)
    ids = torch.cat([prefix.expand(2, -1), torch.randint(3, 64, (2, 5), generator=gen)], 1)
    tokens = {}
    with torch.inference_mode():
        source = model(input_ids=prefix, use_cache=True).cache
        for way in (None, SharedPrefix(tuple(prefix[0].tolist()), source)):
            rows, logits = prefill(
                model, ids, torch.ones_like(ids), expanded(source, 2), 45, [0, 1], way
            )
            out = []
            for _ in range(6):
                rows.last = logits[:, -1].argmax(-1)
                out.append(rows.last.tolist())
                logits = advance(model, rows)
            tokens[way is None] = out
    assert tokens[True] == tokens[False]
