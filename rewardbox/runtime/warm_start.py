"""The warm start from a profile: rejection-sampling fine-tuning before GRPO (docs/warm_start.md).

:func:`train_rft` replays the probe's successful trials of the training pool with the base policy,
keeps the replays that pass again, and fine-tunes a LoRA adapter (``grpo``'s LoRA settings) on their
agent-turn completions (``rewardbox.training.rft``). The Dagster layer (``assets/warm_start.py``)
writes the metadata; the merge and the benchmark evaluation reuse ``runtime.train.merge`` and
``runtime.evaluate.evaluate``.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.executor import LocalExecutor
from rewardbox.episode.progress import ProgressSink, emit
from rewardbox.episode.run import run_trials
from rewardbox.policy import build_policy
from rewardbox.policy.chat_template import END_OF_TURN
from rewardbox.runtime.compose import campaign_parts
from rewardbox.runtime.train import LeakedTasksError
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.schema import Task
from rewardbox.training.checkpoint import save_trained, trainable
from rewardbox.training.local import chat_tokenizer
from rewardbox.training.rft import (
    RFTSummary,
    kept_trajectories,
    rft_samples,
    rft_update,
    successful_probe_keys,
)


@dataclass
class RFTRun:
    """What the warm start did.

    Attributes:
        probe_successes: the probe's successful keys of pool tasks replayed (capped per task).
        replayed: replays run; reproduced: replays that passed again, clean and uncut (trained on).
        tasks: pool tasks with at least one kept trajectory.
        update: the update's summary (``training.rft.RFTSummary``).
        keys: the replayed ``(uid, trial)`` keys, and which of them were kept.
    """

    probe_successes: int = 0
    replayed: int = 0
    reproduced: int = 0
    tasks: int = 0
    update: RFTSummary = field(default_factory=RFTSummary)
    keys: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """The run as plain values (``rft_metrics.json``, the asset's metadata)."""
        return {
            "probe_successes": self.probe_successes,
            "replayed": self.replayed,
            "reproduced": self.reproduced,
            "tasks": self.tasks,
            **self.update.as_dict(),
        }


def replay_successes(
    profile: Profile,
    pool: Sequence[Task],
    base_checkpoint: str,
    keys: Sequence[tuple[str, int]],
    *,
    log: ProgressSink | None = None,
    policy_api_key: str | None = None,
):
    """The base policy's episodes of ``keys`` with the probe's settings (``profile.policy``,
    ``episode``, the same per-(uid, trial, turn) seeds), run here (a local executor): the full
    ``EpisodeResult`` of each key. A deterministic policy replays the probe's trajectory token for
    token; whatever it replays is graded again and only passing replays are kept by the caller."""
    if not keys:
        return []
    policy = build_policy(profile.policy, checkpoint_dir=base_checkpoint, api_key=policy_api_key)
    tasks = [t for t in pool if t.uid in {uid for uid, _ in keys}]
    _, results = run_trials(
        tasks,
        0,
        policy,
        campaign_parts(profile),
        keys=list(keys),
        log=log,
        label="rft_replay",
        executor=LocalExecutor(profile.episode.concurrency),
    )
    return results


def train_rft(
    profile: Profile,
    pool: Sequence[Task],
    base_checkpoint: str | Path,
    probe_rows: pl.DataFrame,
    out_dir: Path,
    *,
    log: ProgressSink | None = None,
    policy_api_key: str | None = None,
) -> tuple[Path, RFTRun]:
    """The warm start's LoRA adapter in ``out_dir`` (emptied first), with ``rft_metrics.json``.

    Steps: the probe's successful keys of pool tasks (``rft.max_samples_per_task`` per task), replayed
    (:func:`replay_successes`); the replays that pass again, clean and uncut, become agent-turn samples
    as GRPO builds them; the base checkpoint (float32) with ``grpo``'s LoRA adapter is fine-tuned on
    them (``training.rft.rft_update``). No kept trajectory: the adapter is saved untrained (merged =
    base) and the summary says so.

    Raises:
        LeakedTasksError: a benchmark task is in ``pool`` (before anything runs or is written).
        EndpointPreflightError: an endpoint of the replay does not answer (``run_trials`` checks
            before the first episode; nothing written).
        TokenBudgetError, TurnBudgetError: the budgets cannot hold a golden call (as for the probe).
    """
    leaked = check_disjoint(pool)
    if leaked:
        raise LeakedTasksError(leaked)
    keys = successful_probe_keys(probe_rows, pool, profile.rft.max_samples_per_task)
    results = replay_successes(
        profile, pool, str(base_checkpoint), keys, log=log, policy_api_key=policy_api_key
    )
    kept = kept_trajectories(results, pool)
    run = RFTRun(len(keys), len(results), len(kept), len({r.uid for r in kept}))
    run.keys = _key_table(keys, kept)
    emit(log, f"warm start: {run.reproduced} of {run.replayed} replayed probe successes kept")
    shutil.rmtree(out_dir, ignore_errors=True)
    model, tokenizer = _trainee(profile, Path(base_checkpoint))
    on_policy = profile.policy.kind == "local"
    samples = rft_samples(kept, pool, None if on_policy else chat_tokenizer(tokenizer))
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    run.update = rft_update(model, samples, profile.rft, profile.grpo, pad_id)
    save_trained(model, out_dir, [run.metrics()], profile.grpo)
    return Path(out_dir), run


def _key_table(keys, kept) -> list[dict[str, Any]]:
    """One entry per replayed key: uid, trial and whether its replay was kept."""
    kept_keys = {(r.uid, r.trial) for r in kept}
    return [{"uid": uid, "trial": trial, "kept": (uid, trial) in kept_keys} for uid, trial in keys]


def _trainee(profile: Profile, base_dir: Path):
    """(the base checkpoint in float32 with a fresh ``grpo`` LoRA adapter, its tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    return trainable(model, profile.grpo), AutoTokenizer.from_pretrained(base_dir)
