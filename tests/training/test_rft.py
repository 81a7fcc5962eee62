"""The warm start (rejection-sampling fine-tuning): its data, its mask and its update on a tiny model."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from rewardbox.episode.trajectory import AgentTurn, EpisodeResult
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import Group
from rewardbox.training.logprobs import Sample
from rewardbox.training.rft import (
    kept_trajectories,
    mean_completion_logprob,
    nll_loss,
    rft_samples,
    rft_update,
    successful_probe_keys,
)
from rewardbox.training.rft_config import RFTConfig
from rewardbox.training.trainer import group_samples
from tests.training.test_trainer import task, tiny_model


def probe_rows(rows):
    """Probe rows ``(uid, trial, passed, system_error, truncated_turns)``."""
    return pl.DataFrame(
        [
            {
                "uid": uid,
                "trial": trial,
                "passed": passed,
                "reward": None if error else float(bool(passed)),
                "system_error": error,
                "truncated_turns": cut,
            }
            for uid, trial, passed, error, cut in rows
        ],
        schema={
            "uid": pl.Utf8,
            "trial": pl.Int64,
            "passed": pl.Boolean,
            "reward": pl.Float64,
            "system_error": pl.Utf8,
            "truncated_turns": pl.Int64,
        },
    )


def test_only_clean_successes_of_pool_tasks_are_picked_capped_per_task():
    rows = probe_rows(
        [
            ("pool:a", 3, True, None, 0),
            ("pool:a", 0, True, None, 0),
            ("pool:a", 1, False, None, 0),  # failed
            ("pool:a", 2, True, None, 0),
            ("pool:b", 0, None, "sandbox: died", 0),  # system error
            ("pool:b", 1, True, None, 1),  # passed with a cut completion
            ("pool:b", 2, True, None, 0),
            ("bench:x", 0, True, None, 0),  # not in the pool (a benchmark task)
            ("dropped:y", 0, True, None, 0),  # a candidate the selection dropped
        ]
    )
    pool = [task("pool:a"), task("pool:b")]
    assert successful_probe_keys(rows, pool, 2) == [("pool:a", 0), ("pool:a", 2), ("pool:b", 2)]
    assert successful_probe_keys(rows, pool, 1) == [("pool:a", 0), ("pool:b", 2)]
    assert successful_probe_keys(rows, [], 3) == []
    with pytest.raises(ValueError, match="max_per_task"):
        successful_probe_keys(rows, pool, 0)
    with pytest.raises(ValueError, match="passed"):
        successful_probe_keys(rows.drop("passed"), pool, 1)


def episode(uid, trial, *, passed=True, error=None, cut=False, turns=((10, 11, 12), (13, 14))):
    agent = [
        AgentTurn(
            raw_text="x",
            finish_reason="length" if cut and i == 0 else "stop",
            input_tokens=3,
            output_tokens=len(completion),
            prompt_token_ids=[1, 2, 3, *range(20, 20 + i)],
            completion_token_ids=list(completion),
        )
        for i, completion in enumerate(turns)
    ]
    return EpisodeResult(
        uid=uid,
        trial=trial,
        reward=None if error else float(passed),
        passed=None if error else passed,
        system_error=error,
        agent_turns=agent,
    )


def test_replays_that_failed_errored_or_were_cut_are_rejected_and_benchmark_tasks_never_enter():
    pool = [task("pool:a")]
    results = [
        episode("pool:a", 0),
        episode("pool:a", 1, passed=False),
        episode("pool:a", 2, error="sandbox: died"),
        episode("pool:a", 3, cut=True),
        episode("bench:x", 0),
    ]
    assert [(r.uid, r.trial) for r in kept_trajectories(results, pool)] == [("pool:a", 0)]
    samples = rft_samples(results, pool)
    assert [s.completion_ids for s in samples] == [[10, 11, 12], [13, 14]]


def test_samples_are_grpos_own_samples_token_for_token():
    """The warm start's samples are what GRPO's sample builder makes of the same rollouts."""
    pool = [task("pool:a"), task("pool:b")]
    results = [episode("pool:a", 0), episode("pool:b", 4, turns=((7,), (8, 9), (5,)))]
    ours = rft_samples(results, pool)
    grpo = group_samples([Group(t, [r], [1.0]) for t, r in zip(pool, results)])
    assert [(s.prompt_ids, s.completion_ids) for s in ours] == [
        (s.prompt_ids, s.completion_ids) for s in grpo
    ]
    assert len(ours) == 5


def test_nll_counts_only_masked_completion_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -50.0], [-3.0, float("-inf"), float("nan")]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert nll_loss(logprobs, mask, 3).item() == pytest.approx(2.0)


def grpo_config(**kw):
    return GRPOConfig(
        group_size=2, tasks_per_step=1, steps=1, micro_batch_sequences=2, lora_r=4, **kw
    )


def lora_model():
    from rewardbox.training.checkpoint import attach_lora

    return attach_lora(tiny_model(), grpo_config())


def test_prompt_tokens_never_enter_the_loss():
    """Changing every prompt token's target cannot change the loss: only completion tokens are scored.
    A loss that scored prompt tokens would move when the prompt's later tokens change."""
    from rewardbox.training.shared_prefix import scored_micro_batches

    model = lora_model()

    def loss_of(samples):
        total = sum(len(s.completion_ids) for s in samples)
        return sum(
            float(nll_loss(lp, mask, total).detach())
            for _, lp, mask in scored_micro_batches(model, samples, 0, 1.0, 2)
        )

    a = [Sample([1, 2, 3, 4], [5, 6], 1.0)]
    b = [Sample([9, 9, 9, 4], [5, 6], 1.0)]  # same last prompt token, other prompt tokens
    c = [Sample([1, 2, 3, 4], [5, 7], 1.0)]  # another completion token
    assert loss_of(a) != loss_of(c)
    # the loss is the completion's NLL given the prompt: equal to scoring the completion alone
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6]])).logits[0]
    manual = -torch.log_softmax(logits, -1)[[3, 4], [5, 6]].mean().item()
    assert loss_of(a) == pytest.approx(manual, abs=1e-5)
    assert loss_of(b) != pytest.approx(manual, abs=1e-6)  # the prompt conditions, never scored


