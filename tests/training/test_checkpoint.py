"""Adapter saving and checkpoint merging: strict metrics JSON (issue #12 item 3), tied heads (item 6)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch

from rewardbox import strict_json
from rewardbox.training.checkpoint import merge_checkpoint, save_adapter

from .test_trainer import result, task, tiny_model


def tiny_tied_base(path: Path) -> Path:
    """A randomly initialised 1-layer Llama with tied embeddings and a word-level tokenizer (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(path)
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(32)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0").save_pretrained(
        path
    )
    (path / "chat_template.jinja").write_text("{{ messages }}")
    return path


def trained_adapter(base_dir: Path, out: Path, targets: list[str]):
    """A LoRA adapter on ``targets`` with random (non-zero) A and B matrices, saved to ``out``; returns the live model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(r=2, target_modules=targets)
    )
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_()
    model.save_pretrained(out)
    return model.eval()


def _load(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


IDS = torch.tensor([[1, 5, 9, 30, 2]])


# --- item 3: a step whose rollouts are all system errors -------------------------------------------------


def test_issue12_item3_all_system_error_step_writes_null_mean_reward(tmp_path):
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.groups import task_stream
    from rewardbox.training.trainer import train_grpo

    config = GRPOConfig(
        group_size=2, tasks_per_step=1, steps=1, max_refill_rounds=0, system_error_refill="replace"
    )
    model = attach_lora(tiny_model(), config)

    async def broken(t, trial):
        return result(t.uid, trial, None, "sandbox: died")

    summary = asyncio.run(train_grpo(model, 0, task_stream([task("a")], 0), broken, config))
    save_adapter(model, tmp_path, [m.as_dict() for m in summary.steps])
    text = (tmp_path / "training_metrics.json").read_text()
    assert "NaN" not in text
    step = strict_json.loads(text)[0]
    assert step["mean_reward"] is None and step["scored_rollouts"] == 0 and step["episodes"] == 2
    assert step["system_error_groups"] == 1 and step["loss"] is None


def test_issue12_item3_own_case_any_non_finite_metric_is_null(tmp_path):
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig

    model = attach_lora(tiny_model(), GRPOConfig())
    save_adapter(
        model,
        tmp_path,
        [{"step": 0, "loss": float("inf"), "mean_reward": float("nan"), "scored_rollouts": 3}],
    )
    assert json.loads((tmp_path / "training_metrics.json").read_text()) == [
        {"step": 0, "loss": None, "mean_reward": None, "scored_rollouts": 3}
    ]


# --- item 6: LoRA on a tied head -------------------------------------------------------------------------


def test_issue12_item6_lora_on_tied_head_unties_on_merge(tmp_path):
    base_dir = tiny_tied_base(tmp_path / "base")
    live = trained_adapter(base_dir, tmp_path / "adapter", ["q_proj", "lm_head"])
    merge_checkpoint(base_dir, tmp_path / "adapter", tmp_path / "merged")
    merged, base = _load(tmp_path / "merged"), _load(base_dir)
    assert (
        json.loads((tmp_path / "merged" / "config.json").read_text())["tie_word_embeddings"]
        is False
    )
    assert torch.equal(
        merged.model.embed_tokens.weight, base.model.embed_tokens.weight
    )  # embedding unchanged
    assert not torch.equal(merged.lm_head.weight, base.lm_head.weight)  # head changed
    with torch.no_grad():  # the merged checkpoint computes what the adapter computed
        assert torch.allclose(merged(IDS).logits, live(IDS).logits, atol=1e-5)
    assert (tmp_path / "merged" / "chat_template.jinja").exists()


def test_issue12_item6_own_case_embedding_adapter_and_untouched_tie(tmp_path):
    base_dir = tiny_tied_base(tmp_path / "base")
    base = _load(base_dir)
    # an adapter on the input embedding only: the embedding changes, the head does not
    live = trained_adapter(base_dir, tmp_path / "emb", ["embed_tokens"])
    merge_checkpoint(base_dir, tmp_path / "emb", tmp_path / "merged_emb")
    merged = _load(tmp_path / "merged_emb")
    assert torch.equal(merged.lm_head.weight, base.lm_head.weight)
    assert not torch.equal(merged.model.embed_tokens.weight, base.model.embed_tokens.weight)
    with torch.no_grad():
        assert torch.allclose(merged(IDS).logits, live(IDS).logits, atol=1e-5)
    # an adapter that touches neither keeps the tie (same layout as the base)
    trained_adapter(base_dir, tmp_path / "attn", ["q_proj"])
    merge_checkpoint(base_dir, tmp_path / "attn", tmp_path / "merged_attn")
    kept = _load(tmp_path / "merged_attn")
    assert (
        kept.config.tie_word_embeddings is True
        and kept.lm_head.weight is kept.model.embed_tokens.weight
    )


def test_merge_failure_writes_nothing_and_keeps_the_previous_checkpoint(tmp_path):
    base_dir = tiny_tied_base(tmp_path / "base")
    trained_adapter(base_dir, tmp_path / "adapter", ["q_proj"])
    out = merge_checkpoint(base_dir, tmp_path / "adapter", tmp_path / "merged")
    before = sorted(p.name for p in out.iterdir())
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(Exception):  # noqa: B017 - whatever error the broken file raises
        merge_checkpoint(base_dir, tmp_path / "adapter", tmp_path / "merged")
    assert sorted(p.name for p in out.iterdir()) == before
    with pytest.raises(Exception):  # noqa: B017 - whatever error the broken file raises
        merge_checkpoint(base_dir, tmp_path / "adapter", tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()
