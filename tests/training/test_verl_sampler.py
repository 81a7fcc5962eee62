"""The zero-variance share in verl's step line: rewardbox's replay buffer, from its settings to the parsed line.

The end-to-end test runs ``tests/fixtures/verl_sampler_check.py`` with verl's Python (``REWARDBOX_VERL_PYTHON``,
else ``.venv-verl``): verl's config, trainer code, sync ``ReplayBuffer`` (DAPO filtering and refills), data
metrics, metrics aggregation and console logger; ``verl_progress`` parses the line it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rewardbox.training.verl.config import format_override
from rewardbox.training.verl.progress import parse_progress_line
from rewardbox.training.verl.sampler import (
    KEPT_GROUPS_KEY,
    SAMPLED_GROUPS_KEY,
    SETTINGS,
    TRUNCATED_KEY,
    TRUNCATED_TURNS_KEY,
    ZERO_VARIANCE_KEY,
    eviction_bound,
    replay_buffer_settings,
    sampler_overrides,
    truncation_metrics,
    zero_variance_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "fixtures" / "verl_sampler_check.py"
RESOLVED = {
    "filter_groups_enable": True,
    "filter_groups_metric": "reward",
    "max_inflight_gen_batches": 2,
    "train_batch_size": 18,
    "gen_batch_size": None,
    "sync_refill_failed_groups": True,
    "max_num_gen_batches": 3,
}


def _verl_python() -> str | None:
    found = os.environ.get("REWARDBOX_VERL_PYTHON") or str(ROOT / ".venv-verl" / "bin" / "python")
    return found if Path(found).exists() else None


def test_share_of_zero_variance_groups_and_no_share_without_groups():
    assert zero_variance_metrics(3, 7) == {ZERO_VARIANCE_KEY: 3 / 7, SAMPLED_GROUPS_KEY: 7.0}
    assert zero_variance_metrics(0, 4)[ZERO_VARIANCE_KEY] == 0.0
    assert zero_variance_metrics(0, 0) == {}  # nothing judged: no share, never 0/0
    with pytest.raises(ValueError):
        zero_variance_metrics(5, 4)


def test_issue24_item1_truncation_metrics_over_trajectories():
    rows = [
        {"rewardbox_truncated_turns": 1, "rewardbox_agent_turns": 3},
        {"rewardbox_truncated_turns": 0, "rewardbox_agent_turns": 1},
        {"rewardbox_truncated_turns": 2, "rewardbox_agent_turns": 4},
        {"other": 1},
    ]
    assert truncation_metrics(rows) == {
        TRUNCATED_KEY: pytest.approx(2 / 3),
        TRUNCATED_TURNS_KEY: pytest.approx(3 / 8),
    }
    assert truncation_metrics([{"other": 1}, None]) == {}


def test_settings_mirror_verls_own_replay_buffer_arguments():
    # PPOTrainer._build_replay_buffer: filtering (or refilling) fetches prompts one at a time
    assert replay_buffer_settings(RESOLVED) == {
        "filter_groups_metric": "reward",
        "sync_refill_failed_groups": True,
        "train_batch_size": 18,
        "gen_batch_size": 1,
        "max_inflight_gen_batches": 2,
    }
    off = replay_buffer_settings(
        {**RESOLVED, "filter_groups_enable": False, "sync_refill_failed_groups": False}
    )
    assert (
        off["filter_groups_metric"] is None
        and off["gen_batch_size"] == 18
        and off["max_inflight_gen_batches"] == 1
    )
    assert (
        replay_buffer_settings(
            {
                **RESOLVED,
                "filter_groups_enable": False,
                "sync_refill_failed_groups": False,
                "gen_batch_size": 6,
            }
        )["gen_batch_size"]
        == 6
    )
    with pytest.raises(ValueError, match="sampler_overrides"):
        replay_buffer_settings({"train_batch_size": 18})
    with pytest.raises(ValueError, match="metric must be set"):
        replay_buffer_settings({**RESOLVED, "filter_groups_metric": ""})


def test_eviction_bound_is_max_refill_rounds_batches_and_none_for_no_limit():
    assert eviction_bound(RESOLVED) == 2 * 18  # max_num_gen_batches 3 = max_refill_rounds 2 + 1
    assert (
        eviction_bound({**RESOLVED, "max_num_gen_batches": 1}) == 0
    )  # no refill round: evict nothing
    assert eviction_bound({**RESOLVED, "max_num_gen_batches": 0}) is None


def test_overrides_name_the_sampler_and_read_the_live_settings():
    formatted = [format_override(k, v) for k, v in sampler_overrides().items()]
    assert (
        "trainer.v1.sampler.custom_sampler.path=pkg://rewardbox.training.verl.sampler" in formatted
    )
    assert "trainer.v1.sampler.custom_sampler.name=ZeroVarianceReplayBuffer" in formatted
    kwargs = next(f for f in formatted if f.startswith("++trainer.v1.sampler.sampler_kwargs={"))
    assert "train_batch_size:${data.train_batch_size}" in kwargs and kwargs.count(":${") == len(
        SETTINGS
    )


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(300)
def test_verls_step_line_carries_the_share_of_groups_as_sampled(tmp_path):
    verl_step = _run_check(tmp_path)
    assert verl_step["sampler_kwargs"] == {
        **RESOLVED,
        "max_inflight_gen_batches": 1,
        "train_batch_size": 4,
    }
    ours, verls = verl_step["ours"], verl_step["verls"]
    assert (ours["sampler"], verls["sampler"]) == ("ZeroVarianceReplayBuffer", "ReplayBuffer")
    # the same sampling as verl's own buffer: 2 of 4 groups evicted, 4 prompts refilled, 4 groups trained on
    assert (
        ours["refills"] == verls["refills"] == [4]
        and ours["trained_groups"] == verls["trained_groups"]
    )
    step = parse_progress_line("(TaskRunner pid=7) " + ours["line"])
    assert step.step == 3
    # 7 groups judged (4 first, 4 refilled, less the one that lost a rollout), 3 with equal rewards,
    # counted before verl evicted them (verl's own counter agrees)
    assert step.zero_variance_frac == pytest.approx(3 / 7) and step.metrics[SAMPLED_GROUPS_KEY] == 7
    assert step.metrics["training/filter_groups/evicted_samples"] == 3
    assert step.metrics["training/filter_groups/discarded_surplus_samples"] == 1
    rewards = ours["trained_rewards"]  # verl's critic/score/mean: the rollouts trained on
    assert len(ours["trained_groups"]) == 4 and step.mean_reward == pytest.approx(
        sum(rewards) / len(rewards)
    )
    assert "zero_variance_frac=0.429" in step.summary() and step.metrics[KEPT_GROUPS_KEY] == 0
    # what the step line said before: verl alone has the count but not the share
    assert parse_progress_line(verls["line"]).zero_variance_frac is None
    # issue 24 item 1: the trajectories with a cut turn, as trained (rollouts of g1 and r1 had 1 of 2 turns cut)
    cut = ours["trained_truncated"]
    assert 0 < sum(cut) < len(cut) and step.metrics[TRUNCATED_KEY] == pytest.approx(
        sum(cut) / len(cut)
    )
    assert step.metrics[TRUNCATED_TURNS_KEY] == pytest.approx(sum(cut) / (2 * len(cut)))
    assert (
        TRUNCATED_KEY not in parse_progress_line(verls["line"]).metrics
    )  # verl alone does not count them


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(300)
def test_a_step_where_every_group_has_equal_rewards_ends_after_max_refill_rounds(tmp_path):
    facts = _run_check(tmp_path, "bounded")
    ours = facts["ours"]
    # max_refill_rounds 1: one batch (4 groups) evicted, then the next 4 zero-variance groups are kept
    step = parse_progress_line(ours["line"])
    assert (
        step.metrics["training/filter_groups/evicted_samples"] == 4
        and step.metrics[KEPT_GROUPS_KEY] == 4
    )
    assert (
        step.zero_variance_frac == 1.0
        and len(ours["trained_groups"]) == 4
        and step.mean_reward == 0.0
    )
    assert sum(ours["refills"]) <= 8  # verl refills twice what it evicts
    # verl's own buffer ignores max_num_gen_batches and would refill forever (cut by the fixture)
    assert facts["verls"] == {"runaway_after_refills": 40}


def _run_check(tmp_path, *args: str) -> dict:
    proc = subprocess.run(
        [_verl_python(), str(CHECK), str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
