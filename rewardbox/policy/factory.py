"""``build_policy``: the one place a policy kind becomes a policy object."""

from __future__ import annotations

from typing import Any

from rewardbox.policy.base import Policy
from rewardbox.policy.config import PolicyConfig


def build_policy(
    config: PolicyConfig | dict[str, Any], checkpoint_dir=None, api_key: str | None = None
) -> Policy:
    """Build the policy a config describes.

    Args:
        config: a ``PolicyConfig`` or a dict of its fields (validated here).
        checkpoint_dir: for ``local``, the checkpoint to load (overrides the config's).
        api_key: for ``endpoint``, the key itself (a secret: never part of the config); None
            reads the config's ``api_key_env`` from the environment.

    Returns:
        ``LocalPolicy``, ``EndpointPolicy``, ``GoldenReplayPolicy``, ``NullPolicy`` or ``ScriptedMixPolicy``.
        The caller owns it and must ``await policy.aclose()``.

    The config's fields map onto the kind's constructor by name (``PolicyConfig.KIND_FIELDS``).

    Raises:
        pydantic.ValidationError: a bad config; the message names the field and the fix.
        ValueError: kind ``local`` without a checkpoint directory.
        FileNotFoundError: a local checkpoint directory that does not exist.
    """
    cfg = config if isinstance(config, PolicyConfig) else PolicyConfig.model_validate(config)
    if checkpoint_dir:
        cfg = cfg.model_copy(update={"checkpoint_dir": checkpoint_dir})
    if cfg.kind == "local" and cfg.checkpoint_dir is None:
        raise ValueError(
            "policy kind 'local' needs checkpoint_dir: the directory written by the "
            "base_checkpoint asset (rewardbox.policy.checkpoint.convert_gguf_to_safetensors) "
            "or a merged checkpoint"
        )
    secret = {"api_key": api_key} if api_key and cfg.kind == "endpoint" else {}
    return _policy_class(cfg.kind)(**cfg.constructor_kwargs(), **secret)


def _policy_class(kind: str) -> type[Policy]:
    """The class of a policy kind, imported on demand (``local`` pulls in torch)."""
    if kind == "local":
        from rewardbox.policy.local import LocalPolicy

        return LocalPolicy
    if kind == "endpoint":
        from rewardbox.policy.endpoint import EndpointPolicy

        return EndpointPolicy
    from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy, ScriptedMixPolicy

    return {"golden": GoldenReplayPolicy, "null": NullPolicy, "scripted_mix": ScriptedMixPolicy}[
        kind
    ]
