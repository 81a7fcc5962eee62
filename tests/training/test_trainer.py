"""GRPO glue: group filtering/refill, sample building, one optimiser step on a tiny real model."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from rewardbox.episode.trajectory import AgentTurn, EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import classify_group, collect_groups, task_stream
from rewardbox.training.trainer import (
    Sample,
    completion_logprobs,
    group_samples,
    optimise_step,
    train_grpo,
)


def task(uid: str) -> Task:
    return Task(
        uid=uid,
        dataset="d",
        scenario="s",
        agent="a",
        query=uid,
        user_context="",
        init={},
        world_state={},
        tools=(),
        system_instructions="",
        bot_instructions="",
        test_code="",
        test_name="t",
        test_file="f.py",
    )


def result(uid, trial, reward, system_error=None, ids=True):
    turn = AgentTurn(
        raw_text="x",
        finish_reason="stop",
        input_tokens=3,
        output_tokens=2,
        prompt_token_ids=[1, 2, 3] if ids else None,
        completion_token_ids=[4, 5] if ids else None,
    )
    return EpisodeResult(
        uid=uid, trial=trial, reward=reward, system_error=system_error, agent_turns=[turn]
    )


def test_classify_group():
    assert classify_group([result("a", 0, 1.0), result("a", 1, 1.0)]) == "zero_variance"
    assert classify_group([result("a", 0, 1.0), result("a", 1, 0.0)]) == "ok"
    assert (
        classify_group([result("a", 0, 1.0), result("a", 1, None, "sandbox: died")])
        == "system_error"
    )


def test_collect_groups_replaces_zero_variance_and_system_error_groups():
    # task "flat" always 0, "broken" always a system error, "good*" alternate 0/1
    async def attempt(t: Task, trial: int) -> EpisodeResult:
        if t.uid == "flat":
            return result(t.uid, trial, 0.0)
        if t.uid == "broken":
            return result(t.uid, trial, None, "sandbox: died")
        return result(t.uid, trial, float(trial % 2))

    stream = iter([task("flat"), task("broken"), task("good1"), task("good2"), task("good3")])
    groups, stats = asyncio.run(
        collect_groups(stream, attempt, group_size=4, groups_wanted=2, max_refill_rounds=2)
    )
    assert [g.task.uid for g in groups] == ["good1", "good2"]
    assert (stats.drawn, stats.zero_variance, stats.system_error) == (4, 1, 1)
    assert stats.zero_variance_frac == pytest.approx(0.25)
    # the mean reward counts every scored rollout drawn, not only the kept groups
    assert stats.mean_reward == pytest.approx((0 * 4 + 2 + 2) / 12)
    for g in groups:
        assert len(g.advantages) == 4 and sum(g.advantages) == pytest.approx(0.0, abs=1e-6)


def test_collect_groups_gives_up_after_refill_rounds():
    async def attempt(t, trial):
        return result(t.uid, trial, 1.0)

    groups, stats = asyncio.run(
        collect_groups(
            task_stream([task("a")], 0), attempt, group_size=2, groups_wanted=1, max_refill_rounds=1
        )
    )
    assert groups == [] and stats.drawn == 2


def test_empty_pool_is_a_clear_error():
    with pytest.raises(ValueError, match="pool is empty"):
        next(task_stream([], 0))


def test_group_samples_skip_zero_advantage_and_missing_ids():
    from rewardbox.training.groups import Group

    g = Group(
        task("a"),
        [result("a", 0, 1.0), result("a", 1, 0.0), result("a", 2, 0.5, ids=False)],
        [1.0, -1.0, 0.0],
    )
    samples = group_samples([g])
    assert [(s.advantage, s.completion_ids) for s in samples] == [(1.0, [4, 5]), (-1.0, [4, 5])]


@pytest.mark.parametrize("logprobs", [[-0.1, -0.2, -0.3], [-0.1]])
def test_issue24_item5_a_logprob_length_mismatch_raises_naming_uid_trial_turn_and_both_lengths(
    logprobs,
):
    from rewardbox.errors import LogprobLengthError
    from rewardbox.training.groups import Group

    ok, bad = result("retail:t1", 0, 1.0), result("retail:t1", 5, 0.0)
    ok.agent_turns[0].completion_logprobs = [-0.1, -0.2]
    bad.agent_turns.append(
        AgentTurn(
            raw_text="y",
            finish_reason="length",
            input_tokens=5,
            output_tokens=2,
            prompt_token_ids=[1, 2, 3, 4, 5],
            completion_token_ids=[6, 7],
            completion_logprobs=logprobs,
        )
    )
    with pytest.raises(LogprobLengthError) as info:
        group_samples([Group(task("retail:t1"), [ok, bad], [1.0, -1.0])])
    err = info.value
    assert (err.uid, err.trial, err.turn, err.tokens, err.logprobs) == (
        "retail:t1",
        5,
        1,
        2,
        len(logprobs),
    )
    assert f"retail:t1 trial 5 turn 1: {len(logprobs)} log-probs for 2 tokens" in str(err)


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


def test_completion_logprobs_match_manual_forward():
    model = tiny_model()
    batch = [Sample([1, 2, 3], [4, 5], 1.0), Sample([1, 2], [6, 7, 8], -1.0)]
    logprobs, mask = completion_logprobs(model, batch, pad_id=0)
    assert logprobs.shape == (2, 3) and mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 6, 7, 8]])).logits[0]
    expected = torch.log_softmax(logits, -1)[[1, 2, 3], [6, 7, 8]]
    assert torch.allclose(logprobs[1].detach(), expected, atol=1e-5)


def test_optimise_step_changes_only_trainable_parameters():
    from rewardbox.training.checkpoint import attach_lora

    config = GRPOConfig(
        group_size=2, tasks_per_step=1, steps=1, learning_rate=1e-2, micro_batch_sequences=1
    )
    model = attach_lora(tiny_model(), config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    samples = [Sample([1, 2, 3], [4, 5], 1.0), Sample([1, 2, 3], [6, 7], -1.0)]
    stats = optimise_step(
        model,
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2),
        samples,
        config,
        pad_id=0,
    )
    assert math.isfinite(stats.loss) and stats.logprob_gap_max is None  # no sampler log-probs given
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)


def test_train_grpo_runs_steps_and_logs_metrics():
    from rewardbox.training.checkpoint import attach_lora

    config = GRPOConfig(
        group_size=2, tasks_per_step=1, steps=2, learning_rate=1e-2, max_refill_rounds=0
    )
    model = attach_lora(tiny_model(), config)

    async def attempt(t, trial):
        return result(t.uid, trial, float(trial % 2))

    summary = asyncio.run(train_grpo(model, 0, task_stream([task("a")], 0), attempt, config))
    assert [m.step for m in summary.steps] == [0, 1]
    assert all(
        m.loss is not None and m.samples == 2 and m.mean_reward == 0.5 for m in summary.steps
    )
    assert all(0 < m.update_s < m.duration_s for m in summary.steps)  # the update's own seconds


def test_the_update_returns_freed_heap_before_and_after_it(monkeypatch):
    """The rollouts' freed blocks go back to the system before the update (its peak stands on what
    is live, not on glibc's leftovers) and the update's own after it."""
    from rewardbox.training import trainer
    from rewardbox.training.checkpoint import attach_lora

    config = GRPOConfig(group_size=2, tasks_per_step=1, steps=1, learning_rate=1e-2)
    model = attach_lora(tiny_model(), config)
    events: list[str] = []
    step = trainer.optimise_step
    monkeypatch.setattr(trainer, "release_freed_memory", lambda: events.append("release"))
    monkeypatch.setattr(
        trainer, "optimise_step", lambda *a, **k: events.append("update") or step(*a, **k)
    )
    samples = [Sample([1, 2, 3], [4, 5], 1.0), Sample([1, 2, 3], [6, 7], -1.0)]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    assert trainer._optimise_epochs(model, optimizer, samples, config, 0) is not None
    assert events == ["release", "update", "release"]


def test_empty_pool_saves_an_untrained_adapter(tmp_path):
    """An empty pool is reported, not a crash: zero steps and a LoRA whose merge equals the base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rewardbox.config.profile import load_profile
    from rewardbox.runtime.train import rollout_parts
    from rewardbox.training.local import train_local_grpo

    base = tmp_path / "base"
    tiny_model().save_pretrained(base)
    profile = load_profile("test")
    adapter, summary = train_local_grpo(
        [], base, tmp_path / "adapter", profile.grpo, rollout_parts(profile)
    )
    assert summary.steps == [] and (adapter / "adapter_config.json").exists()
    merged = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base), adapter
    ).merge_and_unload()
    original = AutoModelForCausalLM.from_pretrained(base)
    assert all(
        torch.equal(a, b)
        for a, b in zip(merged.state_dict().values(), original.state_dict().values())
    )


