"""LoRA adapters and checkpoint merging (peft + transformers + safetensors)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rewardbox import strict_json
from rewardbox.training.config import GRPOConfig


def attach_lora(model, config: GRPOConfig):
    """Wrap a causal LM with a fresh LoRA adapter (peft); only adapter weights train.

    Returns:
        The ``peft.PeftModel``; the base weights are frozen.
    """
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def trainable(model, config: GRPOConfig, init_adapter: Path | str | None = None):
    """The model to optimise: LoRA-wrapped (``finetune == "lora"``) or itself, every weight trainable.

    With ``init_adapter`` (LoRA only: the warm start's adapter, docs/warm_start.md) the adapter saved
    there is loaded trainable instead of a fresh one, so training continues it; it must hold every
    LoRA tensor the model expects (``check_adapter_loaded``).

    Precision (docs/performance.md, "Precision"): with LoRA the frozen base keeps its dtype (bf16
    where the CPU has bf16 units) and the adapter's weights are fp32 (peft's
    ``autocast_adapter_dtype``), so the optimiser's master weights and AdamW state are fp32. A full
    fine-tune is cast to fp32 first: AdamW steps of ~1e-6 of a weight vanish in bf16's 8-bit
    mantissa, and the sampler (the same model object) then samples in fp32 too.
    """
    if init_adapter is not None:
        return resume_lora(model, init_adapter, config)
    if config.finetune == "lora":
        return attach_lora(model, config)
    import torch

    if next(model.parameters()).dtype != torch.float32:
        model = model.float()
    for param in model.parameters():
        param.requires_grad_(True)
    return model


def resume_lora(model, adapter_dir: Path | str, config: GRPOConfig):
    """Wrap a causal LM with the LoRA adapter saved in ``adapter_dir``, trainable (peft).

    Raises:
        ValueError: ``config.finetune`` is not ``"lora"``, or the adapter does not match the model.
        FileNotFoundError: ``adapter_dir`` has no ``adapter_config.json``.
    """
    from peft import PeftModel

    if config.finetune != "lora":
        raise ValueError(f"an initial adapter needs finetune: lora, got {config.finetune!r}")
    if not (Path(adapter_dir) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no LoRA adapter to start from in {adapter_dir}")
    adapted = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
    check_adapter_loaded(adapted, Path(adapter_dir))
    return adapted


def save_trained(model, out_dir: Path, metrics: list[dict] | None, config: GRPOConfig) -> Path:
    """Save what was trained: the adapter (LoRA) or the whole checkpoint (full fine-tune), plus metrics."""
    if config.finetune == "lora":
        return save_adapter(model, out_dir, metrics)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    if metrics is not None:
        strict_json.write_json(out_dir / "training_metrics.json", metrics, indent=2)
    return out_dir


def save_adapter(peft_model, out_dir: Path, metrics: list[dict] | None = None) -> Path:
    """Save the adapter (``adapter_model.safetensors`` + ``adapter_config.json``) and metrics.

    ``training_metrics.json`` is strict JSON (``rewardbox.strict_json``): a value
    with no number, such as the mean reward of a step whose rollouts were all
    system errors, is ``null`` next to its count (``scored_rollouts``), never ``NaN``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(out_dir, safe_serialization=True)
    if metrics is not None:
        strict_json.write_json(out_dir / "training_metrics.json", metrics)
    return out_dir