def test_rft_raises_the_logprob_of_its_completions_and_trains_only_lora():
    model = lora_model()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    samples = [
        Sample([1, 2, 3], [4, 5, 6], 1.0),
        Sample([1, 2, 3, 7], [8, 9], 1.0),
        Sample([3, 2], [10, 11, 12, 13], 1.0),
    ]
    before = mean_completion_logprob(model, samples, 0)
    summary = rft_update(
        model, samples, RFTConfig(epochs=20, learning_rate=5e-2, batch_samples=2), grpo_config(), 0
    )
    after = mean_completion_logprob(model, samples, 0)
    assert summary.logprob_before == pytest.approx(before)
    assert summary.logprob_after == pytest.approx(after)
    assert after > before + 0.1
    assert summary.samples == 3 and summary.tokens == 9 and len(summary.epoch_nll) == 20
    assert summary.epoch_nll[-1] < summary.epoch_nll[0]
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)


def test_rft_update_depends_on_the_samples_and_seed_not_their_arrival_order():
    """Replays finish in any order (episodes run concurrently); the seeded shuffle started from that
    order, so one seed gave different updates for the same samples."""
    samples = [
        Sample([1, 2, 3], [4, 5, 6], 1.0),
        Sample([1, 2, 3, 7], [8, 9], 1.0),
        Sample([3, 2], [10, 11, 12, 13], 1.0),
        Sample([5], [6, 7], 1.0),
    ]
    config = RFTConfig(epochs=3, learning_rate=5e-2, batch_samples=2)
    runs = []
    for order in (samples, samples[::-1], samples[2:] + samples[:2]):
        model = lora_model()
        runs.append((rft_update(model, list(order), config, grpo_config(), 0), model))
    first, model = runs[0]
    for summary, other in runs[1:]:
        assert summary.epoch_nll == first.epoch_nll and summary.logprob_after == first.logprob_after
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


def test_rft_without_samples_changes_nothing():
    model = lora_model()
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    summary = rft_update(model, [], RFTConfig(), grpo_config(), 0)
    assert summary.samples == 0 and summary.logprob_before is None and summary.epoch_nll == []
    assert all(torch.equal(p, state[n]) for n, p in model.named_parameters())


def test_grpo_continues_the_warm_start_adapter(tmp_path):
    """``trainable(..., init_adapter)`` loads the saved warm-start adapter trainable: same weights."""
    from rewardbox.training.checkpoint import save_adapter, trainable

    model = lora_model()
    rft_update(
        model, [Sample([1, 2], [3, 4], 1.0)], RFTConfig(learning_rate=5e-2), grpo_config(), 0
    )
    save_adapter(model, tmp_path / "rft")
    resumed = trainable(tiny_model(), grpo_config(), tmp_path / "rft")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, resumed(input_ids=ids).logits)
    assert any(p.requires_grad for n, p in resumed.named_parameters() if "lora_" in n)
    with pytest.raises(FileNotFoundError):
        trainable(tiny_model(), grpo_config(), tmp_path / "missing")
    with pytest.raises(ValueError, match="lora"):
        trainable(tiny_model(), grpo_config(finetune="full"), tmp_path / "rft")