def test_rerun_refill_reruns_only_failed_rollouts_and_masks_the_rest():
    calls: list[tuple[str, int]] = []

    async def attempt(t, trial):
        calls.append((t.uid, trial))
        tries = calls.count((t.uid, trial))
        if trial == 1 and tries == 1:
            return result(t.uid, trial, None, "sandbox: died once")  # recovers when re-run
        if trial == 2:
            return result(t.uid, trial, None, "sandbox: always dies")
        return result(t.uid, trial, float(trial % 2))

    groups, stats = asyncio.run(
        collect_groups(
            iter([task("a")]),
            attempt,
            group_size=4,
            groups_wanted=1,
            max_refill_rounds=0,
            system_error_refill="rerun",
            max_system_error_reruns=2,
        )
    )
    assert len(groups) == 1 and stats.system_error == 0
    assert sorted(calls) == [("a", 0), ("a", 1), ("a", 1), ("a", 2), ("a", 2), ("a", 2), ("a", 3)]
    assert (stats.reruns, stats.masked_system_errors, stats.episodes) == (3, 1, 7)
    adv = groups[0].advantages
    # clean rewards [0, 1, -, 1]: grpo advantages over the three clean ones, 0 for the masked one
    assert adv[2] == 0.0 and adv[0] == pytest.approx(
        -(2 / 3) / (1 / 3) ** 0.5, rel=1e-6
    )  # mean 2/3, sample std sqrt(1/3)
    assert adv[1] == adv[3] and sum(adv) == pytest.approx(0.0, abs=1e-9)


