"""verl's FSDP model merger, made to reproduce the trained weights (run in verl's environment, never ours).

``python -m rewardbox.training.verl.merge merge --backend fsdp --local_dir ACTOR --target_dir OUT
[--dtype keep|bfloat16|float16|float32] [--rtol R] [--atol A]`` runs verl's own
``FSDPModelMerger`` (``verl/model_merger/fsdp_model_merger.py``: shard loading, DTensor
placement merge, LoRA adapter export, Hugging Face save) with two corrections, then checks the
result against the trained weights:

- **dtype.** verl 0.9.1 casts every gathered shard to bfloat16
  (``_load_and_merge_state_dicts``: ``tensor._local_tensor.bfloat16()`` / ``tensor.bfloat16()``)
  and saves a bfloat16 ``config.json``: an actor trained and checkpointed in float32 comes back
  rounded (logits moved by ~1e-3 on a tiny model). Here the shards keep the dtype they were
  saved in (``--dtype keep``, the default), or are cast to the dtype asked for, and
  ``config.json`` says the dtype the weights have.
- **ties.** With ``tie_word_embeddings: true`` verl drops ``lm_head.weight`` before saving
  (``drop_tied_target_keys``, ``verl/utils/transformers_compat.py``), so the merged model's head
  is its input embedding whatever was trained. When the gathered ``lm_head`` differs from
  ``embed_tokens`` the tie no longer holds: the checkpoint is saved untied
  (``tie_word_embeddings: false``), with both matrices. Equal ones stay tied.

**Fidelity.** After saving, the directory is loaded back with transformers (``dtype="auto"``: what
the config says) and every trained tensor is compared with the loaded one; the result goes to
``merge_fidelity.json`` in the target directory (:func:`fidelity_report`): the trained and saved
dtypes, whether the head was untied, the largest absolute difference and the tensor it is in, and
``within``: ``|saved - trained| <= atol + rtol * |trained|`` everywhere (``torch.allclose``'s
rule). The default tolerance is exact (0, 0) when the dtype is kept. The merged-checkpoint gate
(``assets.training.merged_checkpoint_runs``, blocking) fails a checkpoint whose report is not
``within``. A LoRA run's weights are not compared here: verl writes the adapter and the base,
and our merge checks the adapter with peft (``checkpoint.merge_checkpoint``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from rewardbox import strict_json

REPORT = "merge_fidelity.json"
HEAD, EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"
DTYPES = ("keep", "bfloat16", "float16", "float32")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(our options, verl's merger argv) from ``argv``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dtype", choices=DTYPES, default="keep")
    parser.add_argument("--rtol", type=float, default=0.0)
    parser.add_argument("--atol", type=float, default=0.0)
    return parser.parse_known_args(argv)


@contextlib.contextmanager
def _shards_keep_dtype():
    """verl's shard loop calls ``.bfloat16()`` on every tensor: make that the identity while it runs."""
    import torch

    cast = torch.Tensor.bfloat16
    torch.Tensor.bfloat16 = lambda self, *a, **k: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.bfloat16 = cast  # type: ignore[method-assign]


def exact_merger_class():
    """verl's ``FSDPModelMerger`` with the dtype kept and a broken tie untied (see the module docstring)."""
    import torch
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    class ExactFSDPModelMerger(FSDPModelMerger):
        dtype_name, trained, untied = "keep", {}, False

        def _load_and_merge_state_dicts(self, *args: Any) -> dict:
            with _shards_keep_dtype():
                merged = super()._load_and_merge_state_dicts(*args)
            self.trained = dict(
                merged
            )  # as trained; verl pops and renames the saved dict's keys in place
            if self.dtype_name != "keep":
                merged = {
                    k: v.to(getattr(torch, self.dtype_name)) if v.is_floating_point() else v
                    for k, v in merged.items()
                }
            return merged

        def save_hf_model_and_tokenizer(self, state_dict: dict) -> None:
            head, embedding = state_dict.get(HEAD), state_dict.get(EMBEDDING)
            if (
                getattr(self.model_config, "tie_word_embeddings", False)
                and head is not None
                and embedding is not None
                and not torch.equal(head, embedding)
            ):
                _set_tied(self.model_config, False)
                self.untied = True
            dtype = _dominant_dtype(
                state_dict
            )  # before saving: transformers empties the dict it is given
            super().save_hf_model_and_tokenizer(state_dict)
            _write_config_dtype(Path(self.config.target_dir), dtype)

    return ExactFSDPModelMerger


def _set_tied(config: Any, tied: bool) -> None:
    config.tie_word_embeddings = tied
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is not config and hasattr(text, "tie_word_embeddings"):
        text.tie_word_embeddings = tied


def _dominant_dtype(state_dict: dict) -> str:
    """The floating dtype holding the most elements (``float32``), as transformers names it."""
    sizes: dict[str, int] = {}
    for tensor in state_dict.values():
        if tensor.is_floating_point():
            name = str(tensor.dtype).removeprefix("torch.")
            sizes[name] = sizes.get(name, 0) + tensor.numel()
    return max(sizes, key=sizes.get) if sizes else "float32"


def _write_config_dtype(target: Path, dtype: str) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(target)
    config.dtype = dtype
    config.save_pretrained(target)


def fidelity_report(
    target: Path, trained: dict, untied: bool, rtol: float, atol: float
) -> dict[str, Any]:
    """Load ``target`` with transformers and compare it with ``trained`` (a full fine-tune's state dict).

    Returns:
        ``trained_dtype``, ``saved_dtype``, ``untied``, ``compared`` (tensors), ``missing`` (trained
        tensors the loaded model lacks), ``max_abs_diff``, ``worst`` (its tensor), ``rtol``, ``atol``,
        ``within`` (every tensor within ``atol + rtol * |trained|`` and none missing).
    """
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(target, dtype="auto").state_dict()
    worst, max_diff, within, missing = "", 0.0, True, []
    for key, want in trained.items():
        if key not in loaded:
            missing.append(key)
            continue
        got, want64 = loaded[key].double(), want.double()
        diff = (got - want64).abs()
        if diff.numel() and float(diff.max()) >= max_diff:
            worst, max_diff = key, float(diff.max())
        within = within and bool((diff <= atol + rtol * want64.abs()).all())
    return {
        "trained_dtype": _dominant_dtype(trained),
        "saved_dtype": _dominant_dtype(loaded),
        "untied": untied,
        "compared": len(trained) - len(missing),
        "missing": missing[:20],
        "max_abs_diff": max_diff,
        "worst": worst,
        "rtol": rtol,
        "atol": atol,
        "within": within and not missing,
    }


def main(argv: list[str]) -> int:
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    ours, rest = parse(argv)
    sys.argv = [sys.argv[0], *rest]
    config = generate_config_from_args(parse_args())
    if config.backend != "fsdp" or config.operation != "merge":
        raise SystemExit(
            "rewardbox.training.verl.merge merges FSDP checkpoints only (merge --backend fsdp)"
        )
    merger = exact_merger_class()(config)
    merger.dtype_name = ours.dtype
    merger.merge_and_save()
    merger.cleanup()
    target = Path(config.target_dir)
    if any("lora_" in key for key in merger.trained):
        report = {
            "lora": True,
            "within": True,
            "untied": merger.untied,
            "trained_dtype": _dominant_dtype(merger.trained),
        }
    else:
        report = fidelity_report(target, merger.trained, merger.untied, ours.rtol, ours.atol)
    (target / REPORT).write_text(strict_json.dumps(report, indent=2))
    print(f"rewardbox merge fidelity: {strict_json.dumps(report)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
