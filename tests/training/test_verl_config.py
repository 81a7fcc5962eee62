"""Our GRPO settings as verl overrides; the dry run; verl's own schema when its environment exists."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from rewardbox import strict_json
from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl.config import (
    MAX_MODEL_LEN,
    VerlContextError,
    VerlLaunchConfig,
    dry_run,
    format_override,
    launch_command,
    nested,
    verl_overrides,
)

LAUNCH = VerlLaunchConfig(
    model_path="Qwen/Qwen3-8B", train_files="data/train.parquet", val_files="data/val.parquet"
)
REFERENCE = GRPOConfig(
    group_size=8,
    tasks_per_step=18,
    loss_aggregation="token-mean",
    learning_rate=1e-6,
    steps=50,
    max_refill_rounds=2,
)
ROOT = Path(__file__).resolve().parents[2]


def _verl_python() -> str | None:
    """verl's environment: ``REWARDBOX_VERL_PYTHON``, else ``.venv-verl`` (``make verl-env``)."""
    found = os.environ.get("REWARDBOX_VERL_PYTHON") or str(ROOT / ".venv-verl" / "bin" / "python")
    return found if Path(found).exists() else None


def test_reference_settings_map_onto_verl_keys():
    o = verl_overrides(REFERENCE, LAUNCH)
    assert o["actor_rollout_ref.rollout.n"] == 8 and o["data.train_batch_size"] == 18
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == 18  # one update per batch
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert o["actor_rollout_ref.actor.optim.lr"] == 1e-6 and o["trainer.total_training_steps"] == 50
    assert (o["algorithm.adv_estimator"], o["algorithm.norm_adv_by_std_in_grpo"]) == ("grpo", True)
    assert (
        o["algorithm.use_kl_in_reward"] is False
        and o["actor_rollout_ref.actor.use_kl_loss"] is False
    )
    assert (o["algorithm.filter_groups.enable"], o["algorithm.filter_groups.metric"]) == (
        True,
        "reward",
    )
    assert (
        o["algorithm.filter_groups.max_num_gen_batches"] == 3
    )  # the first batch + 2 refill rounds
    assert (
        o["actor_rollout_ref.actor.clip_ratio_low"]
        == o["actor_rollout_ref.actor.clip_ratio_high"]
        == 0.2
    )
    # the zero-variance share reaches verl's step line through rewardbox's replay buffer
    assert o["trainer.v1.sampler.custom_sampler.name"] == "ZeroVarianceReplayBuffer"
    assert o["actor_rollout_ref.model.lora_rank"] == 16  # finetune lora (the default)
    full = verl_overrides(REFERENCE.model_copy(update={"finetune": "full"}), LAUNCH)
    assert (
        full["actor_rollout_ref.model.lora_rank"] == 0
    )  # verl trains every weight, as the local full fine-tune


def test_dr_grpo_turns_off_the_std_division_and_an_unknown_estimator_is_refused():
    dr = verl_overrides(REFERENCE.model_copy(update={"advantage_estimator": "dr_grpo"}), LAUNCH)
    assert (dr["algorithm.adv_estimator"], dr["algorithm.norm_adv_by_std_in_grpo"]) == (
        "grpo",
        False,
    )
    with pytest.raises(ValueError, match="no verl equivalent"):
        verl_overrides(REFERENCE.model_copy(update={"advantage_estimator": "rloo"}), LAUNCH)


def test_hydra_values_and_the_launch_command():
    assert format_override("a.b", True) == "a.b=true" and format_override("a", None) == "a=null"
    assert format_override("m", ["q_proj", "v_proj"]) == "m=[q_proj,v_proj]"
    assert format_override("++k", {"a": "${x.y}", "b": False}) == "++k={a:${x.y},b:false}"
    assert nested({"++a.b": 1, "a.c": 2}) == {"a": {"b": 1, "c": 2}}
    command = launch_command({"x.y": 1e-6, "z": False})
    assert command == ["python3", "-m", "verl.trainer.main_ppo", "x.y=1e-06", "z=false"]


