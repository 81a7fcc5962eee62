"""GRPO on verl as a Ray job: the launch, the watched run, the latest checkpoint, and its merge.

``grpo.backend: verl`` (``GRPOConfig.backend``) trains with verl on a Ray GPU cluster
instead of the local trainer. The steps, each a plain function the
``grpo_checkpoint`` / ``merged_checkpoint`` assets call:

1. :func:`prepare_launch`: the training pool as verl dataset rows (Parquet), verl's
   overrides for our GRPO settings (``verl_config.verl_overrides``) and the job's
   entrypoint: a GPU preflight, then ``python -m verl.trainer.main_ppo ...``.
2. :func:`run_verl_training`: submit it as a Ray job, pass every log line on as it
   arrives, parse verl's per-step lines (``verl_progress``), stop the job when
   interrupted, fail with the job's log tail when it fails, then find the latest
   ``global_step_N/actor`` checkpoint.
3. :func:`merge_verl_checkpoint` (``verl_merge_run``): verl's model merger (its
   ``FSDPModelMerger``, in verl's own environment, through ``verl_merge``: dtype kept, a broken
   tie untied, fidelity measured) into a Hugging Face directory; a LoRA adapter it writes is
   merged into the base with peft (:func:`finish_verl_merge`).

Paths: the dataset rows and the checkpoints live under ``VerlBackendConfig.shared_dir``,
which every Ray node and this process must see at the same path (a shared
filesystem on a real cluster; the data directory on a local one).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.config import (
    VerlContextError,
    VerlLaunchConfig,
    context_problem,
    launch_command,
    verl_overrides,
)
from rewardbox.training.verl.guard import check_refill_bound
from rewardbox.training.verl.merge_run import (
    finish_verl_merge,
    merge_command,
    merge_verl_checkpoint,
)
from rewardbox.training.verl.progress import StepProgress, VerlCheckpoint, latest_checkpoint
from rewardbox.training.verl.ray_client import JobClient
from rewardbox.training.verl.ray_job import JobFailedError, JobOutcome, watch_job
from rewardbox.training.verl.watch import StepLog, outcome_error, submit_or_attach

# the merge step (step 3 above) is part of this module's API, defined in merge_run
__all__ = [
    "NO_GPU_EXIT_CODE",
    "PREFLIGHT",
    "AgentFn",
    "RowsFn",
    "VerlLaunch",
    "VerlRunResult",
    "agent_loop_overrides",
    "finish_verl_merge",
    "job_python",
    "merge_command",
    "merge_verl_checkpoint",
    "pool_rows",
    "prepare_launch",
    "run_overrides",
    "run_verl_training",
    "verl_python",
    "write_rows",
]

logger = logging.getLogger(__name__)
NO_GPU_EXIT_CODE = 3

# Runs in the job, on the head node, with the job's Python (verl's environment has Ray): it fails
# fast and says why when the cluster has fewer GPUs than verl's trainer.nnodes x n_gpus_per_node.
PREFLIGHT = (
    "import sys, ray; ray.init(logging_level='ERROR'); need = int(sys.argv[1]); "
    "have = ray.cluster_resources().get('GPU', 0); "
    "print(f'rewardbox preflight: the Ray cluster has {have:g} GPUs, verl needs {need}', flush=True); "
    "sys.exit(0) if have >= need else (print(f'no GPU: verl needs {need} GPUs (trainer.nnodes x "
    "trainer.n_gpus_per_node) and this Ray cluster has {have:g}; point REWARDBOX_RAY_JOB_ADDRESS at a GPU "
    f"cluster', file=sys.stderr, flush=True), sys.exit({NO_GPU_EXIT_CODE}))"
)

RowsFn = Callable[[Sequence[Any]], list[dict[str, Any]]]
"""The training pool (a list of ``Task``) as verl dataset rows (``prompt``, ``agent_name``, ``extra_info``, ...)."""
AgentFn = Callable[[Path], dict[str, Any]]
"""Writes verl's agent-loop file into a directory; returns the overrides that make verl use it."""


def pool_rows(tasks: Sequence[Any]) -> list[dict[str, Any]]:
    """verl dataset rows for the training pool (``rewardbox.training.verl.rows.pool_to_verl_rows``)."""
    from rewardbox.training.verl.rows import pool_to_verl_rows

    return pool_to_verl_rows(tasks)


def agent_loop_overrides(out_dir: Path) -> dict[str, Any]:
    """verl's overrides for the rewardbox agent loop (``verl_agent_loop.build_agent_loop_config``)."""
    from rewardbox.training.verl.agent_loop import build_agent_loop_config

    return build_agent_loop_config(out_dir)


