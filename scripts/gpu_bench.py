"""The local model path on one CUDA GPU: decode tok/s, prefill tok/s, GRPO seconds per sample (issue 28).

Models are built from configs with random weights (nothing is downloaded): a
SmolLM2-135M-shaped Llama and a Qwen2.5-0.5B-shaped one, in bf16 where the GPU
has it (``rewardbox.policy.precision``). Each is measured with the functions of
``benchmarks.floor`` / ``benchmarks.floor_model``, against the GPU's own floor
measured in the same run (GEMM GFLOP/s, memory GiB/s). Meant to finish in under
5 minutes on one GPU::

    PYTHONPATH=. .venv/bin/python scripts/gpu_bench.py            # on a CUDA machine
    PYTHONPATH=. .venv/bin/python scripts/gpu_bench.py --dry-run  # CPU, tiny shapes (a test runs this)

``--dry-run`` keeps the two configs' structure but shrinks them (1 layer,
narrow), runs on the CPU with short prompts, and prints the same lines.
"""

from __future__ import annotations

import argparse
import sys
import time

import rewardbox  # noqa: F401 - first, so OpenMP's passive wait policy is set before torch loads (rewardbox.threads)

SHAPES = {
    # SmolLM2-135M (HuggingFaceTB/SmolLM2-135M-Instruct config.json)
    "smollm2-135m-shaped": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    ),
    # Qwen2.5-0.5B's widths on the Llama architecture (Qwen/Qwen2.5-0.5B-Instruct config.json)
    "0.5b-shaped": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
}
DRY_RUN = dict(num_hidden_layers=1, hidden_size=64, intermediate_size=128, vocab_size=512)


def build(shape: dict, dry_run: bool, device: str, dtype):
    """A random-weight Llama of ``shape`` (shrunk for a dry run) on ``device`` in ``dtype``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = dict(shape, max_position_embeddings=4096)
    if dry_run:
        heads = shape["num_attention_heads"]
        fields.update(DRY_RUN, hidden_size=heads * 8, num_attention_heads=heads)
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**fields)).to(device=device, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, tiny shapes: checks the script runs"
    )
    args = parser.parse_args(argv)
    import torch

    from benchmarks.floor import machine_floor
    from benchmarks.floor_model import model_rows
    from rewardbox.policy.precision import resolve_dtype
    from rewardbox.threads import apply_thread_policy

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    dtype = resolve_dtype("auto", device)
    if device == "cpu":
        apply_thread_policy("auto", dtype)
    prompt, completion, groups, group_size = (96, 8, 2, 2) if args.dry_run else (1100, 40, 4, 8)
    started = time.perf_counter()
    floor = machine_floor(device)
    print(
        f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), dtype {dtype}; floor: "
        + ", ".join(f"{k} {v:.1f}" for k, v in floor.items()),
        flush=True,
    )
    for name, shape in SHAPES.items():
        model = build(shape, args.dry_run, device, dtype)
        for r in model_rows(
            floor, prompt, completion, groups, group_size, model=model, rows_step=False
        ):
            ratio = "" if r["ratio"] is None else f" ({r['ratio']:.2f} x {r['anchor_label']})"
            print(f"{name}: {r['row']}: {r['value']:.4g} {r['unit']}{ratio}", flush=True)
        del model
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
