"""verl's per-step lines parsed into progress; checkpoints found per global step."""

from __future__ import annotations

import math

import pytest

from rewardbox.training.verl.progress import (
    discover_checkpoints,
    latest_checkpoint,
    parse_progress_line,
)


def test_step_line_behind_rays_actor_prefix():
    line = (
        "(TaskRunner pid=4242) step:3 - critic/score/mean:0.250 - critic/rewards/mean:0.200 - "
        "rewardbox/zero_variance_frac:0.333 - perf/throughput:1234.500 - timing_s/step:12.000 - "
        "actor/pg_loss:-0.012 - val-core/retail/reward/mean@1:nan"
    )
    progress = parse_progress_line(line)
    assert progress.step == 3
    assert progress.mean_reward == 0.25  # the grader's score wins over the KL-adjusted reward
    assert progress.zero_variance_frac == pytest.approx(0.333)
    assert progress.throughput_tokens_per_s == pytest.approx(1234.5)
    assert progress.step_s == 12.0
    assert progress.metrics["actor/pg_loss"] == pytest.approx(-0.012)
    assert math.isnan(progress.metrics["val-core/retail/reward/mean@1"])
    assert progress.summary().startswith("verl step 3: mean_reward=0.250 zero_variance_frac=0.333")


def test_numpy_scalars_as_verl_prints_them_under_numpy_2():
    progress = parse_progress_line(
        "step:7 - critic/score/mean:np.float64(0.625) - perf/throughput:np.float32(88.5)"
        " - response_length/mean:np.int64(120) - actor/lr:1e-06"
    )
    assert progress.mean_reward == 0.625 and progress.throughput_tokens_per_s == 88.5
    assert progress.metrics["response_length/mean"] == 120 and progress.metrics["actor/lr"] == 1e-06


def test_plain_verl_line_and_missing_figures():
    progress = parse_progress_line("step:1 - critic/rewards/mean:1.0 - training/global_step:1")
    assert progress.step == 1 and progress.mean_reward == 1.0
    assert progress.zero_variance_frac is None and progress.throughput_tokens_per_s is None
    assert "throughput" not in progress.summary()


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Training Progress:  10%|#         | 5/50 [01:02<09:18, 12.41s/it]",
        "we are at step:3 of the plan",  # text, not metrics
        "step:3 - nothing - here",  # no key:value pair
        "(TaskRunner pid=1) step:2 - model:Qwen/Qwen3-8B",  # no numeric value
        "restep:4 - critic/score/mean:0.5",  # 'step' inside another word
    ],
)
def test_other_lines_are_not_progress(line):
    assert parse_progress_line(line) is None


def _actor(root, step, files=True):
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    if files:
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    return actor


def test_checkpoints_by_step_skipping_incomplete_ones(tmp_path):
    _actor(tmp_path, 10)
    _actor(tmp_path, 2)
    _actor(tmp_path, 15, files=False)  # still being written when the job died
    (tmp_path / "global_step_20").mkdir()  # no actor directory
    (tmp_path / "global_step_x" / "actor").mkdir(parents=True)
    found = discover_checkpoints(tmp_path)
    assert [c.step for c in found] == [2, 10]  # numeric order, not "10" < "2"
    assert found[-1].actor_dir == tmp_path / "global_step_10" / "actor"
    assert latest_checkpoint(tmp_path).step == 10


def test_latest_marker_is_trusted_only_when_that_checkpoint_is_complete(tmp_path):
    _actor(tmp_path, 1)
    _actor(tmp_path, 2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1\n")
    assert latest_checkpoint(tmp_path).step == 1
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")  # names one that is not there
    assert latest_checkpoint(tmp_path).step == 2


def test_no_checkpoints(tmp_path):
    assert discover_checkpoints(tmp_path / "missing") == [] and latest_checkpoint(tmp_path) is None
