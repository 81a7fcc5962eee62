"""The precision benchmark's statistics: the exact McNemar test and token agreement."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from benchmarks.precision import agreement, mcnemar_exact


def test_mcnemar_counts_only_discordant_pairs_and_matches_scipys_binomial_test():
    fp32 = [True, True, True, False, False, True, False, True]
    bf16 = [True, False, False, False, True, True, False, False]
    result = mcnemar_exact(fp32, bf16)
    assert (result["only_first"], result["only_second"]) == (3, 1)
    assert result["first_rate"] == 5 / 8 and result["second_rate"] == 3 / 8
    assert result["p_value"] == pytest.approx(binomtest(1, 4, 0.5).pvalue)
    assert result["p_value"] == pytest.approx(0.625)


def test_mcnemar_without_discordant_pairs_is_p_one_and_rejects_unpaired_input():
    assert mcnemar_exact([True, False], [True, False])["p_value"] == 1.0
    with pytest.raises(ValueError, match="equal in length"):
        mcnemar_exact([True], [True, False])
    with pytest.raises(ValueError):
        mcnemar_exact([], [])


def test_agreement_counts_identical_completions_and_the_prefix_before_the_first_difference():
    result = agreement([[1, 2, 3, 4], [5, 6], [], [7]], [[1, 2, 9, 4], [5, 6], [], [7, 8]])
    assert result["n"] == 4 and result["identical"] == 2
    # 2/4, 2/2, empty pair 1.0, 1/2
    assert result["prefix_fraction"] == pytest.approx((0.5 + 1.0 + 1.0 + 0.5) / 4)
    with pytest.raises(ValueError):
        agreement([[1]], [[1], [2]])


def test_grpo_update_rows_time_each_dtype_alternated_and_report_the_median_ratio():
    from types import SimpleNamespace

    import torch

    from benchmarks import precision
    from tests.fixtures.tiny_models import tiny_llama

    fp32 = tiny_llama(max_position_embeddings=2048).eval()
    bf16 = tiny_llama(max_position_embeddings=2048).eval().to(torch.bfloat16)
    policies = {"float32": SimpleNamespace(model=fp32), "bfloat16": SimpleNamespace(model=bf16)}
    seconds = precision._grpo_update(policies)
    assert {d: len(v) for d, v in seconds.items()} == {"float32": 2, "bfloat16": 2}
    assert all(s > 0 for v in seconds.values() for s in v)
    # the models come back without adapters, in their own dtype
    assert not any("lora" in n for n, _ in fp32.named_parameters())
    assert next(bf16.parameters()).dtype == torch.bfloat16

    made = precision._update_row({"float32": [4.0, 5.0], "bfloat16": [3.0, 3.0]})
    assert made["value"] == 3.0 and made["anchor"] == 4.5
    assert "median 0.68" in made["row"]  # median of 3/4 and 3/5: 0.675