def merge_checkpoint(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Merge a LoRA adapter into its base model; write an HF safetensors directory.

    The result loads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    carries the base tokenizer and chat template. Tied embeddings
    (``tie_word_embeddings``, as SmolLM2 has) are untied before the merge, so an
    adapter on ``lm_head`` changes the head only and one on the input embedding
    changes the embedding only; if the merge left both equal (the adapter touched
    neither) they are tied again, so the checkpoint keeps the base's layout. An
    untied result says ``tie_word_embeddings: false`` in its config. The merge runs and is saved in
    float32 whatever dtype the policy samples in (``policy.dtype`` casts at load), so the checkpoint
    loses nothing to bf16 rounding of ``W + BA``.

    Everything is read and merged before anything is written, into
    ``<out_dir>.partial``, which then replaces ``out_dir``: a failure leaves no
    half-written checkpoint and keeps a previous one.

    Raises:
        FileNotFoundError: the base or adapter directory is incomplete.
        ValueError: peft did not load every tensor of the adapter, or the model expects
            adapter tensors the file lacks (``check_adapter_loaded``; peft itself only warns).
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir, adapter_dir, out_dir = Path(base_dir), Path(adapter_dir), Path(out_dir)
    if (adapter_dir / "config.json").is_file() and not (
        adapter_dir / "adapter_config.json"
    ).exists():
        return _copy_full_checkpoint(
            base_dir, adapter_dir, out_dir
        )  # a full fine-tune: nothing to merge
    for needed in (base_dir / "config.json", adapter_dir / "adapter_config.json"):
        if not needed.exists():
            raise FileNotFoundError(f"cannot merge: {needed} is missing")
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=torch.float32
    )  # merged in and saved as fp32
    was_tied = untie_embeddings(base)
    adapted = PeftModel.from_pretrained(base, adapter_dir)
    check_adapter_loaded(adapted, adapter_dir)
    merged = adapted.merge_and_unload()
    if was_tied and torch_equal(
        merged.get_output_embeddings().weight, merged.get_input_embeddings().weight
    ):
        _set_tied(merged, True)
        merged.tie_weights()
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    merged.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    for extra in base_dir.glob("*.jinja"):
        (staging / extra.name).write_text(extra.read_text())
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    return out_dir


def check_adapter_loaded(peft_model, adapter_dir: Path) -> None:
    """Fail unless the adapter file's LoRA tensors are exactly those of the model peft built from it.

    peft loads an adapter with ``strict=False`` and only warns about names it does not know,
    so an adapter written in another layout would merge as a no-op for those modules. The
    names compared are peft's saved ones (``get_peft_model_state_dict``, no adapter name),
    those with a ``lora_`` part only: a file may also carry whole layers (an embedding peft
    saves next to an embedding adapter), which peft loads or not by its own rules. An adapter
    saved only as ``adapter_model.bin`` (peft's old format) is not checked.

    Raises:
        ValueError: LoRA tensors in the file that peft did not load, or ones it expected and missed.
    """
    from peft import get_peft_model_state_dict
    from safetensors import safe_open

    path = Path(adapter_dir) / "adapter_model.safetensors"
    if not path.is_file():
        return
    with safe_open(str(path), framework="pt") as weights:
        saved = _lora_names(weights.keys())
    expected = _lora_names(get_peft_model_state_dict(peft_model, save_embedding_layers=False))
    if saved != expected:
        raise ValueError(
            f"adapter {adapter_dir} does not match the model peft built from it: not loaded "
            f"{sorted(saved - expected)[:5]}, missing {sorted(expected - saved)[:5]}"
        )


def _lora_names(names) -> set[str]:
    return {name for name in names if any(part.startswith("lora_") for part in name.split("."))}


def untie_embeddings(model) -> bool:
    """Give a model with tied input and output embeddings its own copy of the head weight.

    Returns:
        True when the embeddings were tied (now untied, config ``tie_word_embeddings``
        false); False when they were not (model unchanged).
    """
    import torch

    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embedding is None or head.weight is not embedding.weight:
        return False
    head.weight = torch.nn.Parameter(
        embedding.weight.detach().clone(), requires_grad=embedding.weight.requires_grad
    )
    _set_tied(model, False)
    return True


def _set_tied(model, tied: bool) -> None:
    model.config.tie_word_embeddings = tied
    text_config = model.config.get_text_config()
    if text_config is not model.config and hasattr(text_config, "tie_word_embeddings"):
        text_config.tie_word_embeddings = tied


def torch_equal(a, b) -> bool:
    """Same shape and values."""
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


def _copy_full_checkpoint(base_dir: Path, trained_dir: Path, out_dir: Path) -> Path:
    """A fully fine-tuned checkpoint as the merged one, with the base tokenizer and chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    AutoModelForCausalLM.from_pretrained(trained_dir).save_pretrained(
        out_dir, safe_serialization=True
    )
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    for extra in base_dir.glob("*.jinja"):
        (out_dir / extra.name).write_text(extra.read_text())
    return out_dir
