"""Our GRPO settings as verl's Hydra overrides, the exact launch command, and a dry run.

verl (``verl.trainer.main_ppo``) is configured by Hydra overrides on its
``ppo_trainer`` config. The mapping of :class:`GRPOConfig` (names as in
verl's ``ppo_trainer.yaml``, 0.9.x):

==============================  ===================================================================
ours                            verl
==============================  ===================================================================
advantage_estimator grpo        ``algorithm.adv_estimator=grpo``, ``norm_adv_by_std_in_grpo=true``
advantage_estimator dr_grpo     ``adv_estimator=grpo``, ``norm_adv_by_std_in_grpo=false`` (Dr. GRPO,
                                arXiv 2503.20783: no division by the group's std)
group_size G                    ``actor_rollout_ref.rollout.n``
tasks_per_step B                ``data.train_batch_size`` (prompts per step) and ``ppo_mini_batch_size``
                                (one update per batch, as the local trainer does)
loss_aggregation                ``actor_rollout_ref.actor.loss_agg_mode`` (same names)
learning_rate, weight_decay     ``actor_rollout_ref.actor.optim.lr`` / ``.weight_decay``
clip_eps                        ``clip_ratio_low`` = ``clip_ratio_high`` (PPO clip)
no KL                           ``algorithm.use_kl_in_reward=false``, ``actor.use_kl_loss=false``
zero-variance replacement       ``algorithm.filter_groups.enable=true``, ``metric=reward``,
                                ``max_num_gen_batches = max_refill_rounds + 1`` (DAPO dynamic
                                sampling, arXiv 2503.14476)
zero-variance share             ``trainer.v1.sampler.custom_sampler`` = rewardbox's replay buffer,
                                which logs ``rewardbox/zero_variance_frac`` (``verl_sampler``)
steps                           ``trainer.total_training_steps``
finetune lora: r, alpha,        ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` /
targets                         ``target_modules``; finetune full: ``lora_rank=0``
max_grad_norm, temperature      ``actor.grad_clip``, ``rollout.temperature``
==============================  ===================================================================

Validation against verl's own schema runs in verl's environment (its pins clash
with ours): ``rewardbox.training.verl.validate`` composes verl's config with these
overrides and calls verl's ``validate_config``; :func:`dry_run` invokes it when
given that environment's Python.

**Context.** verl's engine holds one sequence in ``actor_rollout_ref.rollout.max_model_len``
tokens (default null: the model's ``max_position_embeddings``); a rollout's prompt and whole
multi-turn response must fit, or turns are cut by the context instead of the response
budget. :func:`dry_run` refuses (:class:`VerlContextError`, before anything is written) a
launch whose context is smaller than ``data.max_prompt_length + data.max_response_length``
(:func:`context_problem`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from rewardbox import strict_json
from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl.sampler import sampler_overrides

ENTRY_POINT = "verl.trainer.main_ppo"
VALIDATE_TIMEOUT_S = 300.0
_ESTIMATORS = {"grpo": ("grpo", True), "dr_grpo": ("grpo", False)}


class VerlLaunchConfig(BaseModel):
    """What verl needs beyond the GRPO maths: model, data, cluster shape, lengths.

    Attributes:
        model_path: Hugging Face model directory or id (the base checkpoint).
        train_files, val_files: verl dataset rows (Parquet) of the training pool.
        nnodes, n_gpus_per_node: the Ray GPU cluster's shape.
        max_prompt_tokens, max_response_tokens: verl's ``data.max_prompt_length`` /
            ``max_response_length`` (a multi-turn response holds every agent, tool and user turn).
        micro_batch_sequences_per_gpu: sequences per forward/backward per GPU (memory).
        rollout_engine: verl's ``rollout.name`` (``vllm`` or ``sglang``).
        experiment_name, checkpoint_dir: verl's ``trainer.experiment_name`` / ``default_local_dir``.
    """

    model_config = ConfigDict(extra="forbid")

    model_path: str
    train_files: str
    val_files: str
    nnodes: int = Field(1, ge=1)
    n_gpus_per_node: int = Field(8, ge=1)
    max_prompt_tokens: int = Field(4096, ge=1)
    max_response_tokens: int = Field(8192, ge=1)
    micro_batch_sequences_per_gpu: int = Field(2, ge=1)
    rollout_engine: str = "vllm"
    experiment_name: str = "rewardbox-grpo"
    checkpoint_dir: str = "checkpoints/verl"


class VerlContextError(ValueError):
    """The engine's context cannot hold the prompt and response lengths (a config error, names the keys)."""


MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"


