"""Settings of the verl backend (``grpo.backend: verl``): the profile's ``verl`` section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rewardbox.training.verl.config import VerlLaunchConfig

_FILLED_IN = ("model_path", "train_files", "val_files", "checkpoint_dir")
MERGE_RTOL = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
"""Default relative tolerance of a merge cast to that dtype: its unit roundoff (8 / 11 significand bits)."""


class VerlBackendConfig(BaseModel):
    """How GRPO runs on verl over a Ray cluster (used when ``grpo.backend`` is ``verl``).

    Attributes:
        dry_run: write the launch command and verl's resolved config into the asset's
            metadata (validated by verl's own schema when verl's environment is here),
            and submit nothing.
        python: the job's Python on the cluster's head node, with verl installed. None: ``python3``
            on a cluster (``job_address`` set); on the local head, verl's environment here when it
            exists (``merge_python``, ``$REWARDBOX_VERL_PYTHON``, ``.venv-verl``), else this process's
            Python (it has Ray, so the GPU preflight runs and says what is missing).
        merge_python: verl's Python on this machine, for the model merger; None uses
            ``$REWARDBOX_VERL_PYTHON``, else ``.venv-verl/bin/python`` (``make verl-env``).
        preflight_gpus: start the job with a check that the cluster has
            ``trainer.nnodes x trainer.n_gpus_per_node`` GPUs; it fails in seconds, saying
            "no GPU", where verl would fail later and less clearly.
        launch: fields of ``verl_config.VerlLaunchConfig`` other than the model, data and
            checkpoint paths (``nnodes``, ``n_gpus_per_node``, ``max_prompt_tokens``,
            ``max_response_tokens``, ``micro_batch_sequences_per_gpu``, ``rollout_engine``,
            ``experiment_name``).
        extra_overrides: further verl overrides, ``{dotted key: value}`` (e.g.
            ``trainer.save_freq``); they win over the mapped ones.
        save_every_steps: verl's ``trainer.save_freq``; None saves at the last step only.
        shared_dir: a directory every Ray node and the Dagster process see at the same path
            (dataset rows, checkpoints); None: the profile's data directory (a local cluster).
        runtime_env: Ray's runtime_env for the job (``env_vars``, ``working_dir``, ...).
        request_timeout_s: limit of one HTTP request to the job server, seconds.
        connect_timeout_s: how long to retry reaching the job server, seconds.
        job_timeout_s: the job's time limit, seconds; past it the job is stopped.
        contact_timeout_s: how long the job server may go unanswered while a job is watched,
            seconds; shorter gaps are waited out, a longer one ends the step ``LOST_CONTACT``
            with the job left running (never stopped), to re-attach with ``attach_job_id``.
        start_timeout_s: how long a job may stay PENDING (no GPUs free, a runtime_env that
            never finishes), seconds; past it the job is stopped and the step fails naming it.
        stop_timeout_s: how long a stop waits for the job to end, seconds; also the job's grace
            period between SIGTERM and SIGKILL (Ray's ``RAY_JOB_STOP_WAIT_TIME_S``, default 3 s
            in Ray), so a trainer that saves on SIGTERM has that long.
        attach_job_id: a job submitted earlier (``rewardbox-grpo-<12 hex>``, in the asset's
            observation and the failure of a ``LOST_CONTACT`` step): watch it to its end
            instead of submitting a new one.
        poll_s: seconds between polls of the job's status and log.
        merge_timeout_s: limit of verl's model merger, seconds.
        merge_dtype: the merged checkpoint's dtype: ``keep`` (default) the dtype the actor's
            checkpoint holds (float32 stays float32), or one stated here (``bfloat16`` halves the
            files and rounds each weight; see ``verl_merge``).
        merge_rtol, merge_atol: how far each merged weight may be from the trained one,
            ``|merged - trained| <= atol + rtol * |trained|``, enforced by the blocking
            merged-checkpoint gate. None: exact for ``keep`` and ``float32``, the dtype's rounding
            (``MERGE_RTOL``) for ``bfloat16`` / ``float16``.
    """

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False
    python: str | None = None
    merge_python: str | None = None
    preflight_gpus: bool = True
    launch: dict[str, Any] = Field(default_factory=dict)
    extra_overrides: dict[str, Any] = Field(default_factory=dict)
    save_every_steps: int | None = Field(None, ge=1)
    shared_dir: str | None = None
    runtime_env: dict[str, Any] = Field(default_factory=dict)
    request_timeout_s: float = Field(30.0, gt=0)
    connect_timeout_s: float = Field(60.0, gt=0)
    job_timeout_s: float = Field(48 * 3600.0, gt=0)
    contact_timeout_s: float = Field(120.0, gt=0)
    start_timeout_s: float = Field(1800.0, gt=0)
    stop_timeout_s: float = Field(60.0, gt=0)
    attach_job_id: str | None = Field(None, pattern=r"^rewardbox-grpo-[0-9a-f]{12}$")
    poll_s: float = Field(2.0, gt=0)
    merge_timeout_s: float = Field(3600.0, gt=0)
    merge_dtype: Literal["keep", "bfloat16", "float16", "float32"] = "keep"
    merge_rtol: float | None = Field(None, ge=0)
    merge_atol: float = Field(0.0, ge=0)

    def merge_tolerance(self) -> tuple[float, float]:
        """(rtol, atol) of the merge against the trained weights (see ``merge_rtol``)."""
        rtol = MERGE_RTOL.get(self.merge_dtype, 0.0) if self.merge_rtol is None else self.merge_rtol
        return rtol, self.merge_atol

    @field_validator("launch")
    @classmethod
    def _launch_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        filled = sorted(set(value) & set(_FILLED_IN))
        if filled:
            raise ValueError(
                f"verl.launch sets {filled}: these come from the pipeline (base checkpoint, "
                "training pool, shared_dir); remove them"
            )
        VerlLaunchConfig(
            **value, **{name: "x" for name in _FILLED_IN}
        )  # unknown keys and bad values fail here
        return value
