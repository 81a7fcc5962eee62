"""Check verl overrides against verl's own config (run inside verl's environment, never ours).

``python -m rewardbox.training.verl.validate OUT.yaml < overrides.json``: reads a
JSON list of Hydra overrides, composes verl's ``ppo_trainer`` config with them
(an unknown key is an error), runs verl's ``validate_config`` (batch sizes against
GPUs, micro-batch settings, the actor's dataclass) and builds verl's algorithm
dataclass; writes the resolved config to OUT.yaml and prints the checks it had to
skip (a JSON list) on stdout. Exit status 1 with the reason on stderr when verl
rejects it. Imports verl: never imported by rewardbox itself.

One check of verl's needs vLLM installed (a LoRA rank that vLLM serves, checked only
when ``rollout.name`` is ``vllm``); vLLM is a GPU package, so on a CPU machine without it
that single check is skipped, and named in the output, while every other check still runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rewardbox import strict_json


def validate(overrides: list[str]) -> tuple[str, list[str]]:
    """(the resolved config as YAML, checks skipped), after verl's own checks. Raises whatever verl raises."""
    import importlib.util

    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.config import AlgoConfig
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
        checked = config
        skipped = []
        if (
            importlib.util.find_spec("vllm") is None
            and config.actor_rollout_ref.rollout.name == "vllm"
        ):
            checked = compose(
                config_name="ppo_trainer",
                overrides=[*overrides, "actor_rollout_ref.model.lora_rank=0"],
            )
            skipped.append(
                f"vLLM's maximum LoRA rank for lora_rank={config.actor_rollout_ref.model.lora_rank} "
                "(vllm is not installed here)"
            )
    validate_config(
        checked,
        use_reference_policy=need_reference_policy(checked),
        use_critic=need_critic(checked),
    )
    omega_conf_to_dataclass(config.algorithm, AlgoConfig)
    return OmegaConf.to_yaml(config, resolve=True), skipped


def main(argv: list[str]) -> int:
    try:
        text, skipped = validate(json.loads(sys.stdin.read()))
    except Exception as exc:  # noqa: BLE001 - the reason goes to the caller, whatever verl raised
        print(f"verl rejected the config: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    Path(argv[0]).write_text(text)
    print(strict_json.dumps(skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
