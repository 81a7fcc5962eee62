"""Issue #23 items 1-4 and 6: no rollout replays a probe or an earlier draw, cut completions are failures
in the loss when the budget fits, the sampler starts from the probe, Dr. GRPO's constant normaliser, and
a step that keeps fewer groups than asked says so."""

from __future__ import annotations

import asyncio

import polars as pl
import pytest
import torch

from rewardbox.config.profile import load_profile
from rewardbox.episode.trajectory import AgentTurn, EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.config import GRPOConfig
from rewardbox.training.groups import TrialNumbers, collect_groups, task_stream, training_rewards
from rewardbox.training.local import _loss_budget, _tasks, run_trials_after_probe, step_note
from rewardbox.training.probe_history import ProbeHistory
from rewardbox.training.trainer import Sample, StepMetrics, group_samples, optimise_step, train_grpo

from .test_trainer import task


def result(uid, trial, reward, cut=False):
    turn = AgentTurn(
        raw_text="x",
        finish_reason="length" if cut else "stop",
        input_tokens=3,
        output_tokens=2,
        prompt_token_ids=[1, 2, 3],
        completion_token_ids=[4, 5],
    )
    return EpisodeResult(
        uid=uid, trial=trial, reward=reward, passed=reward == 1.0, agent_turns=[turn]
    )


class Recorder:
    """A rollout function that records every (uid, trial) it runs; reward from ``reward(uid, trial)``."""

    def __init__(self, reward=lambda uid, trial: float(trial % 2)):
        self.keys: list[tuple[str, int]] = []
        self.reward = reward

    async def __call__(self, t: Task, trial: int) -> EpisodeResult:
        self.keys.append((t.uid, trial))
        return result(t.uid, trial, self.reward(t.uid, trial))


def tiny_lora(config):
    from transformers import LlamaConfig, LlamaForCausalLM

    from rewardbox.training.checkpoint import attach_lora

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
    return attach_lora(LlamaForCausalLM(cfg).eval(), config)


# --- item 1: refills and later steps never replay a (uid, trial) ---------------------------------------------


def test_issue23_item1_a_refill_of_the_same_task_runs_fresh_trials():
    # The given case: one task, G = 4, its first four trials all pass (zero variance). Before the fix every
    # refill round re-ran trials 0..3 (trial_offset = step x G), replaying the rejected group token for token.
    rec = Recorder(lambda uid, trial: 1.0 if trial < 4 else float(trial % 2))
    groups, stats = asyncio.run(
        collect_groups(
            task_stream([task("a")], 0), rec, group_size=4, groups_wanted=1, max_refill_rounds=2
        )
    )
    assert rec.keys == [("a", t) for t in range(8)]  # round 2 ran trials 4..7, not 0..3 again
    assert len(groups) == 1 and [r.trial for r in groups[0].rollouts] == [4, 5, 6, 7]
    assert (stats.zero_variance, stats.rounds, stats.repeated_trials) == (1, 2, 0)


def test_issue23_item1_tasks_drawn_in_one_round_and_across_steps_never_share_a_trial():
    # own case: two tasks, B = 3 groups per step so a task is drawn twice in one round, over three steps
    rec = Recorder(lambda uid, trial: 1.0)  # every group zero-variance: every refill round runs
    trials = TrialNumbers()
    for _ in range(3):
        _, stats = asyncio.run(
            collect_groups(
                task_stream([task("a"), task("b")], 1),
                rec,
                group_size=2,
                groups_wanted=3,
                max_refill_rounds=1,
                trials=trials,
            )
        )
        assert stats.repeated_trials == 0 and stats.rounds == 2
    assert len(rec.keys) == 3 * 2 * 3 * 2 and len(set(rec.keys)) == len(rec.keys)