@dataclass
class VerlLaunch:
    """Everything about one verl run that is known before it starts.

    Each launch has its own directory for rows and checkpoints, named by its Ray submission id:
    verl resumes from the latest checkpoint in ``trainer.default_local_dir``, so a shared one
    would make a new run (another pool, other settings) continue, or merely return, an old one.

    Attributes:
        submission_id: the Ray job's id (``rewardbox-grpo-<12 hex>``).
        command: verl's argv (``python -m verl.trainer.main_ppo k=v ...``).
        overrides: verl's overrides, ``{dotted key: value}``.
        entrypoint: the Ray job's shell command (the preflight, then ``command``).
        checkpoint_dir: ``trainer.default_local_dir`` (where ``global_step_N/actor`` appear).
        train_path: the Parquet file of dataset rows.
        rows: how many rows it holds (one per training task).
        config: the launch settings (model, data, cluster shape) the overrides came from.
        run_overrides: the overrides beyond the GRPO mapping (:func:`run_overrides`, ``extra_overrides``).
    """

    submission_id: str
    command: list[str]
    overrides: dict[str, Any]
    entrypoint: str
    checkpoint_dir: Path
    train_path: Path
    rows: int
    config: VerlLaunchConfig
    run_overrides: dict[str, Any]


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write verl dataset rows to Parquet (pyarrow infers the nested types). Raises ValueError when empty."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError("the training pool is empty: verl has no dataset rows to train on")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def job_python(cfg: VerlBackendConfig, local_head: bool) -> str:
    """The job's Python: ``cfg.python``, else (see ``VerlBackendConfig.python``) by where the job runs."""
    if cfg.python:
        return cfg.python
    if not local_head:
        return "python3"
    here = verl_python(cfg)
    return here if Path(here).exists() else sys.executable


def prepare_launch(
    grpo: GRPOConfig,
    cfg: VerlBackendConfig,
    tasks: Sequence[Any],
    model_path: str,
    shared_dir: str | Path,
    rows_fn: RowsFn | None = None,
    agent_fn: AgentFn | None = None,
    local_head: bool = False,
) -> VerlLaunch:
    """Write the dataset rows and build the launch for ``grpo`` on ``cfg``'s cluster.

    Args:
        tasks: the training pool.
        model_path: the base checkpoint (a Hugging Face directory every node can read, or a hub id).
        shared_dir: where rows and checkpoints go (``cfg.shared_dir`` when set, else the data directory).
        rows_fn: the pool's hydration into verl rows (default :func:`pool_rows`).
        agent_fn: the agent loop's file and overrides (default :func:`agent_loop_overrides`).
        local_head: the job runs on a local Ray head started here (picks the default Python).

    With ``cfg.attach_job_id`` the launch is that job's (its id, run directory and checkpoints); its
    rows are written only if they are missing.

    Raises:
        ValueError: an empty pool, settings verl has no equivalent for, or overrides that lift the
            refill bound (``verl_guard.check_refill_bound``).
        VerlContextError: the engine's context cannot hold the prompt and response lengths
            (``verl_config.context_problem``); no rows are written.
    """
    root = Path(cfg.shared_dir or shared_dir).resolve()
    submission_id = cfg.attach_job_id or f"rewardbox-grpo-{uuid.uuid4().hex[:12]}"
    run_dir = root / "verl" / submission_id
    train_path = run_dir / "train.parquet"
    launch = _launch_config(cfg, root, submission_id, model_path, train_path)
    extra = {
        **(agent_fn or agent_loop_overrides)(run_dir),
        **run_overrides(grpo, cfg),
        **cfg.extra_overrides,
    }
    # also when cfg did not come through a Profile
    check_refill_bound(extra, grpo.max_refill_rounds)
    overrides = {**verl_overrides(grpo, launch), **extra}
    problem, _ = context_problem(overrides)  # the dry run's refusal, for a real launch too
    if problem:
        raise VerlContextError(problem)
    # a re-attached job reads the rows it was given
    if not (cfg.attach_job_id and train_path.is_file()):
        write_rows((rows_fn or pool_rows)(tasks), train_path)
    return _launch(cfg, launch, overrides, extra, submission_id, train_path, local_head)


def _launch_config(
    cfg: VerlBackendConfig, root: Path, submission_id: str, model_path: str, train_path: Path
) -> VerlLaunchConfig:
    """``cfg.launch`` with the model, the rows (train and validation) and this run's checkpoint directory."""
    experiment = cfg.launch.get(
        "experiment_name", VerlLaunchConfig.model_fields["experiment_name"].default
    )
    return VerlLaunchConfig(
        **{
            **cfg.launch,
            "model_path": model_path,
            "train_files": str(train_path),
            "val_files": str(train_path),
            "checkpoint_dir": str(root / "checkpoints" / "verl" / experiment / submission_id),
        }
    )


def _launch(
    cfg: VerlBackendConfig,
    launch: VerlLaunchConfig,
    overrides: dict[str, Any],
    extra: dict[str, Any],
    submission_id: str,
    train_path: Path,
    local_head: bool,
) -> VerlLaunch:
    """The :class:`VerlLaunch` of :func:`prepare_launch` once its rows are written: verl's argv and the
    Ray job's shell command (the GPU preflight first when ``cfg.preflight_gpus``)."""
    python = job_python(cfg, local_head)
    command = launch_command(overrides, python=python)
    entrypoint = shlex.join(command)
    if cfg.preflight_gpus:
        gpus = launch.nnodes * launch.n_gpus_per_node
        entrypoint = f"{shlex.join([python, '-c', PREFLIGHT, str(gpus)])} && {entrypoint}"
    checkpoint_dir = Path(overrides["trainer.default_local_dir"])  # an extra override may move it
    return VerlLaunch(
        submission_id,
        command,
        overrides,
        entrypoint,
        checkpoint_dir,
        train_path,
        _parquet_rows(train_path),
        launch,
        extra,
    )