def test_dry_run_without_verl_writes_the_command_and_config_and_says_it_did_not_validate(tmp_path):
    result = dry_run(REFERENCE, LAUNCH, tmp_path)
    assert not result.validated and "no verl environment" in result.problem
    assert shlex.split((tmp_path / "launch.sh").read_text().splitlines()[1]) == result.command
    tree = yaml.safe_load(result.overrides_path.read_text())
    assert (
        tree == nested(verl_overrides(REFERENCE, LAUNCH))
        and tree["actor_rollout_ref"]["rollout"]["n"] == 8
    )


def _model_dir(tmp_path, config: dict) -> str:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(strict_json.dumps(config))
    return str(model)


def test_issue24_item1_a_context_that_cannot_hold_the_lengths_is_refused_naming_the_keys(tmp_path):
    # our defaults (4096 + 8192) on a model whose position limit (verl's default max_model_len) is 8192
    launch = LAUNCH.model_copy(
        update={"model_path": _model_dir(tmp_path, {"max_position_embeddings": 8192})}
    )
    with pytest.raises(VerlContextError) as info:
        dry_run(REFERENCE, launch, tmp_path / "out")
    message = str(info.value)
    for key in (
        MAX_MODEL_LEN,
        "data.max_prompt_length (4096)",
        "data.max_response_length (8192)",
        "12288",
    ):
        assert key in message
    assert (
        "max_position_embeddings, 8192" in message and not (tmp_path / "out").exists()
    )  # nothing written
    # an explicit max_model_len is what counts: too small refused, large enough accepted
    with pytest.raises(VerlContextError, match=rf"{MAX_MODEL_LEN}=12287 cannot hold"):
        dry_run(REFERENCE, LAUNCH, tmp_path / "small", extra_overrides={MAX_MODEL_LEN: 12287})
    ok = dry_run(REFERENCE, launch, tmp_path / "ok", extra_overrides={MAX_MODEL_LEN: 12288})
    assert ok.skipped_checks == []
    fits = dry_run(
        REFERENCE, launch.model_copy(update={"max_response_tokens": 4096}), tmp_path / "fits"
    )
    assert fits.skipped_checks == []


def test_issue24_item1_own_case_a_nested_position_limit_and_an_unreadable_model(tmp_path):
    launch = LAUNCH.model_copy(
        update={
            "model_path": _model_dir(tmp_path, {"text_config": {"max_position_embeddings": 4096}})
        }
    )
    with pytest.raises(VerlContextError, match="max_position_embeddings, 4096"):
        dry_run(REFERENCE, launch, tmp_path / "out")
    unknown = dry_run(
        REFERENCE, LAUNCH, tmp_path / "hub"
    )  # a hub id: no config.json here, the check is listed
    assert len(unknown.skipped_checks) == 1 and MAX_MODEL_LEN in unknown.skipped_checks[0]


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(600)
def test_verl_accepts_the_reference_config_and_rejects_an_indivisible_batch(tmp_path):
    ok = dry_run(REFERENCE, LAUNCH, tmp_path / "ok", verl_python=_verl_python())
    assert ok.validated, ok.problem
    resolved = yaml.safe_load(ok.resolved_path.read_text())
    assert (
        resolved["actor_rollout_ref"]["rollout"]["n"] == 8
        and resolved["algorithm"]["filter_groups"]["enable"]
    )
    # 3 groups x 2 rollouts = 6 sequences cannot be split over 8 GPUs: verl's own check says so
    small = REFERENCE.model_copy(update={"group_size": 2, "tasks_per_step": 3})
    bad = dry_run(small, LAUNCH, tmp_path / "bad", verl_python=_verl_python())
    assert not bad.validated and "divisible" in bad.problem