def test_replace_refill_still_drops_the_group():
    async def attempt(t, trial):
        return (
            result(t.uid, trial, None, "x: y")
            if trial == 0
            else result(t.uid, trial, float(trial % 2))
        )

    groups, stats = asyncio.run(
        collect_groups(
            iter([task("a")]),
            attempt,
            group_size=3,
            groups_wanted=1,
            max_refill_rounds=0,
            system_error_refill="replace",
        )
    )
    assert groups == [] and stats.system_error == 1


def test_mask_truncated_drops_rollouts_cut_by_the_budget():
    from rewardbox.training.groups import Group

    cut = result("a", 1, 0.0)
    cut.agent_turns[0].finish_reason = "length"
    g = Group(task("a"), [result("a", 0, 1.0), cut], [1.0, -1.0])
    assert len(group_samples([g])) == 2
    assert [s.advantage for s in group_samples([g], mask_truncated=True)] == [1.0]


def _lora_with_sampler_logprobs(config: GRPOConfig, shift: float = 0.0, nonzero_adapter=False):
    """A LoRA tiny model and two samples whose sampler log-probs are the model's own (at
    ``config.temperature``) minus ``shift``; ``nonzero_adapter`` draws B so A gets gradients too."""
    from rewardbox.training.checkpoint import attach_lora

    model = attach_lora(tiny_model(), config)
    if nonzero_adapter:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    samples = [Sample([1, 2, 3], [4, 5], 1.0), Sample([1, 2], [6, 7, 8], -1.0)]
    with torch.no_grad():
        exact, _ = completion_logprobs(model, samples, pad_id=0, temperature=config.temperature)
    for i, s in enumerate(samples):
        s.old_logprobs = (exact[i, : len(s.completion_ids)] - shift).tolist()
    return model, samples