def position_limit(model_path: str) -> int | None:
    """``max_position_embeddings`` of a local Hugging Face model directory (or its ``text_config``), else None."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    config = strict_json.loads(path.read_text())
    value = config.get("max_position_embeddings") or (config.get("text_config") or {}).get(
        "max_position_embeddings"
    )
    return int(value) if isinstance(value, int) else None


def context_problem(overrides: dict[str, Any]) -> tuple[str | None, str | None]:
    """(why the engine's context cannot hold the lengths, why it could not be checked); each None when not so.

    The context is ``actor_rollout_ref.rollout.max_model_len`` when set, else (verl's default)
    the model's ``max_position_embeddings`` read from ``actor_rollout_ref.model.path``'s
    ``config.json``; it must hold ``data.max_prompt_length + data.max_response_length``.
    """
    prompt, response = (
        int(overrides["data.max_prompt_length"]),
        int(overrides["data.max_response_length"]),
    )
    set_len = overrides.get(MAX_MODEL_LEN)
    model_path = str(overrides.get("actor_rollout_ref.model.path", ""))
    context = int(set_len) if set_len is not None else position_limit(model_path)
    if context is None:
        return None, (
            f"{MAX_MODEL_LEN} against data.max_prompt_length + data.max_response_length: neither is "
            f"{MAX_MODEL_LEN} set nor is {model_path}/config.json readable here"
        )
    if context >= prompt + response:
        return None, None
    source = (
        f"{MAX_MODEL_LEN}={context}"
        if set_len is not None
        else f"{MAX_MODEL_LEN} (null: the model's max_position_embeddings, {context})"
    )
    return (
        f"{source} cannot hold data.max_prompt_length ({prompt}) + data.max_response_length ({response}) = "
        f"{prompt + response} tokens: raise {MAX_MODEL_LEN} (within the model's position limit) or lower "
        "grpo/verl's max_prompt_tokens / max_response_tokens"
    ), None


def verl_overrides(grpo: GRPOConfig, launch: VerlLaunchConfig) -> dict[str, Any]:
    """verl's overrides for ``grpo`` on ``launch``'s cluster: ``{dotted key: value}``, insertion-ordered.

    Raises:
        ValueError: an advantage estimator verl has no equivalent for.
    """
    if grpo.advantage_estimator not in _ESTIMATORS:
        raise ValueError(
            f"advantage_estimator {grpo.advantage_estimator!r} has no verl equivalent; "
            f"use one of {sorted(_ESTIMATORS)}"
        )
    estimator, norm_by_std = _ESTIMATORS[grpo.advantage_estimator]
    actor, rollout, model = (
        "actor_rollout_ref.actor",
        "actor_rollout_ref.rollout",
        "actor_rollout_ref.model",
    )
    return {
        "algorithm.adv_estimator": estimator,
        "algorithm.norm_adv_by_std_in_grpo": norm_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "reward",
        "algorithm.filter_groups.max_num_gen_batches": grpo.max_refill_rounds + 1,
        "data.train_files": launch.train_files,
        "data.val_files": launch.val_files,
        "data.train_batch_size": grpo.tasks_per_step,
        "data.max_prompt_length": launch.max_prompt_tokens,
        "data.max_response_length": launch.max_response_tokens,
        "data.seed": grpo.seed,
        f"{model}.path": launch.model_path,
        f"{model}.lora_rank": grpo.lora_r
        if grpo.finetune == "lora"
        else 0,  # 0: verl trains every weight
        f"{model}.lora_alpha": grpo.lora_alpha,
        f"{model}.target_modules": list(grpo.lora_target_modules),
        f"{actor}.optim.lr": grpo.learning_rate,
        f"{actor}.optim.weight_decay": grpo.weight_decay,
        f"{actor}.ppo_mini_batch_size": grpo.tasks_per_step,
        f"{actor}.ppo_micro_batch_size_per_gpu": launch.micro_batch_sequences_per_gpu,
        f"{actor}.loss_agg_mode": grpo.loss_aggregation,
        f"{actor}.clip_ratio_low": grpo.clip_eps,
        f"{actor}.clip_ratio_high": grpo.clip_eps,
        f"{actor}.use_kl_loss": False,
        f"{actor}.grad_clip": grpo.max_grad_norm,
        f"{rollout}.name": launch.rollout_engine,
        f"{rollout}.n": grpo.group_size,
        f"{rollout}.temperature": grpo.temperature,
        f"{rollout}.log_prob_micro_batch_size_per_gpu": launch.micro_batch_sequences_per_gpu,
        "trainer.total_training_steps": grpo.steps,
        "trainer.nnodes": launch.nnodes,
        "trainer.n_gpus_per_node": launch.n_gpus_per_node,
        "trainer.experiment_name": launch.experiment_name,
        "trainer.default_local_dir": launch.checkpoint_dir,
        **sampler_overrides(),
    }


def format_value(value: Any) -> str:
    """A Hydra override value: booleans ``true``/``false``, None ``null``, lists ``[a,b]``, dicts ``{k:v}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def format_override(key: str, value: Any) -> str:
    """One Hydra override ``key=value`` (``format_value``); a ``++`` on ``key`` is kept (Hydra's force-add)."""
    return f"{key}={format_value(value)}"


def launch_command(overrides: dict[str, Any], python: str = "python3") -> list[str]:
    """The argv that starts verl's trainer with ``overrides`` (run it on the Ray head, or submit it as a job)."""
    return [python, "-m", ENTRY_POINT, *(format_override(k, v) for k, v in overrides.items())]


@dataclass
class DryRun:
    """What a dry run wrote and found.

    Attributes:
        command: the exact argv; also written, shell-quoted, to ``launch.sh``.
        overrides_path: ``verl_overrides.yaml`` (our overrides as a nested tree).
        resolved_path: verl's full composed config (``verl_resolved.yaml``), or None when not validated.
        validated: verl's own ``validate_config`` accepted the config.
        problem: why validation failed or was skipped, else "".
        skipped_checks: verl checks that could not run here (vLLM's LoRA-rank check without vLLM).
    """

    command: list[str]
    overrides_path: Path
    resolved_path: Path | None
    validated: bool
    problem: str = ""
    skipped_checks: list[str] = field(default_factory=list)


def nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as a nested tree (``{"a.b": 1}`` -> ``{"a": {"b": 1}}``; Hydra's ``+`` / ``++`` dropped)."""
    tree: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, leaf = key.lstrip("+").split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def dry_run(
    grpo: GRPOConfig,
    launch: VerlLaunchConfig,
    out_dir: str | Path,
    verl_python: str | None = None,
    extra_overrides: dict[str, Any] | None = None,
    python: str = "python3",
) -> DryRun:
    """Write the launch command and config for ``grpo`` into ``out_dir``; validate with verl when possible.

    Args:
        verl_python: the Python of verl's own environment; None skips validation (``problem`` says so).
        extra_overrides: overrides added after (and winning over) the mapped ones, as the job has them.
        python: the command's interpreter (the job's Python on the cluster).

    Returns:
        A :class:`DryRun`. No GPU, no cluster and no verl import in this process.

    Raises:
        VerlContextError: the engine's context cannot hold the prompt and response lengths
            (:func:`context_problem`); nothing is written.
    """
    overrides = {**verl_overrides(grpo, launch), **(extra_overrides or {})}
    problem, unchecked = context_problem(overrides)
    if problem:
        raise VerlContextError(problem)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = launch_command(overrides, python)
    (out / "launch.sh").write_text("#!/bin/sh\n" + shlex.join(command) + "\n")
    overrides_path = out / "verl_overrides.yaml"
    overrides_path.write_text(yaml.safe_dump(nested(overrides), sort_keys=False))
    skipped = [unchecked] if unchecked else []
    if verl_python is None:
        return DryRun(
            command,
            overrides_path,
            None,
            False,
            "not validated: no verl environment given",
            skipped,
        )
    resolved_path = out / "verl_resolved.yaml"
    proc = _validate(verl_python, overrides, resolved_path)
    if proc.returncode != 0:
        return DryRun(
            command,
            overrides_path,
            None,
            False,
            (proc.stderr or proc.stdout).strip()[-2000:],
            skipped,
        )
    skipped += json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else []
    return DryRun(command, overrides_path, resolved_path, True, skipped_checks=skipped)


def _validate(
    verl_python: str, overrides: dict[str, Any], resolved_path: Path
) -> subprocess.CompletedProcess[str]:
    """Run ``rewardbox.training.verl.validate`` in verl's environment on ``overrides``; it writes the
    resolved config to ``resolved_path`` and prints the checks it skipped (JSON) as its last line."""
    args = [verl_python, "-m", "rewardbox.training.verl.validate", str(resolved_path)]
    root = str(Path(__file__).resolve().parents[3])
    return subprocess.run(
        args,
        input=strict_json.dumps([format_override(k, v) for k, v in overrides.items()]),
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )


if (
    __name__ == "__main__"
):  # python -m rewardbox.training.verl.config OUT_DIR [VERL_PYTHON]: the reference run
    reference = VerlLaunchConfig(
        model_path="Qwen/Qwen3-8B", train_files="data/train.parquet", val_files="data/val.parquet"
    )
    result = dry_run(
        GRPOConfig(), reference, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    )
    print(
        shlex.join(result.command),
        "\nvalidated:",
        result.validated,
        result.problem,
        result.skipped_checks,
    )