def test_issue23_item1_train_grpo_steps_use_fresh_trials_and_report_repeats():
    config = GRPOConfig(
        group_size=2, tasks_per_step=2, steps=3, learning_rate=1e-2, max_refill_rounds=1
    )
    rec = Recorder()
    summary = asyncio.run(
        train_grpo(tiny_lora(config), 0, task_stream([task("a")], 0), rec, config)
    )
    assert len(set(rec.keys)) == len(rec.keys) == 3 * 2 * 2
    assert all(m.repeated_trials == 0 for m in summary.steps)
    # a caller that reuses trials is caught by the ledger
    ledger = TrialNumbers()
    assert ledger.record([result("a", 0, 1.0)]) == 0 and ledger.record([result("a", 0, 1.0)]) == 1
    with pytest.raises(ValueError, match=">= 0"):
        TrialNumbers(-1)


# --- item 2: step 0 runs trials after the probe's ---------------------------------------------------------


def probe_rows():
    # task a: 4 probe trials 0..3, 2 passed; task b: trials 0..5 (an imported run with more), 1 passed,
    # one system error (its seed was used too)
    rows = [("a", t, t < 2, None) for t in range(4)] + [
        ("b", t, t == 0, "sandbox: died" if t == 5 else None) for t in range(6)
    ]
    return pl.DataFrame(rows, schema=["uid", "trial", "passed", "system_error"], orient="row")


def test_issue23_item2_step_zero_never_replays_a_probe_trial():
    profile = load_profile("test")
    probe = ProbeHistory.from_rows(probe_rows())
    assert probe.counts == {"a": (2, 4), "b": (1, 5)} and probe.next_trial == {"a": 4, "b": 6}
    first = max(profile.probe.trials, 6)
    trials = run_trials_after_probe(profile.probe.trials, probe)
    config = GRPOConfig(
        group_size=4, tasks_per_step=2, steps=2, learning_rate=1e-2, max_refill_rounds=0
    )
    rec = Recorder()
    asyncio.run(
        train_grpo(
            tiny_lora(config), 0, task_stream([task("a"), task("b")], 0), rec, config, trials=trials
        )
    )
    probed = {(u, t) for u, t in probe_rows().select("uid", "trial").iter_rows()}
    assert not probed & set(rec.keys)
    assert min(t for u, t in rec.keys if u == "a") == profile.probe.trials
    assert min(t for u, t in rec.keys if u == "b") == first
    assert ProbeHistory.from_rows(probe_rows().head(0)) == ProbeHistory()


# --- item 3: a cut completion is a failure in the loss when the budget fits -------------------------------


def test_issue23_item3_cut_rollouts_get_a_negative_advantage_when_the_budget_fits():
    # The given case: mask_truncated on (the default), a group of four where two passed but one of them ran on
    # past the budget. Before: the cut rollout was masked (no loss at all), so nothing taught the model to stop.
    rollouts = [
        result("a", 0, 1.0),
        result("a", 1, 1.0, cut=True),
        result("a", 2, 0.0),
        result("a", 3, 0.0),
    ]

    async def replay(t, trial):
        return rollouts[trial]

    config = GRPOConfig(group_size=4, tasks_per_step=1, steps=1, max_refill_rounds=0)
    assert config.mask_truncated
    groups, stats = asyncio.run(
        collect_groups(
            iter([task("a")]),
            replay,
            group_size=4,
            groups_wanted=1,
            max_refill_rounds=0,
            truncation_fails=True,
        )
    )
    adv = groups[0].advantages
    assert (
        adv[1] < 0
        and adv[1] == pytest.approx(adv[2])
        and adv[0] > 0
        and stats.truncated_failures == 1
    )
    samples = group_samples(groups, mask_truncated=config.mask_truncated and not True)
    assert len(samples) == 4 and samples[1].advantage < 0
    # budgets that do not fit keep mask_truncated's meaning: graded reward, and the cut rollout is dropped
    kept, _ = asyncio.run(
        collect_groups(
            iter([task("a")]), replay, group_size=4, groups_wanted=1, max_refill_rounds=0
        )
    )
    assert kept[0].advantages[1] > 0 and len(group_samples(kept, mask_truncated=True)) == 3


