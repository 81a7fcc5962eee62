"""``build_policy``: the one place a policy kind becomes a policy object."""

from __future__ import annotations

from typing import Any

from rewardbox.policy.base import Policy
from rewardbox.policy.config import PolicyConfig


def build_policy(config: PolicyConfig | dict[str, Any], checkpoint_dir=None) -> Policy:
    """Build the policy a config describes.

    Args:
        config: a ``PolicyConfig`` or a dict of its fields (validated here).
        checkpoint_dir: for ``local``, the checkpoint to load (overrides the config's).

    Returns:
        ``LocalPolicy``, ``EndpointPolicy``, ``GoldenReplayPolicy`` or ``NullPolicy``.
        The caller owns it and must ``await policy.aclose()``.

    Raises:
        pydantic.ValidationError: a bad config; the message names the field and the fix.
        FileNotFoundError: a local checkpoint directory that does not exist.
    """
    cfg = config if isinstance(config, PolicyConfig) else PolicyConfig.model_validate(config)
    if checkpoint_dir:
        cfg = cfg.model_copy(update={"checkpoint_dir": checkpoint_dir})
    if cfg.kind == "local":
        if cfg.checkpoint_dir is None:
            raise ValueError("policy kind 'local' needs checkpoint_dir: the directory written by the "
                             "base_checkpoint asset (rewardbox.policy.checkpoint.convert_gguf_to_safetensors) "
                             "or a merged checkpoint")
        from rewardbox.policy.local import LocalPolicy

        return LocalPolicy(
            cfg.checkpoint_dir,
            adapter_dir=cfg.adapter_dir,
            max_batch_size=cfg.max_batch_size,
            batch_wait_ms=cfg.batch_wait_ms,
            device=cfg.device,
            dtype=cfg.dtype,
            seed=cfg.seed,
            num_threads=cfg.num_threads,
            temperature=cfg.temperature,
            max_new_tokens=cfg.max_new_tokens,
            name=cfg.name,
            guided_tool_calls=cfg.guided_tool_calls,
        )
    if cfg.kind == "endpoint":
        from rewardbox.policy.endpoint import EndpointPolicy

        return EndpointPolicy(
            cfg.base_url,
            cfg.model,
            api_key_env=cfg.api_key_env,
            temperature=cfg.temperature,
            max_tokens=cfg.max_new_tokens,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            max_timeout_retries=cfg.max_timeout_retries,
            max_rate_limit_retries=cfg.max_rate_limit_retries,
            reasoning_field=cfg.reasoning_field,
            reasoning_open=cfg.reasoning_open,
            extra_body=cfg.extra_body,
            name=cfg.name,
        )
    from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy, ScriptedMixPolicy

    if cfg.kind == "scripted_mix":
        return ScriptedMixPolicy(cfg.golden_frac)
    return GoldenReplayPolicy() if cfg.kind == "golden" else NullPolicy()