def test_sampler_logprobs_are_old_logprobs_and_the_gap_is_reported():
    """Sampler log-probs equal to the model's give gap ~0 and ratio 1; shifted ones show the gap and clip."""
    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        learning_rate=1e-2,
        micro_batch_sequences=2,
        temperature=0.7,
    )
    model, samples = _lora_with_sampler_logprobs(config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    stats = optimise_step(model, optimizer, samples, config, pad_id=0)
    assert stats.logprob_gap_max < 1e-5 and stats.ratio_mean == pytest.approx(1.0, abs=1e-5)
    assert stats.clip_frac == 0.0
    for s in samples:
        s.old_logprobs = [x - 0.5 for x in s.old_logprobs]  # the sampler thought them less likely
    shifted = optimise_step(model, optimizer, samples, config, pad_id=0)
    assert shifted.logprob_gap_max > 0.4 and shifted.clip_frac > 0.0


def _trainer_mode_grads(shift: float, source: str = "trainer", cap: float | None = 2.0):
    """LoRA gradients of one step whose sampler log-probs are the model's own minus ``shift``
    (lr 0 and no grad clipping, so the weights stay and the gradient is the loss's)."""
    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        micro_batch_sequences=2,
        temperature=0.7,
        old_logprobs=source,
        sampler_is_cap=cap,
        max_grad_norm=1e9,
    )
    model, samples = _lora_with_sampler_logprobs(config, shift, nonzero_adapter=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=0.0)
    stats = optimise_step(model, optimizer, samples, config, pad_id=0)
    return torch.cat([p.grad.flatten() for p in trainable]), stats, samples


def test_trainer_logprobs_as_old_ones_give_ratio_one_and_weigh_tokens_by_the_truncated_sampler_ratio():
    """``old_logprobs: trainer`` (bf16's default): the ratio is the trainer's against itself (exactly
    1 at the first epoch, nothing clips however far the sampler was off), the sampler's difference is
    still reported as the gap, and each token's loss is weighted by min(exp(trainer - sampler), cap)."""
    exact_grad, exact, _ = _trainer_mode_grads(0.0)
    sampler_grad, _, _ = _trainer_mode_grads(0.0, source="sampler")
    assert torch.allclose(exact_grad, sampler_grad, atol=1e-7)  # same thing when they agree
    assert exact.ratio_mean == 1.0 and exact.clip_frac == 0.0 and exact.logprob_gap_max < 1e-5

    half_grad, half, samples = _trainer_mode_grads(0.5)  # weight e^0.5 = 1.65 on every token
    assert half.ratio_mean == 1.0 and half.clip_frac == 0.0
    assert half.logprob_gap_max == pytest.approx(0.5, abs=1e-5)
    assert torch.allclose(half_grad, math.exp(0.5) * exact_grad, rtol=1e-4, atol=1e-8)
    assert all(s.trainer_logprobs is not None for s in samples)

    capped_grad, _, _ = _trainer_mode_grads(1.0)  # e^1 = 2.72, truncated at 2
    assert torch.allclose(capped_grad, 2.0 * exact_grad, rtol=1e-4, atol=1e-8)
    low_grad, _, _ = _trainer_mode_grads(-1.0)  # the sampler liked them more: e^-1, never raised
    assert torch.allclose(low_grad, math.exp(-1.0) * exact_grad, rtol=1e-4, atol=1e-8)
    uncorrected, _, _ = _trainer_mode_grads(1.0, cap=None)
    assert torch.allclose(uncorrected, exact_grad, atol=1e-7)

    clipped_grad, clipped, _ = _trainer_mode_grads(0.5, source="sampler")  # the old behaviour
    assert clipped.clip_frac > 0.0 and not torch.allclose(clipped_grad, half_grad, rtol=1e-2)