def test_issue23_item3_own_cases_flat_groups_with_a_cut_rollout():
    cut_pass = [result("a", 0, 1.0), result("a", 1, 1.0, cut=True)]
    cut_fail = [result("a", 0, 0.0), result("a", 1, 0.0, cut=True)]
    # all passed but one ran on: a group with variance now (it teaches stopping)
    assert training_rewards(cut_pass, truncation_fails=True) == [1.0, 0.0]
    assert training_rewards(cut_pass) == [1.0, 1.0]
    # all failed: still zero variance, nothing to learn
    assert training_rewards(cut_fail, truncation_fails=True) == [0.0, 0.0]
    errored = EpisodeResult(uid="a", trial=2, reward=None, system_error="sandbox: died")
    assert training_rewards([errored], truncation_fails=True) == [None]


def test_issue23_item3_train_grpo_trains_on_cut_rollouts_only_when_the_budget_fits():
    async def attempt(t, trial):
        return result(
            t.uid, trial, 1.0, cut=trial % 2 == 1
        )  # every rollout passes, odd trials run on

    config = GRPOConfig(
        group_size=2, tasks_per_step=1, steps=1, learning_rate=1e-2, max_refill_rounds=0
    )
    fits = asyncio.run(
        train_grpo(
            tiny_lora(config),
            0,
            task_stream([task("a")], 0),
            attempt,
            config,
            budget_fits_golden=True,
        )
    )
    assert fits.steps[0].samples == 2 and fits.steps[0].truncated_failures == 1
    blind = asyncio.run(
        train_grpo(tiny_lora(config), 0, task_stream([task("a")], 0), attempt, config)
    )
    assert blind.steps[0].groups == 0 and blind.steps[0].zero_variance_frac == 1.0


# --- item 4: the sampler starts from the probe --------------------------------------------------------------


def test_issue23_item4_posterior_sampler_starts_from_the_probe_counts():
    profile = load_profile("test")
    pool = [task("a"), task("b"), task("c")]
    sampler = _tasks(
        pool, profile.grpo, profile.selection.boundaries, ProbeHistory.from_rows(probe_rows())
    )
    assert sampler.counts == {"a": (2, 4), "b": (1, 5), "c": (0, 0)}  # before: every task at (0, 0)
    # own case: a task the probe saw fail 0 of 8 weighs far less than one at 4 of 8 from the first draw
    rows = pl.DataFrame(
        [("x", t, False, None) for t in range(8)] + [("y", t, t < 4, None) for t in range(8)],
        schema=["uid", "trial", "passed", "system_error"],
        orient="row",
    )
    sampler = _tasks(
        [task("x"), task("y")],
        profile.grpo,
        profile.selection.boundaries,
        ProbeHistory.from_rows(rows),
    )
    drawn = []
    for _ in range(400):
        t = next(sampler)
        drawn.append(t.uid)
        sampler._drawn_since_observe.clear()
    assert drawn.count("y") > 3 * drawn.count("x")


# --- item 6: Dr. GRPO's L_max is a constant across micro-batches ---------------------------------------------


def test_issue23_item6_seq_mean_token_sum_norm_uses_the_budget_not_the_micro_batch_width():
    # Hand values: completions of 2 and 6 tokens, advantage -1, ratio 1 (no sampler log-probs): loss_t = 1 per
    # token, so the loss is 8 tokens / (B = 2 x L_max = 8) = 0.5. Before: each micro-batch of one divided by its
    # own padded width (2 / 2 and 6 / 6), giving 1.0.
    config = GRPOConfig(
        group_size=2,
        tasks_per_step=1,
        steps=1,
        micro_batch_sequences=1,
        loss_aggregation="seq-mean-token-sum-norm",
        max_response_tokens=8,
    )
    samples = [Sample([1, 2, 3], [4, 5], -1.0), Sample([1, 2], [6, 7, 8, 9, 10, 11], -1.0)]
    model = tiny_lora(config)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    assert optimise_step(model, optimizer, samples, config, pad_id=0).loss == pytest.approx(
        0.5, abs=1e-5
    )
    # own case: micro-batches of two give the same value (L_max does not depend on the batching)
    both = config.model_copy(update={"micro_batch_sequences": 2})
    fresh = [Sample(s.prompt_ids, s.completion_ids, s.advantage) for s in samples]
    assert optimise_step(model, optimizer, fresh, both, pad_id=0).loss == pytest.approx(
        0.5, abs=1e-5
    )


