"""verl's LoRA adapter into our merge: its layout made peft's, and the merged weights exactly base + B @ A * scale.

The end-to-end test runs ``tests/fixtures/verl_lora_checkpoint.py`` with verl's Python (``REWARDBOX_VERL_PYTHON``,
else ``.venv-verl``): verl's own LoRA construction, FSDP checkpoint manager and model merger on a tiny random
model, on CPU. The others need only our environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rewardbox.training.checkpoint import merge_checkpoint
from rewardbox.training.verl.adapter import normalize_verl_adapter, peft_key, target_module
from rewardbox.training.verl.job import finish_verl_merge, merge_command

from .test_checkpoint import _load, tiny_tied_base, trained_adapter

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "fixtures" / "verl_lora_checkpoint.py"
Q, EMB = "base_model.model.model.layers.0.self_attn.q_proj.", "base_model.model.model.embed_tokens."


def _verl_python() -> str | None:
    found = os.environ.get("REWARDBOX_VERL_PYTHON") or str(ROOT / ".venv-verl" / "bin" / "python")
    return found if Path(found).exists() else None


def test_peft_names_and_target_modules_of_verls_tensor_names():
    assert peft_key(EMB + "lora_embedding_A.default") == EMB + "lora_embedding_A"
    assert peft_key(Q + "lora_B.default.bias") == Q + "lora_B.bias"
    assert peft_key(Q + "lora_A.weight") == Q + "lora_A.weight"  # already peft's: unchanged
    assert target_module(Q + "lora_B.default.bias") == "q_proj"
    assert target_module(EMB + "lora_embedding_B") == "embed_tokens"
    with pytest.raises(ValueError, match="not a LoRA"):
        target_module("model.layers.0.self_attn.q_proj.weight")


def _verl_style_adapter(path: Path, alpha: int) -> Path:
    """An adapter laid out as verl's merger writes one for q_proj + embed_tokens (BaseModelMerger.save_lora_adapter)."""
    path.mkdir(parents=True)
    save_file(
        {
            Q + "lora_A.weight": torch.ones(2, 16),
            Q + "lora_B.weight": torch.ones(16, 2),
            EMB + "lora_embedding_A.default": torch.ones(2, 32),
            EMB + "lora_embedding_B.default": torch.ones(16, 2),
        },
        path / "adapter_model.safetensors",
    )
    (path / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "r": 2,
                "lora_alpha": alpha,
                "target_modules": ["q_proj", "embed_tokens"],
            }
        )
    )
    return path


def test_normalize_renames_verls_embedding_tensors_and_refuses_a_zero_alpha(tmp_path):
    adapter = _verl_style_adapter(tmp_path / "a", alpha=4)
    changes = normalize_verl_adapter(adapter)
    assert sorted(load_file(adapter / "adapter_model.safetensors")) == sorted(
        [
            Q + "lora_A.weight",
            Q + "lora_B.weight",
            EMB + "lora_embedding_A",
            EMB + "lora_embedding_B",
        ]
    )
    assert len(changes) == 2 and all(c.startswith("renamed") for c in changes)
    assert normalize_verl_adapter(adapter) == []  # peft's layout now: nothing more to do
    # no lora_train_meta.json in verl's checkpoint: verl writes alpha 0, a merge that changes nothing
    zero = _verl_style_adapter(tmp_path / "z", alpha=0)
    with pytest.raises(ValueError, match="lora_alpha=0"):
        normalize_verl_adapter(zero)
    assert "lora_alpha 0 -> 16" in normalize_verl_adapter(zero, lora_alpha=16)
    assert json.loads((zero / "adapter_config.json").read_text())["lora_alpha"] == 16


def test_merge_refuses_an_adapter_peft_would_load_only_in_part(tmp_path):
    base_dir = tiny_tied_base(tmp_path / "base")
    trained_adapter(base_dir, tmp_path / "adapter", ["q_proj", "v_proj"])
    weights = tmp_path / "adapter" / "adapter_model.safetensors"
    tensors = load_file(weights)
    name = next(k for k in tensors if "v_proj.lora_A" in k)
    tensors[name.replace(".weight", ".default.weight")] = tensors.pop(
        name
    )  # a name peft does not know
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"not loaded \['.*v_proj\.lora_A\.default\.weight'\]"):
        merge_checkpoint(base_dir, tmp_path / "adapter", tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(300)
def test_verls_own_lora_checkpoint_and_merger_merge_to_base_plus_the_lora_delta(tmp_path):
    argv = merge_command("python", tmp_path / "actor", tmp_path / "merger")
    proc = subprocess.run(
        [_verl_python(), str(BUILD), str(tmp_path), "q_proj,v_proj,embed_tokens", json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={
            "PYTHONPATH": str(ROOT),
            "PATH": "/usr/bin:/bin",
            "HOME": str(Path.home()),
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = tmp_path / "merger" / "lora_adapter"
    config = json.loads((written / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (
        4,
        8,
    )  # from lora_train_meta.json, as verl wrote it
    raw = load_file(written / "adapter_model.safetensors")
    assert EMB + "lora_embedding_A.default" in raw  # verl's layout, which peft alone would skip
    with pytest.raises(ValueError, match="not loaded"):
        merge_checkpoint(tmp_path / "base", written, tmp_path / "unnormalized")
    changes: list[str] = []
    merged_dir = finish_verl_merge(
        tmp_path / "merger", tmp_path / "base", tmp_path / "merged", log=changes.append
    )
    fixes = [c for c in changes if c.startswith("verl's LoRA adapter")]
    assert len(fixes) == 2 and not (tmp_path / "merger").exists()
    assert json.loads((merged_dir / "merge_fidelity.json").read_text())["lora"] is True
    base, merged = _load(tmp_path / "base").state_dict(), _load(merged_dir).state_dict()
    delta = {k: merged[k] - base[k] for k in base}
    scale = 8 / 4
    a, b = raw[Q + "lora_A.weight"].float(), raw[Q + "lora_B.weight"].float()
    assert torch.allclose(
        delta["model.layers.0.self_attn.q_proj.weight"], b @ a * scale, rtol=0, atol=1e-6
    )
    assert delta["model.layers.0.self_attn.q_proj.weight"].abs().max() > 0.1
    a, b = (
        raw[EMB + "lora_embedding_A.default"].float(),
        raw[EMB + "lora_embedding_B.default"].float(),
    )
    assert torch.allclose(delta["model.embed_tokens.weight"], (b @ a).T * scale, rtol=0, atol=1e-6)
    assert delta["model.embed_tokens.weight"].abs().max() > 0.1
    untouched = [
        k for k in delta if "q_proj" not in k and "v_proj" not in k and "embed_tokens" not in k
    ]
    assert "lm_head.weight" in untouched and all(not delta[k].any() for k in untouched)
    trained = load_file(
        tmp_path / "trained_lora.safetensors"
    )  # the dtype verl stored (float32) is kept
    assert raw[Q + "lora_B.weight"].dtype == torch.float32
    assert torch.equal(raw[Q + "lora_B.weight"], trained[Q + "lora_B.weight"])