def test_auto_old_logprobs_follow_the_weights_dtype():
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.trainer import old_logprobs_source

    config = GRPOConfig()
    assert old_logprobs_source(config, attach_lora(tiny_model(), config)) == "sampler"
    bf16 = attach_lora(tiny_model().to(torch.bfloat16), config)
    assert old_logprobs_source(config, bf16) == "trainer"
    assert old_logprobs_source(GRPOConfig(old_logprobs="sampler"), bf16) == "sampler"
    full = GRPOConfig(finetune="full")
    assert old_logprobs_source(full, tiny_model()) == "sampler"
    assert old_logprobs_source(full, tiny_model().to(torch.bfloat16)) == "trainer"


def test_trainer_old_logprobs_are_frozen_at_the_first_epoch():
    from rewardbox.training.trainer import _optimise_epochs

    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        learning_rate=5e-2,
        micro_batch_sequences=2,
        ppo_epochs=3,
        old_logprobs="trainer",
    )
    model, samples = _lora_with_sampler_logprobs(config)  # the step-start policy's own log-probs
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    stats = _optimise_epochs(model, optimizer, samples, config, pad_id=0)
    for (
        s
    ) in samples:  # kept from the first epoch, not overwritten by the moved policy of later ones
        assert s.trainer_logprobs == pytest.approx(s.old_logprobs, abs=1e-5)
    assert stats.ratio_mean != pytest.approx(1.0, abs=1e-6)  # later epochs moved away from them


def test_ppo_epochs_reuse_the_batch_against_the_step_start_policy():
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.trainer import _optimise_epochs

    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        learning_rate=5e-2,
        micro_batch_sequences=2,
        ppo_epochs=3,
    )
    model = attach_lora(tiny_model(), config)
    samples = [
        Sample([1, 2, 3], [4, 5], 1.0),
        Sample([1, 2], [6, 7, 8], -1.0),
    ]  # no sampler log-probs
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    stats = _optimise_epochs(model, optimizer, samples, config, pad_id=0)
    assert all(s.old_logprobs is not None for s in samples)  # frozen at the first epoch
    assert stats.ratio_mean != pytest.approx(1.0, abs=1e-6)  # later epochs moved away from them
    assert stats.logprob_gap_max is None


def test_lora_defaults_cover_mlp_and_full_finetune_is_kept():
    lora = GRPOConfig()
    assert lora.learning_rate == 1e-4 and {"gate_proj", "up_proj", "down_proj"} <= set(
        lora.lora_target_modules
    )
    full = GRPOConfig(finetune="full")
    assert full.learning_rate == 1e-6
    from rewardbox.training.checkpoint import trainable

    model = trainable(tiny_model(), full)
    assert all(p.requires_grad for p in model.parameters()) and not hasattr(model, "peft_config")


def test_shared_prompt_prefix_once_gives_the_same_logprobs_and_gradients():
    """Rows sharing a prompt prefix: computing it once (KV repeated) equals a full forward of every row."""
    from rewardbox.training.checkpoint import attach_lora

    config = GRPOConfig(lora_r=4, lora_alpha=8)
    model = attach_lora(tiny_model(), config)
    shared = [(i * 7) % 29 + 1 for i in range(20)]
    batch = [
        Sample(shared + [3, 4], [5, 6, 7], 1.0),
        Sample(shared + [9], [10, 11], -1.0),
        Sample(shared + [12, 13, 14], [15], 0.5),
    ]

    def run(min_shared):
        model.zero_grad(set_to_none=True)
        logprobs, mask = completion_logprobs(
            model, batch, pad_id=0, temperature=0.8, min_shared_prefix_tokens=min_shared
        )
        (logprobs * mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprobs.detach(), grads

    once, grads_once = run(min_shared=8)
    full, grads_full = run(min_shared=10_000)
    assert torch.allclose(once, full, atol=1e-5)
    assert grads_once.keys() == grads_full.keys() and grads_once
    assert all(torch.allclose(grads_once[n], grads_full[n], atol=1e-5) for n in grads_full)
