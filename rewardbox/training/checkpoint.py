"""LoRA adapters and checkpoint merging (peft + transformers + safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

from rewardbox.training.config import GRPOConfig


def attach_lora(model, config: GRPOConfig):
    """Wrap a causal LM with a fresh LoRA adapter (peft); only adapter weights train.

    Returns:
        The ``peft.PeftModel``; the base weights are frozen.
    """
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def trainable(model, config: GRPOConfig):
    """The model to optimise: LoRA-wrapped (``finetune == "lora"``) or itself, every weight trainable."""
    if config.finetune == "lora":
        return attach_lora(model, config)
    for param in model.parameters():
        param.requires_grad_(True)
    return model


def save_trained(model, out_dir: Path, metrics: list[dict] | None, config: GRPOConfig) -> Path:
    """Save what was trained: the adapter (LoRA) or the whole checkpoint (full fine-tune), plus metrics."""
    if config.finetune == "lora":
        return save_adapter(model, out_dir, metrics)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    if metrics is not None:
        (out_dir / "training_metrics.json").write_text(json.dumps(metrics, indent=2))
    return out_dir


def save_adapter(peft_model, out_dir: Path, metrics: list[dict] | None = None) -> Path:
    """Save the adapter (``adapter_model.safetensors`` + ``adapter_config.json``) and metrics."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(out_dir, safe_serialization=True)
    if metrics is not None:
        (out_dir / "training_metrics.json").write_text(json.dumps(metrics, indent=2))
    return out_dir


def merge_checkpoint(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Merge a LoRA adapter into its base model; write an HF safetensors directory.

    The result loads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    carries the base tokenizer and chat template.

    Raises:
        FileNotFoundError: the base or adapter directory is incomplete.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir, adapter_dir, out_dir = Path(base_dir), Path(adapter_dir), Path(out_dir)
    if (adapter_dir / "config.json").is_file() and not (adapter_dir / "adapter_config.json").exists():
        return _copy_full_checkpoint(base_dir, adapter_dir, out_dir)  # a full fine-tune: nothing to merge
    for needed in (base_dir / "config.json", adapter_dir / "adapter_config.json"):
        if not needed.exists():
            raise FileNotFoundError(f"cannot merge: {needed} is missing")
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    for extra in base_dir.glob("*.jinja"):
        (out_dir / extra.name).write_text(extra.read_text())
    return out_dir


def _copy_full_checkpoint(base_dir: Path, trained_dir: Path, out_dir: Path) -> Path:
    """A fully fine-tuned checkpoint as the merged one, with the base tokenizer and chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    AutoModelForCausalLM.from_pretrained(trained_dir).save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    for extra in base_dir.glob("*.jinja"):
        (out_dir / extra.name).write_text(extra.read_text())
    return out_dir