def run_overrides(grpo: GRPOConfig, cfg: VerlBackendConfig) -> dict[str, Any]:
    """Overrides of the run itself: console metrics (the step lines we parse) and when to save.

    verl saves only when ``trainer.save_freq > 0`` (every ``save_freq`` steps and at the last
    step), so the default ``-1`` would leave nothing to merge: we save at the last step, or
    every ``cfg.save_every_steps``.
    """
    return {
        "trainer.logger": ["console"],
        "trainer.save_freq": cfg.save_every_steps or max(1, grpo.steps),
    }


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


@dataclass
class VerlRunResult:
    """A verl run that ended SUCCEEDED with a checkpoint.

    Attributes:
        job_id: the Ray job's submission id.
        steps: verl's per-step progress, in log order.
        checkpoint: the latest complete checkpoint (``global_step_N/actor``).
        elapsed_s: wall time of the job as watched.
        log_lines: lines of the job's log passed on.
    """

    job_id: str
    steps: list[StepProgress]
    checkpoint: VerlCheckpoint
    elapsed_s: float
    log_lines: int = 0


def run_verl_training(
    client: JobClient,
    launch: VerlLaunch,
    cfg: VerlBackendConfig,
    log: Callable[[str], None],
    runtime_env: dict[str, Any] | None = None,
    on_submit: Callable[[str], None] | None = None,
) -> VerlRunResult:
    """Submit ``launch`` as a Ray job (or re-attach to ``cfg.attach_job_id``), stream its log, return its checkpoint.

    Every log line goes to ``log`` as it arrives; each verl step line is followed by a one-line
    summary (reward mean, zero-variance share, throughput, step time).

    Args:
        client: Ray's job client for the cluster (``RayClusterResource.job_client``).
        runtime_env: Ray's runtime_env for the job, merged over ``cfg.runtime_env``; its
            ``RAY_JOB_STOP_WAIT_TIME_S`` defaults to ``cfg.stop_timeout_s`` (the SIGTERM grace).
        on_submit: called with the job id as soon as the job is submitted (or re-attached),
            before any wait (the asset records it there).

    Raises:
        JobStartTimeoutError: the job stayed PENDING past ``cfg.start_timeout_s`` (stopped).
        JobContactLostError: the job server went unanswered for ``cfg.contact_timeout_s``; the
            job was not stopped (set ``verl.attach_job_id`` to the id in the message to follow it).
        JobFailedError: the job ended FAILED or STOPPED or ran past ``cfg.job_timeout_s`` (the
            message holds Ray's status message and the log tail: "no GPU" on a CPU cluster), or
            it succeeded without writing a checkpoint.
        BaseException: an interrupt (terminated run) after the job was stopped and had ended.
    """
    lines = StepLog(log)
    job_id = submit_or_attach(
        client, launch.entrypoint, launch.submission_id, launch.rows, cfg, log, runtime_env
    )
    if on_submit is not None:
        on_submit(job_id)
    outcome = watch_job(
        client,
        job_id,
        lines,
        timeout_s=cfg.job_timeout_s,
        poll_s=cfg.poll_s,
        contact_timeout_s=cfg.contact_timeout_s,
        start_timeout_s=cfg.start_timeout_s,
        stop_timeout_s=cfg.stop_timeout_s,
    )
    if outcome.status != "SUCCEEDED":
        raise outcome_error(outcome)
    return VerlRunResult(
        job_id, lines.steps, _checkpoint(launch, outcome), outcome.elapsed_s, lines.count
    )


def _checkpoint(launch: VerlLaunch, outcome: JobOutcome) -> VerlCheckpoint:
    """The latest complete checkpoint of a job that succeeded; ``JobFailedError`` when it wrote none."""
    checkpoint = latest_checkpoint(launch.checkpoint_dir)
    if checkpoint is None:
        raise JobFailedError(
            f"Ray job {outcome.job_id} succeeded but wrote no global_step_N/actor checkpoint under "
            f"{launch.checkpoint_dir} (is trainer.save_freq set, and is the directory on a "
            "filesystem this process shares with the cluster?)",
            outcome,
        )
    return checkpoint


def verl_python(cfg: VerlBackendConfig) -> str:
    """The Python of verl's environment on this machine: ``merge_python``, ``$REWARDBOX_VERL_PYTHON``, ``.venv-verl``."""
    if cfg.merge_python:
        return cfg.merge_python
    if os.environ.get("REWARDBOX_VERL_PYTHON"):
        return os.environ["REWARDBOX_VERL_PYTHON"]
    return str(Path(__file__).resolve().parents[3] / ".venv-verl" / "bin" / "python")
