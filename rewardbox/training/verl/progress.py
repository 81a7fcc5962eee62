"""What a verl run says about itself: per-step metric lines and checkpoints per global step.

Progress lines: verl's console tracker prints one line per training step,
``step:N - key:value - key:value ...`` (``verl.utils.logger.aggregate_logger``,
``concat_dict_to_str``, which prints each number with ``pprint.pformat``). The trainer runs inside a Ray actor, so in the job's log
the line usually carries Ray's prefix, e.g. ``(TaskRunner pid=4242) step:3 - ...``.

Checkpoints: verl's FSDP checkpoint manager writes
``<trainer.default_local_dir>/global_step_<N>/actor/`` (sharded weights and a
``huggingface/`` config and tokenizer) and records the last one in
``latest_checkpointed_iteration.txt``; verl's model merger turns an ``actor``
directory into a Hugging Face checkpoint.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from rewardbox.training.verl.sampler import ZERO_VARIANCE_KEY

_STEP_LINE = re.compile(r"(?:^|[\s)])step:(\d+)((?:\s+-\s+\S+)+)\s*$")

REWARD_KEYS = ("critic/score/mean", "critic/rewards/mean")
"""verl's mean sequence reward of the step: the grader's score, then the reward after any KL penalty."""
THROUGHPUT_KEY = "perf/throughput"
"""verl's tokens per second per GPU of the step (prompt and response tokens over the step time)."""
STEP_TIME_KEY = "timing_s/step"
ZERO_VARIANCE_KEYS = (ZERO_VARIANCE_KEY,)
"""The share (0-1) of the step's sampled groups whose rewards were all equal, counted before
``filter_groups`` evicts them. verl does not compute it; rewardbox's replay buffer adds it to the
step line (``rewardbox.training.verl.sampler``). verl's own ``training/filter_groups/evicted_samples``
is the count of those groups, without the total to divide by."""
LATEST_MARKER = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


@dataclass(frozen=True)
class StepProgress:
    """One training step as verl reported it.

    Attributes:
        step: verl's global step (1-based).
        metrics: every numeric ``key:value`` of the line (NaN and inf kept as floats).
        mean_reward: mean reward of the step's rollouts (``REWARD_KEYS``), or None if not reported.
        zero_variance_frac: share (0-1) of groups with zero reward variance, or None.
        throughput_tokens_per_s: tokens per second per GPU (``perf/throughput``), or None.
        step_s: wall time of the step, seconds (``timing_s/step``), or None.
    """

    step: int
    metrics: dict[str, float]
    mean_reward: float | None
    zero_variance_frac: float | None
    throughput_tokens_per_s: float | None
    step_s: float | None

    def summary(self) -> str:
        """A short log line: ``verl step 3: mean_reward=0.250 zero_variance_frac=0.333 ...``."""
        parts = [
            f"{name}={value:.3f}" for name, value in self.headline().items() if value is not None
        ]
        return f"verl step {self.step}: " + (" ".join(parts) or f"{len(self.metrics)} metrics")

    def headline(self) -> dict[str, float | None]:
        """The four figures shown per step (the asset's step table columns)."""
        return {
            "mean_reward": self.mean_reward,
            "zero_variance_frac": self.zero_variance_frac,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "step_s": self.step_s,
        }


_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\(([^()]*)\)$")


def _number(text: str) -> float | None:
    """A value as verl prints it (``pprint.pformat``): ``0.25``, ``nan``, or a numpy scalar's
    repr under numpy 2 (``np.float64(0.25)``), whose number is inside the parentheses."""
    wrapped = _WRAPPED.match(text)
    try:
        return float(wrapped.group(1) if wrapped else text)
    except ValueError:
        return None


def _first(metrics: dict[str, float], keys: tuple[str, ...]) -> float | None:
    return next((metrics[k] for k in keys if k in metrics), None)


def parse_progress_line(line: str) -> StepProgress | None:
    """A :class:`StepProgress` from one log line, or None when the line is not a verl step line.

    Args:
        line: one line of the job's log, with or without Ray's ``(Actor pid=N)`` prefix.

    Returns:
        None for every other line (a line that merely mentions ``step:`` inside text, a
        line with no ``key:value`` pair). Values that are not numbers are left out of
        ``metrics``; ``nan`` / ``inf`` are kept (a step whose rollouts all failed reports NaN).
    """
    match = _STEP_LINE.search(line)
    if match is None:
        return None
    metrics: dict[str, float] = {}
    for pair in match.group(2).split(" - "):
        key, sep, value = pair.strip().rpartition(":")
        number = _number(value) if sep and key else None
        if number is not None:
            metrics[key] = number
    if not metrics:
        return None
    step_s = metrics.get(STEP_TIME_KEY)
    return StepProgress(
        step=int(match.group(1)),
        metrics=metrics,
        mean_reward=_first(metrics, REWARD_KEYS),
        zero_variance_frac=_first(metrics, ZERO_VARIANCE_KEYS),
        throughput_tokens_per_s=metrics.get(THROUGHPUT_KEY),
        step_s=None if step_s is None or math.isnan(step_s) else step_s,
    )


@dataclass(frozen=True, order=True)
class VerlCheckpoint:
    """One of verl's checkpoints: ``global_step_<step>/actor``.

    Attributes:
        step: the global step it was saved at.
        actor_dir: the ``actor`` directory (the model merger's ``--local_dir``).
    """

    step: int
    actor_dir: Path


def discover_checkpoints(checkpoint_dir: str | Path) -> list[VerlCheckpoint]:
    """Every complete verl checkpoint under ``checkpoint_dir`` (``trainer.default_local_dir``), by step.

    A ``global_step_N`` directory counts when it has an ``actor`` directory with at least one
    file in it; a directory verl was still writing when the job died (no ``actor``, or an
    empty one) is skipped. A missing ``checkpoint_dir`` gives an empty list.
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        actor = child / "actor"
        if match and actor.is_dir() and any(actor.iterdir()):
            found.append(VerlCheckpoint(int(match.group(1)), actor))
    return sorted(found)


def latest_checkpoint(checkpoint_dir: str | Path) -> VerlCheckpoint | None:
    """The checkpoint to merge: the one ``latest_checkpointed_iteration.txt`` names, else the highest step.

    The marker is trusted only when its step is among the complete checkpoints (verl writes it
    after the checkpoint); otherwise the highest complete step wins. None when there is none.
    """
    found = discover_checkpoints(checkpoint_dir)
    if not found:
        return None
    marker = Path(checkpoint_dir) / LATEST_MARKER
    named = marker.read_text().strip() if marker.is_file() else ""
    by_step = {c.step: c for c in found}
    return by_step.get(int(named)) if named.isdigit() and int(named) in by_step else found[-1]
