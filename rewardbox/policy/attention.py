"""Attention for a bf16 model on a CPU: SDPA, given an all-True mask where it would run unmasked at decode.

torch's CPU SDPA is slow in bf16 at one query position when it gets no mask: with none, transformers
hands the grouped key/value heads to the flash kernel (``enable_gqa``), which took 1,072 µs per call
at 1 row and 18.0 ms at 16 rows (1,100 keys, SmolLM2-135M's 9 query and 3 key/value heads) against
173 µs and 3.8 ms with a boolean mask, and 141 µs / 3.4 ms in fp32 (a one-off timing, 1 thread, on a
CPU with ``avx512_bf16``; docs/performance.md, "Precision"). The local policy's decode steps pass
no mask when no row is padded (a lone row, rows of equal length), so those steps took the slow kernel.
Rows with padding already carry a mask, and fp32 keeps the flash kernel, the faster one there. (A
first version computed bf16 decode steps as eager matmuls instead; in the policy's own decode loop
that was 3x slower than SDPA with a mask, 13.8 against 43 rows per second.)

The function is registered with transformers' ``AttentionInterface`` under :data:`NAME`, its masks
with ``AttentionMaskInterface`` as SDPA's (``sdpa_mask``), so every other call is exactly SDPA's.
``LocalPolicy`` loads bf16 and fp16 models on a CPU with it (:func:`implementation_for`).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "rewardbox_cpu_decode"
"""The attention implementation's registered name (``config._attn_implementation``)."""


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``sdpa_attention_forward``, with an all-True mask where SDPA would run unmasked at one query
    position in reduced precision on a CPU (see the module doc).

    Shapes: query ``[batch, heads, q_len, head_dim]``, key/value ``[batch, kv_heads, kv_len, head_dim]``,
    ``attention_mask`` as ``sdpa_mask`` makes it (boolean ``[batch, 1, q_len, kv_len]``, True = attend)
    or None; returns ``([batch, q_len, heads, head_dim], None)``. An all-True mask attends to every
    key, as None does at one query position (the last one sees every cached key), so the result is the
    same attention (Vaswani et al. 2017, eq. 1) through another kernel.
    """
    if (
        attention_mask is None
        and query.shape[2] == 1
        and query.dtype in (torch.bfloat16, torch.float16)
        and query.device.type == "cpu"
        and not module.training
    ):
        attention_mask = torch.ones(
            (query.shape[0], 1, 1, key.shape[-2]), dtype=torch.bool, device=query.device
        )
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def register() -> str:
    """Register :data:`NAME` with transformers (idempotent); returns it."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def implementation_for(device: torch.device, dtype: torch.dtype) -> str | None:
    """The ``attn_implementation`` to load a model with: :data:`NAME` (registered) for bf16/fp16 on a
    CPU, None (transformers' default, SDPA) otherwise."""
    if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        return register()
    return None
