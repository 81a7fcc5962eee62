"""verl's LoRA adapter, as its model merger writes it, made into exactly the layout peft loads.

verl 0.9.1 trains LoRA with peft (``get_peft_model(model, LoraConfig(task_type=CAUSAL_LM, r,
lora_alpha, target_modules, bias="none"))`` in ``verl/workers/engine/fsdp/transformer_impl.py``),
and its FSDP checkpoint holds the peft model's state dict, whose names carry peft's adapter name
``default`` (``...q_proj.lora_A.default.weight``). ``python -m verl.model_merger merge``
(``BaseModelMerger.save_lora_adapter``, ``verl/model_merger/base_model_merger.py``) writes
``<target>/lora_adapter/``:

- ``adapter_model.safetensors``: every ``lora_`` tensor, renamed ``.default.weight`` -> ``.weight``,
  in bfloat16 (the merger casts every shard to bfloat16). That is peft's own file layout
  (``base_model.model.<module>.lora_A.weight``) for linear layers, but a tensor whose name does
  not end in ``.default.weight`` keeps the adapter name: an embedding's
  ``lora_embedding_A.default`` (peft writes ``lora_embedding_A``), a LoRA bias's
  ``lora_B.default.bias``. peft would skip those with a warning, silently dropping that part of
  the adapter from the merge.
- ``adapter_config.json``: ``peft.LoraConfig(r, lora_alpha, target_modules[, task_type]).to_dict()``,
  ``target_modules`` taken as the third-last name part of each tensor (wrong for a bias), and
  ``r`` / ``lora_alpha`` / ``task_type`` from ``lora_train_meta.json``, which verl's
  ``FSDPCheckpointManager._save_lora_train_meta`` writes into the ``actor`` directory. Without
  that file verl writes ``lora_alpha: 0`` (with a warning only): a scale of 0, so a merge that
  leaves the base unchanged.

:func:`normalize_verl_adapter` fixes the three: the names, the target modules, and a zero alpha
(from the run's ``grpo.lora_alpha``, or an error).
"""

from __future__ import annotations

import re
from pathlib import Path

from rewardbox import strict_json

ADAPTER_DIR = "lora_adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
_ADAPTER_NAME = re.compile(r"(\.lora_[A-Za-z_]+)\.default(?=\.|$)")


def peft_key(name: str) -> str:
    """The name peft saves (and loads) for one of verl's adapter tensors: the ``.default`` part removed.

    ``...embed_tokens.lora_embedding_A.default`` -> ``...embed_tokens.lora_embedding_A``; names
    already in peft's layout (``...q_proj.lora_A.weight``) are returned unchanged.
    """
    return _ADAPTER_NAME.sub(r"\1", name)


def target_module(name: str) -> str:
    """The adapted module's own name: the part before the first ``lora_`` part (``q_proj``, ``embed_tokens``).

    Raises:
        ValueError: ``name`` has no ``lora_`` part (not an adapter tensor).
    """
    parts = name.split(".")
    index = next((i for i, part in enumerate(parts) if part.startswith("lora_")), 0)
    if index == 0:
        raise ValueError(f"{name!r} is not a LoRA adapter tensor")
    return parts[index - 1]


def normalize_verl_adapter(adapter_dir: str | Path, lora_alpha: float | None = None) -> list[str]:
    """Rewrite verl's ``lora_adapter/`` in place so that peft loads every tensor of it, at its scale.

    Args:
        adapter_dir: the merger's ``lora_adapter`` directory.
        lora_alpha: the run's alpha (``grpo.lora_alpha``, verl's ``model.lora_alpha``); used only
            when verl wrote 0 (its checkpoint had no ``lora_train_meta.json``).

    Returns:
        What was changed, one line each (empty when the adapter was already peft's layout).

    Raises:
        FileNotFoundError: the adapter's weights or config are missing.
        ValueError: verl wrote ``lora_alpha`` 0 and no ``lora_alpha`` was given (merging would
            leave the base unchanged), or two tensors map to one name.
    """
    from safetensors.torch import load_file, save_file

    adapter_dir = Path(adapter_dir)
    for needed in (adapter_dir / ADAPTER_WEIGHTS, adapter_dir / ADAPTER_CONFIG):
        if not needed.is_file():
            raise FileNotFoundError(f"verl's LoRA adapter is incomplete: {needed} is missing")
    tensors = load_file(adapter_dir / ADAPTER_WEIGHTS)
    renamed = {peft_key(name): tensor for name, tensor in tensors.items()}
    if len(renamed) != len(tensors):
        raise ValueError(
            f"verl's adapter {adapter_dir} has tensors that differ only by the adapter name"
        )
    changes = [f"renamed {old} -> {peft_key(old)}" for old in tensors if peft_key(old) != old]
    if changes:
        save_file(renamed, adapter_dir / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    config = strict_json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    fixed = _fixed_config(
        config, sorted({target_module(name) for name in renamed}), lora_alpha, adapter_dir
    )
    changes += [f"{key} {config.get(key)} -> {value}" for key, value in fixed.items()]
    if fixed:
        strict_json.write_json(adapter_dir / ADAPTER_CONFIG, {**config, **fixed}, indent=4)
    return changes


def _fixed_config(
    config: dict, targets: list[str], lora_alpha: float | None, adapter_dir: Path
) -> dict:
    """The adapter config's entries to replace: the target modules the tensors name, a zero alpha."""
    fixed: dict = {}
    if sorted(config.get("target_modules") or []) != targets:
        fixed["target_modules"] = targets
    if not config.get("lora_alpha"):
        if lora_alpha is None:
            raise ValueError(
                f"verl wrote lora_alpha={config.get('lora_alpha')} in {adapter_dir / ADAPTER_CONFIG} "
                "(its checkpoint has no lora_train_meta.json): merging would leave the base "
                "unchanged; pass the run's lora_alpha"
            )
        fixed["lora_alpha"] = lora_alpha
    return fixed
