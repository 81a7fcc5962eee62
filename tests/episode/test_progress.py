"""Progress lines: done / total, pass rate over graded episodes, system errors, ETA, cadence."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest

from rewardbox.episode.progress import Progress, format_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_count_done_pass_rate_system_errors_and_eta():
    clock, lines = FakeClock(), []
    progress = Progress(
        4, "probe_results", lines.append, every_frac=0.25, every_s=1e9, bar=False, clock=clock
    )
    outcomes = [(True, None), (False, None), (False, "sandbox crashed"), (True, None)]
    for passed, error in outcomes:
        clock.now += 10.0
        progress.episode(SimpleNamespace(passed=passed, system_error=error))
    progress.close()
    assert lines[0] == "probe_results: 4 episodes to run"
    assert lines[1] == (
        "probe_results: 1/4 episodes (25%), pass rate 1.000 (1/1), system errors 0, "
        "10s elapsed, ETA 30s"
    )
    # a system error is neither a pass nor a failure: 1 of 2 graded passed
    assert lines[3] == (
        "probe_results: 3/4 episodes (75%), pass rate 0.500 (1/2), system errors 1, "
        "30s elapsed, ETA 10s"
    )
    assert (
        lines[4]
        == "probe_results: 4/4 episodes (100%), pass rate 0.667 (2/3), system errors 1, 40s elapsed"
    )
    assert len(lines) == 5  # close() adds nothing after the final unit's line


def test_with_episodes_in_flight_the_eta_waits_for_the_first_wave():
    """16 in flight, 18 in all: the first finishes after one episode's time; the mean rate then would
    say 17 more episode-times (the "ETA 1h26m" of a 10-minute stage)."""
    clock, lines = FakeClock(), []
    progress = Progress(18, "evaluation", lines.append, every_frac=0, bar=False, clock=clock)
    progress.running(16)
    for done in range(1, 19):
        clock.now += 300.0 if done == 1 else 2.0
        progress.update(passed=True)
    assert all("ETA" not in line for line in lines[1:16])  # 1 .. 15 done
    assert lines[16].startswith("evaluation: 16/18") and lines[16].endswith(
        "ETA 41s"
    )  # 330 s / 16 × 2
    assert "ETA" not in lines[-1]


def test_cadence_by_share_and_by_time():
    clock, lines = FakeClock(), []
    progress = Progress(
        100, "evaluation", lines.append, every_frac=0.05, every_s=30.0, bar=False, clock=clock
    )
    for _ in range(100):
        clock.now += 0.1
        progress.update(passed=True)
    shares = [int(m.group(1)) for line in lines[1:] if (m := re.search(r": (\d+)/100", line))]
    assert shares == list(range(5, 101, 5))  # one line per 5%, no more

    clock, lines = FakeClock(), []
    slow = Progress(
        1000, "evaluation", lines.append, every_frac=0.5, every_s=30.0, bar=False, clock=clock
    )
    for _ in range(3):
        clock.now += 31.0
        slow.update(passed=False)
    assert [re.search(r": (\d+)/1000", line).group(1) for line in lines[1:]] == ["1", "2", "3"]


def test_steps_without_outcomes_carry_the_note_and_a_logger_sink_works(caplog):
    logger = logging.getLogger("rewardbox.test.progress")
    clock = FakeClock()
    with caplog.at_level(logging.INFO, logger=logger.name):
        progress = Progress(
            2,
            "grpo_checkpoint",
            logger,
            unit="steps",
            every_frac=0,
            outcomes=False,
            bar=False,
            clock=clock,
        )
        clock.now += 65.0
        progress.update(note="step 0: mean_reward=0.500 zero_variance=0.50 (65.0s)")
    assert caplog.messages[-1] == (
        "grpo_checkpoint: 1/2 steps (50%), 1m05s elapsed, ETA 1m05s"
        " | step 0: mean_reward=0.500 zero_variance=0.50 (65.0s)"
    )


def test_empty_stage_and_bad_total():
    lines: list[str] = []
    with Progress(0, "screen (golden replay)", lines.append, bar=False):
        pass
    assert lines == [
        "screen (golden replay): 0 episodes to run",
        "screen (golden replay): 0/0 episodes, pass rate n/a, system errors 0, 0s elapsed",
    ]
    with pytest.raises(ValueError, match="total must be >= 0"):
        Progress(-1, "x", bar=False)
    assert format_seconds(3725) == "1h02m" and format_seconds(59.4) == "59s"


def test_grpo_step_line_carries_reward_zero_variance_share_and_seconds():
    from rewardbox.training.local import step_note
    from rewardbox.training.trainer import StepMetrics

    metrics = StepMetrics(
        step=2,
        mean_reward=0.375,
        zero_variance_frac=0.25,
        system_error_groups=1,
        groups=4,
        episodes=32,
        samples=40,
        policy_tokens=900,
        loss=-0.01,
        duration_s=81.34,
        update_s=52.06,
        scored_rollouts=24,
        groups_wanted=4,
        refill_rounds=2,
    )
    assert step_note(metrics) == (
        "step 2: groups kept/needed=4/4 rounds=2 mean_reward=0.375 (scored rollouts 24) "
        "zero_variance=0.25 system_error_groups=1 loss=-0.01 logprob_gap_max=None "
        "clip_frac=None truncated=0/0 (rollouts scored as failures 0) repeated_trials=0 "
        "bands=[] samples=40 tokens=900 (81.3s, update 52.1s)"
    )
    metrics.mean_reward = None  # every rollout of the step was a system error
    assert step_note(metrics).startswith("step 2: groups kept/needed=4/4 rounds=2 mean_reward=n/a ")