def test_issue23_item6_local_training_sets_l_max_to_the_turn_budget():
    profile = load_profile("test")
    cfg = GRPOConfig(loss_aggregation="seq-mean-token-sum-norm")

    class Policy:
        max_new_tokens = 96

    budget = profile.episode.max_new_tokens
    assert _loss_budget(cfg, Policy(), budget, on_policy=True).max_response_tokens == 96
    assert _loss_budget(cfg, object(), budget, on_policy=True).max_response_tokens == budget
    assert _loss_budget(cfg, Policy(), budget, on_policy=False).max_response_tokens is None
    assert (
        _loss_budget(
            cfg.model_copy(update={"max_response_tokens": 50}), Policy(), budget, on_policy=True
        ).max_response_tokens
        == 50
    )


# --- issue #24 item 6 (local half): a short step says so -----------------------------------------------------


def test_issue24_item6_a_short_step_reports_groups_kept_of_needed_and_rounds():
    config = GRPOConfig(
        group_size=2, tasks_per_step=3, steps=1, learning_rate=1e-2, max_refill_rounds=2
    )
    rec = Recorder(lambda uid, trial: float(trial % 2) if uid == "good" else 0.0)
    summary = asyncio.run(
        train_grpo(tiny_lora(config), 0, iter([task("good")] + [task("flat")] * 20), rec, config)
    )
    m = summary.steps[0]
    assert (m.groups, m.groups_wanted, m.refill_rounds) == (1, 3, 3)
    line = step_note(m)
    assert "groups kept/needed=1/3 SHORT rounds=3" in line
    full = StepMetrics(
        step=1,
        mean_reward=0.5,
        zero_variance_frac=0.0,
        system_error_groups=0,
        groups=3,
        episodes=6,
        samples=6,
        policy_tokens=12,
        loss=0.1,
        duration_s=1.0,
        groups_wanted=3,
        refill_rounds=1,
    )
    assert "groups kept/needed=3/3 rounds=1" in step_note(full) and "SHORT" not in step_note(full)


@pytest.mark.parametrize("refill,reruns", [("replace", 0), ("rerun", 2)])
def test_trials_stay_fresh_with_system_error_reruns_refills_and_probe_history(refill, reruns):
    """A task drawn twice per round, every third attempt a system error, refills, 3 steps on one
    TrialNumbers started after the probe: a (uid, trial) runs again only as the re-run of a system error."""
    attempts: list[tuple[tuple[str, int], bool]] = []

    async def flaky(t, trial):
        failed = len(attempts) % 3 == 1
        attempts.append(((t.uid, trial), failed))
        if failed:
            return EpisodeResult(uid=t.uid, trial=trial, reward=None, system_error="sandbox: died")
        return result(
            t.uid, trial, 1.0 if t.uid == "a" else 0.0
        )  # flat groups: every round refills

    probe = ProbeHistory.from_rows(
        pl.DataFrame(
            {
                "uid": ["a", "a", "b"],
                "trial": [0, 6, 1],
                "passed": [True, False, True],
                "system_error": [None, "x", None],
            }
        )
    )
    trials = TrialNumbers(first_trial=4, first_by_uid=probe.next_trial)
    stream = iter([task("a"), task("a"), task("b")] * 50)
    for _ in range(3):
        _, stats = asyncio.run(
            collect_groups(
                stream,
                flaky,
                group_size=3,
                groups_wanted=2,
                max_refill_rounds=2,
                system_error_refill=refill,
                max_system_error_reruns=reruns,
                trials=trials,
            )
        )
        assert stats.repeated_trials == 0
    seen: dict[tuple[str, int], bool] = {}
    for key, failed in attempts:
        assert key not in seen or seen[key], f"{key} ran again after a clean attempt"
        seen[key] = failed
    assert min(t for (u, t) in seen if u == "a") == 7 and min(t for (u, t) in seen if u == "b") == 4
    assert any(not failed for _, failed in attempts) and (reruns == 0 or len(seen) < len(attempts))
