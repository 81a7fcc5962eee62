"""Smoke test: the real embedded model runs a full episode and one GRPO step changes its parameters."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.user_simulator import ScriptedUser
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.precision import has_bf16_units
from rewardbox.sandbox.inprocess import InProcessSandboxFactory
from rewardbox.tasks.sources import resolve_dataset
from rewardbox.tasks.thinkingbox import load_dataset
from rewardbox.training.checkpoint import attach_lora
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import Group
from rewardbox.training.trainer import group_samples, optimise_step

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "dtype",
    [
        "float32",
        pytest.param(
            "bfloat16",
            marks=pytest.mark.skipif(
                not has_bf16_units(), reason="no bf16 units on this CPU (auto stays float32 here)"
            ),
        ),
    ],
)
def test_real_model_episode_and_one_grpo_step(smollm2_checkpoint, dtype):
    from rewardbox.policy.local import LocalPolicy

    task = load_dataset(resolve_dataset("embedded:retail")).tasks[0]
    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        learning_rate=1e-3,
        micro_batch_sequences=2,
        temperature=0.7,
    )
    # the dtype pinned, whatever the host: a sampler-trainer gap under 1e-3 is an fp32 property; in bf16
    # (policy.dtype: bfloat16) GRPO divides by the trainer's own log-probs instead
    policy = LocalPolicy(smollm2_checkpoint, max_batch_size=2, seed=0, dtype=dtype)
    policy.model = attach_lora(policy.model, config)
    episode = EpisodeConfig(
        max_user_turns=1, max_agent_steps_per_user_turn=2, max_new_tokens=24, temperature=0.7
    )

    async def rollouts():
        with TestRunner(max_workers=1) as grader:
            runner = EpisodeRunner(
                policy, InProcessSandboxFactory(), ScriptedUser(), grader, episode
            )
            try:
                return await asyncio.gather(runner.run(task, 0), runner.run(task, 1))
            finally:
                await policy.aclose()

    results = asyncio.run(rollouts())
    for result in results:
        assert result.system_error is None, result.system_error
        assert result.turns >= 1 and result.reward in (0.0, 1.0)
        assert result.termination_reason in {
            "done",
            "user_limit",
            "agent_limit",
            "agent_error",
            "no_user_llm",
            "user_done",
        }
        turn = result.agent_turns[0]
        assert (
            turn.prompt_token_ids
            and turn.completion_token_ids
            and turn.input_tokens == len(turn.prompt_token_ids)
        )

    # one GRPO step on these real rollouts (advantages +1/-1 so the step has a signal whatever the rewards)
    from rewardbox.policy.guided import VocabularyIndex

    index = VocabularyIndex(policy.tokenizer, int(policy.model.config.vocab_size))
    samples = group_samples([Group(task, list(results), [1.0, -1.0])], guide_index=index)
    assert all(
        s.old_logprobs is not None and len(s.old_logprobs) == len(s.completion_ids) for s in samples
    )
    assert samples and all(len(s.prompt_ids) > 500 for s in samples)
    trainable = {
        n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad
    }
    frozen = {
        n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad
    }
    optimizer = torch.optim.AdamW(
        [p for p in policy.model.parameters() if p.requires_grad], lr=config.learning_rate
    )
    stats = optimise_step(policy.model, optimizer, samples, config, policy.pad_token_id)
    assert math.isfinite(stats.loss)
    if dtype == "float32":  # the trainer scored the distribution the runner's rollouts sampled
        assert stats.logprob_gap_max < 1e-3
    else:  # its own log-probs are the old ones: ratio exactly 1, the sampler's rounding only reported
        assert stats.ratio_mean == 1.0 and stats.clip_frac == 0.0
        assert 0.0 < stats.logprob_gap_max < 2.0
    params = dict(policy.model.named_parameters())
    assert any(not torch.equal(params[n], before) for n, before in trainable.items())
    assert all(torch.equal(params[n], before) for n, before in frozen.items())
