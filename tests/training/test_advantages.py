"""GRPO advantages: issue #5 item 6 exact values, float32 zero variance, bound, masks, registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rewardbox.training import group_advantages
from rewardbox.training.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo_advantages,
    get_advantage_estimator,
    group_advantages_masked,
    is_zero_variance,
    max_abs_advantage,
)


def test_issue_values_one_winner_in_eight():
    advantages = group_advantages([0.35] * 7 + [0.95])
    assert len(advantages) == 8
    for value in advantages[:7]:
        assert value == pytest.approx(-0.3535534, abs=1e-6)
    assert advantages[7] == pytest.approx(2.4748737, abs=1e-6)
    # The lone winner sits exactly on the ddof=1 bound (G-1)/sqrt(G) = 7/sqrt(8).
    assert advantages[7] == pytest.approx(max_abs_advantage(8), abs=1e-6)


def test_float32_equal_rewards_are_exactly_zero_variance():
    rewards32 = torch.full((7,), 0.35, dtype=torch.float32)
    # The hazard: naive float32 statistics leave a non-zero spread estimate...
    assert rewards32.std().item() > 0.0
    naive = ((rewards32 - rewards32.mean()) / (rewards32.std() + 1e-6)).abs().max().item()
    assert naive > 1e-3
    # ...which the spread-based detection ignores: every advantage is exactly 0.
    for rewards in (rewards32, rewards32.numpy(), np.full(7, np.float32(0.35)), [0.35] * 7):
        assert is_zero_variance(rewards)
        assert group_advantages(rewards) == [0.0] * 7


def test_group_of_one_and_empty_group():
    assert group_advantages([0.7]) == [0.0]
    assert is_zero_variance([0.7])
    with pytest.raises(ValueError, match="at least one"):
        group_advantages([])


def test_own_case_one_success_in_four():
    # mean 0.25; sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5.
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx(
        [1.5, -0.5, -0.5, -0.5], abs=1e-7
    )
    assert dr_grpo_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_advantages_sum_to_zero_and_nonfinite_rewards_raise():
    assert sum(group_advantages([0.1, 0.9, 0.4, 0.4, 1.0])) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")])
    with pytest.raises(ValueError, match="eps"):
        group_advantages([1.0, 0.0], eps=-1.0)


@pytest.mark.parametrize("seed", range(5))
def test_bound_holds_on_random_groups(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        g = int(rng.integers(2, 33))
        if rng.random() < 0.5:
            rewards = rng.integers(0, 2, size=g).astype(float)  # binary rewards
        else:
            rewards = rng.random(g)
        advantages = np.array(group_advantages(rewards))
        assert np.all(np.abs(advantages) <= max_abs_advantage(g, ddof=1) + 1e-9)
        # The population-std version obeys sqrt(G - 1).
        if not is_zero_variance(rewards):
            population = (rewards - rewards.mean()) / rewards.std(ddof=0)
            assert np.all(np.abs(population) <= max_abs_advantage(g, ddof=0) + 1e-9)


def test_bound_formula():
    assert max_abs_advantage(8) == pytest.approx(7 / math.sqrt(8))
    assert max_abs_advantage(8, ddof=0) == pytest.approx(math.sqrt(7))
    assert max_abs_advantage(1) == 0.0
    with pytest.raises(ValueError):
        max_abs_advantage(0)


def test_masked_system_errors_get_zero_and_no_nan():
    rewards = [1.0, None, 0.0, float("nan"), 0.0, 1.0]
    mask = [True, False, True, False, True, True]
    advantages = group_advantages_masked(rewards, mask)
    assert not any(math.isnan(a) for a in advantages)
    assert advantages[1] == 0.0 and advantages[3] == 0.0
    expected = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert [advantages[i] for i in (0, 2, 4, 5)] == pytest.approx(expected)


def test_masked_degenerate_and_bad_input():
    assert group_advantages_masked([None, None], [False, False]) == [0.0, 0.0]
    assert group_advantages_masked([1.0, None], [True, False]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="marked valid"):
        group_advantages_masked([1.0, None], [True, True])
    with pytest.raises(ValueError, match="entries"):
        group_advantages_masked([1.0, 0.0], [True])
    assert group_advantages_masked([1.0, 0.0, None], [True, True, False], estimator="dr_grpo") == [
        0.5,
        -0.5,
        0.0,
    ]


def test_registry():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo"}
    assert get_advantage_estimator("grpo") is group_advantages
    with pytest.raises(ValueError, match="dr_grpo"):
        get_advantage_estimator("ppo")
    for fn in ADVANTAGE_ESTIMATORS.values():
        assert fn([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
