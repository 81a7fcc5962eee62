"""Which floating-point type the model runs in: bf16 where the hardware has bf16 matrix units, fp32 elsewhere.

On a CPU with AMX (``amx_bf16``) or AVX512-BF16 (``avx512_bf16``), oneDNN runs bf16
GEMMs 6-7x faster than fp32 ones (issue 28 measured 580-900 against 117-135
GFLOP/s per core); on a CPU without them bf16 is emulated and slower than fp32,
so ``dtype: auto`` keeps fp32 there. On CUDA, bf16 when
``torch.cuda.is_bf16_supported()``. The sampler and the trainer use the same
model object (on-policy GRPO), so sampling and scoring always share the dtype;
the LoRA adapter's own weights stay fp32 (peft's ``autocast_adapter_dtype``), so
the optimiser's master weights and AdamW state are fp32 while the frozen base
computes in bf16. See docs/performance.md, "Precision".
"""

from __future__ import annotations

from pathlib import Path

import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags that mean the CPU multiplies bf16 matrices in hardware."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first CPU's feature flags (empty when /proc/cpuinfo is unreadable, e.g. not Linux)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_bf16_units(device: str | torch.device = "cpu", flags: set[str] | None = None) -> bool:
    """True when ``device`` multiplies bf16 matrices in hardware (see the module doc)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    return bool((cpu_flags() if flags is None else flags) & set(BF16_CPU_FLAGS))


def resolve_dtype(
    dtype: torch.dtype | str, device: str | torch.device = "cpu", flags: set[str] | None = None
) -> torch.dtype:
    """The torch dtype for a config value: ``"auto"`` -> bfloat16 with bf16 units, else float32.

    Raises:
        ValueError: a string that is not ``auto`` or a torch floating dtype name.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).replace("torch.", "")
    if name == "auto":
        return torch.bfloat16 if has_bf16_units(device, flags) else torch.float32
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(
            f"dtype {dtype!r} is not a torch floating dtype; use auto, float32, bfloat16 or float16"
        )
    return value
