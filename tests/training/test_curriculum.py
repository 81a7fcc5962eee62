"""The GRPO curriculum: running Jeffreys posterior per task, draws by posterior variance, too_easy dropped."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.training.curriculum import PosteriorTaskSampler, format_histogram, posterior_variance

from .test_trainer import task


def rollouts(uid: str, passed: list[bool | None]) -> list[EpisodeResult]:
    return [
        EpisodeResult(
            uid=uid,
            trial=i,
            reward=None if p is None else float(p),
            passed=p,
            system_error="sandbox: died" if p is None else None,
        )
        for i, p in enumerate(passed)
    ]


def test_posterior_variance_hand_values():
    assert posterior_variance(0, 0) == pytest.approx(0.125)  # Beta(1/2, 1/2): 1/4 / (1 * 2)
    assert posterior_variance(4, 8) == pytest.approx(4.5 * 4.5 / (81 * 10))
    assert posterior_variance(8, 8) < posterior_variance(4, 8)


def test_too_easy_task_is_dropped_and_draws_follow_variance():
    sampler = PosteriorTaskSampler([task("easy"), task("mid"), task("hard")], seed=0)
    sampler.observe(task("easy"), rollouts("easy", [True] * 8))
    sampler.observe(task("mid"), rollouts("mid", [True, False] * 4))
    sampler.observe(task("hard"), rollouts("hard", [False] * 7 + [True]))
    assert sampler.band("easy") == "too_easy" and "easy" in sampler.dropped
    assert sampler.band_histogram()["too_easy"] == 1 and sum(sampler.band_histogram().values()) == 3
    draws = Counter()
    for _ in range(400):
        draws[next(sampler).uid] += 1
        sampler._drawn_since_observe.clear()
    assert draws["easy"] == 0
    ratio = posterior_variance(4, 8) / posterior_variance(1, 8)
    assert draws["mid"] / draws["hard"] == pytest.approx(ratio, rel=0.25)


def test_system_errors_do_not_count_and_the_last_task_stays():
    sampler = PosteriorTaskSampler([task("only")], seed=0)
    sampler.observe(
        task("only"), rollouts("only", [True, None, True, True, True, True, True, True, True])
    )
    assert sampler.counts["only"] == (8, 8)
    assert sampler.band("only") == "too_easy" and sampler.active() == ["only"]
    assert next(sampler).uid == "only"


def test_a_step_does_not_draw_the_same_task_twice_while_others_are_fresh():
    sampler = PosteriorTaskSampler([task(u) for u in "abc"], seed=1)
    assert len({next(sampler).uid for _ in range(3)}) == 3


def test_train_grpo_records_the_band_histogram_per_step():
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import train_grpo
    from tests.training.test_trainer import result, tiny_model

    config = GRPOConfig(
        group_size=2, tasks_per_step=1, steps=2, learning_rate=1e-2, max_refill_rounds=0
    )
    model = attach_lora(tiny_model(), config)

    async def attempt(t, trial):
        r = result(t.uid, trial, float(trial % 2))
        r.passed = bool(trial % 2)
        return r

    sampler = PosteriorTaskSampler([task("a"), task("b")], seed=0)
    summary = asyncio.run(train_grpo(model, 0, sampler, attempt, config))
    assert all(m.band_histogram.startswith("too_hard") for m in summary.steps)
    assert sum(n for _, n in sampler.counts.values()) == 4  # two groups of two observed
    assert format_histogram({"hard": 1, "easy": 2}) == "hard 1, easy 2"
