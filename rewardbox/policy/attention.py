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
``LocalPolicy`` loads models on a CPU with it (:func:`implementation_for`).

**Shared-prefix (cascade) attention.** The rows of a decode batch mostly start with the same domain
prefix (system prompt and tool schemas: about 1,000 of a prompt's 1,100 tokens in the embedded
domains). Copied into every row's cache, that prefix made each decode step read it once per row:
a step of 8 rows read 8 copies, and the kernel's time grows with the keys it reads (1.3-1.8 ms per
layer call for 8 rows x 1,100 keys, bf16, 1 thread, against 0.16 ms for 100 keys). A batch that
carries :class:`SharedPrefix` objects (one per prefix its rows started from: a domain's, or a task's
extension of it) keeps those columns once, at batch 1 (the prefix cache's entries, never copied),
and each row's cache holds only its own columns. Attention is then computed in two
parts and merged exactly (the log-sum-exp combination of FlashAttention's blockwise softmax; Dao et
al. 2022, "FlashAttention", section 3.1; Juravsky et al. 2024, "Hydragen", applies it to shared
prefixes):

* the shared part, per prefix: its rows' query heads stacked as one query block against the
  prefix's keys (batch 1, one call of torch's CPU flash kernel, which returns the log-sum-exp);
* each row's own part: its query heads, grouped by key/value head at one position, against its own
  columns, with its mask;
* ``out = (o1 exp(l1 - m) + o2 exp(l2 - m)) / (exp(l1 - m) + exp(l2 - m))``, ``m = max(l1, l2)``.

The numbers are those of one softmax over all the row's keys up to float rounding (fp32 log-sum-exp,
the same kernel's blocks); ``tests/policy/test_attention.py`` checks them against SDPA over the
concatenated keys, and ``tests/policy/test_running.py`` checks each row's tokens and sampler log-probs
against the same row decoded alone with SDPA.

**Grouped query blocks.** A masked call of several query positions (a suffix's prefill over a cached
prefix; each row the GRPO update scores on top of its prefix) stacks each key/value head's query heads
as one query block against the unrepeated keys (:func:`grouped_query_attention`), instead of SDPA over
``repeat_kv``'s copies, whose backward zero-fills and sums them back: the same output up to the order
of fp32 sums, 0.66-0.77 of the time per call (docs/performance.md, "Grouped query blocks"). Unmasked
(causal) calls keep SDPA's causal kernel, which skips the blocks above the diagonal.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "rewardbox_cpu_decode"
"""The attention implementation's registered name (``config._attn_implementation``)."""

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
"""torch's CPU flash-attention kernel: ``(output, log-sum-exp)``; a mask must be additive, in the
query's dtype."""


@dataclass
class SharedPrefix:
    """KV columns that some rows of a batch attend to before their own (module doc). A batch carries a
    list of them (one per domain or task prefix its rows started from), each row in at most one.

    Attributes:
        tokens: the prefix's token ids (``P`` of them); its rows start their prompts with them.
        source: a batch-1 cache (``DynamicCache``-like: ``layers[i].keys`` ``[1, kv_heads, >= P,
            head_dim]``) whose first ``P`` columns are the prefix's keys/values: a prefix-cache entry,
            read and never written.
        rows: ``[B]`` bool, which batch rows attend to it (None: every row).
    """

    tokens: tuple[int, ...]
    source: Any
    rows: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """``P``, the prefix's columns."""
        return len(self.tokens)

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``index``'s ``(keys, values)``, ``[1, kv_heads, P, head_dim]`` views."""
        layer = self.source.layers[index]
        return layer.keys[:, :, : self.length], layer.values[:, :, : self.length]

    def using(self, batch: int) -> torch.Tensor:
        """``[batch]`` bool: the rows that attend to the prefix."""
        return torch.ones(batch, dtype=torch.bool) if self.rows is None else self.rows

    @functools.cached_property
    def index(self) -> torch.Tensor:
        """``[n]`` the batch rows that attend to the prefix (``rows`` set; computed once, not per layer)."""
        return self.rows.nonzero().flatten()

    def select(self, index: torch.Tensor) -> SharedPrefix | None:
        """The prefix for batch rows ``index`` (kept rows, in order); None when none of them uses it."""
        if self.rows is None:
            return self
        rows = self.rows[index.cpu()]
        if not bool(rows.any()):
            return None
        return SharedPrefix(self.tokens, self.source, None if bool(rows.all()) else rows)

    def crop(self, length: int) -> SharedPrefix:
        """The first ``length`` columns only (same rows)."""
        return SharedPrefix(self.tokens[:length], self.source, self.rows)


def concatenate(parts: Sequence[tuple[Sequence[SharedPrefix], int]]) -> list[SharedPrefix]:
    """The prefixes of batches stacked in order, given each as ``(its prefixes, its rows)``: every
    prefix's rows widened to the stacked batch, prefixes with the same tokens made one."""
    total = sum(n for _, n in parts)
    merged: dict[tuple[int, ...], SharedPrefix] = {}
    offset = 0
    for prefixes, n in parts:
        for prefix in prefixes:
            rows = torch.zeros(total, dtype=torch.bool)
            rows[offset : offset + n] = prefix.using(n)
            kept = merged.get(prefix.tokens)
            if kept is not None:
                rows |= kept.rows
            merged[prefix.tokens] = SharedPrefix(
                prefix.tokens, prefix.source if kept is None else kept.source, rows
            )
        offset += n
    out = list(merged.values())
    for prefix in out:
        if bool(prefix.rows.all()):
            prefix.rows = None
    return out


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    shared: Sequence[SharedPrefix],
) -> torch.Tensor:
    """Attention of each row over its shared prefix's keys, then its own, merged (module doc).

    Shapes: query ``[B, heads, L, D]``; key/value ``[B, kv_heads, S, D]`` (each row's own columns:
    cached and new); ``attention_mask`` boolean ``[B, 1, L, S]`` (True = attend; ``sdpa_mask``'s) or
    None (causal when ``L > 1``, which transformers passes only when ``L == S``); ``shared``: the
    batch's prefixes, each row in at most one, all of whose columns come before the row's own, so
    every query of its rows attends to all of them. Returns ``[B, L, heads, D]`` in the query's dtype.
    The log-sum-exp merge is exact up to rounding (module doc). A query that its own part masks out
    entirely (a left pad) takes its prefix's part alone.
    """
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    # each row's own part
    if length == 1 or attention_mask is not None:  # grouped query heads, one block per kv head
        own, own_lse = _grouped_blocks(query, key, value, attention_mask, scaling)
        if attention_mask is not None and length > 1:  # a fully masked query: 0, log-sum-exp 0
            own_lse = own_lse.masked_fill(~attention_mask.any(-1), float("-inf"))
    else:  # causal over the row's own columns: SDPA's causal kernel skips the masked blocks
        own, own_lse = _flash(
            query,
            key.repeat_interleave(group, dim=1),
            value.repeat_interleave(group, dim=1),
            is_causal=True,
            scale=scaling,
        )
    if len(shared) == 1 and shared[0].rows is None:  # every row, one prefix: no gather or scatter
        return (
            _with_prefix(query, own, own_lse, shared[0], module.layer_idx, scaling)
            .transpose(1, 2)
            .contiguous()
        )
    out = own.clone()
    for prefix in shared:
        index = (prefix.index if prefix.rows is not None else torch.arange(batch)).to(query.device)
        out[index] = _with_prefix(
            query[index], own[index], own_lse[index], prefix, module.layer_idx, scaling
        )
    return out.transpose(1, 2).contiguous()


_ADDITIVE: list = [None, None, None, None]  # the last (boolean mask, dtype, group, additive mask)


def _additive(mask: torch.Tensor, dtype: torch.dtype, group: int = 1) -> torch.Tensor:
    """``mask`` (boolean ``[B, 1, L, S]``, True = attend) as the additive mask the flash kernel takes
    (0 / -inf), its query rows tiled ``group`` times (``[B, 1, group x L, S]``: row ``g L + l`` is row
    ``l``, for a grouped query block, module doc).

    transformers hands every layer of a forward the same mask tensor, so the last conversion is kept
    and reused while the same tensor comes back (it is held, so its identity cannot be reused): one
    conversion per step, not one per layer."""
    if _ADDITIVE[0] is mask and _ADDITIVE[1] == dtype and _ADDITIVE[2] == group:
        return _ADDITIVE[3]
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    additive.masked_fill_(~mask, float("-inf"))
    if group > 1:
        additive = additive.repeat(1, 1, group, 1)
    _ADDITIVE[:] = [mask, dtype, group, additive]
    return additive


def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> torch.Tensor:
    """Masked attention with each key/value head's query heads stacked as one query block (module
    doc, "Grouped query blocks"), on unrepeated keys.

    Shapes: query ``[B, heads, L, D]``; key/value ``[B, kv_heads, S, D]`` with ``heads`` a multiple
    of ``kv_heads`` (query head ``h`` reads key/value head ``h // (heads / kv_heads)``, as
    ``repeat_kv``); ``attention_mask`` boolean ``[B or 1, 1, L, S]``, True = attend. Returns
    ``[B, L, heads, D]`` in the query's dtype: SDPA's attention over the repeated keys (Vaswani et
    al. 2017, eq. 1), differentiable, with SDPA's result for a fully masked query.
    """
    out, _ = _grouped_blocks(query, key, value, attention_mask, scaling, dropout)
    return out.transpose(1, 2).contiguous()


def _grouped_blocks(query, key, value, attention_mask, scaling, dropout: float = 0.0):
    """One flash call per key/value head over its query heads stacked (``[B, kv_heads, group x L,
    D]``, the mask's rows tiled to match, ``_additive``): ``(out [B, heads, L, D], log-sum-exp [B,
    heads, L])``, as over repeated keys. ``attention_mask`` None only for one position per row."""
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    tiled = None if attention_mask is None else _additive(attention_mask, query.dtype, group)
    grouped = query.reshape(batch, kv_heads, group * length, dim)
    out, lse = _flash(grouped, key, value, dropout, attn_mask=tiled, scale=scaling)
    return out.reshape(batch, heads, length, dim), lse.reshape(batch, heads, length)


def _with_prefix(
    query: torch.Tensor,
    own: torch.Tensor,
    own_lse: torch.Tensor,
    prefix: SharedPrefix,
    layer: int,
    scaling: float | None,
) -> torch.Tensor:
    """Rows' own attention ``own`` (``[n, heads, L, D]``, log-sum-exp ``[n, heads, L]``) merged with
    their attention over ``prefix``: every row's query heads of one key/value head stacked as one
    query block against the prefix's keys (batch 1, one flash call). Returns ``[n, heads, L, D]``."""
    n, heads, length, dim = query.shape
    keys, values = prefix.layer(layer)
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    stacked = (
        query.reshape(n, kv_heads, group, length, dim)
        .permute(1, 0, 2, 3, 4)
        .reshape(1, kv_heads, n * group * length, dim)
    )
    common, common_lse = _flash(stacked, keys, values, scale=scaling)
    common = (
        common.reshape(kv_heads, n, group, length, dim)
        .transpose(0, 1)
        .reshape(n, heads, length, dim)
    )
    common_lse = (
        common_lse.reshape(kv_heads, n, group, length).transpose(0, 1).reshape(n, heads, length)
    )
    top = torch.maximum(common_lse, own_lse)
    w_common = torch.exp(common_lse - top).unsqueeze(-1)
    w_own = torch.exp(own_lse - top).unsqueeze(-1)
    merged = (common.float() * w_common + own.float() * w_own) / (w_common + w_own)
    return merged.to(query.dtype)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    shared_prefix: Sequence[SharedPrefix] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``sdpa_attention_forward``, with an all-True mask where SDPA would run unmasked at one query
    position in reduced precision on a CPU; with ``shared_prefix`` (a decode batch's prefixes, on a CPU
    only), :func:`shared_prefix_attention`; a masked call of several query positions with grouped
    key/value heads on a CPU, :func:`grouped_query_attention` (see the module doc).

    Shapes: query ``[batch, heads, q_len, head_dim]``, key/value ``[batch, kv_heads, kv_len, head_dim]``,
    ``attention_mask`` as ``sdpa_mask`` makes it (boolean ``[batch, 1, q_len, kv_len]``, True = attend)
    or None; returns ``([batch, q_len, heads, head_dim], None)``. An all-True mask attends to every
    key, as None does at one query position (the last one sees every cached key), so the result is the
    same attention (Vaswani et al. 2017, eq. 1) through another kernel.
    """
    if shared_prefix:
        if query.device.type != "cpu":
            raise ValueError("shared-prefix attention runs on a CPU (torch's CPU flash kernel)")
        extra = [k for k in ("sliding_window", "softcap", "s_aux") if kwargs.get(k) is not None]
        if extra:
            raise ValueError(
                f"shared-prefix attention is plain softmax attention; this layer passes {extra}"
            )
        return shared_prefix_attention(
            module, query, key, value, attention_mask, scaling, shared_prefix
        ), None
    if _groups_queries(query, key, attention_mask, kwargs):
        return grouped_query_attention(query, key, value, attention_mask, dropout, scaling), None
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


def _groups_queries(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    kwargs: dict,
) -> bool:
    """Whether a call runs as :func:`grouped_query_attention`: on a CPU, more than one query
    position, grouped key/value heads, a boolean mask shared by the heads, and nothing but plain
    softmax attention asked for."""
    return (
        query.device.type == "cpu"
        and query.shape[2] > 1
        and key.shape[1] < query.shape[1]
        and query.shape[1] % key.shape[1] == 0
        and attention_mask is not None
        and attention_mask.dtype == torch.bool
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1
        and not any(
            kwargs.get(k) is not None
            for k in ("sliding_window", "softcap", "s_aux", "position_bias")
        )
        and not kwargs.get("output_attentions", False)
    )


def register() -> str:
    """Register :data:`NAME` with transformers (idempotent); returns it."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def implementation_for(device: torch.device, dtype: torch.dtype) -> str | None:
    """The ``attn_implementation`` to load a model with: :data:`NAME` (registered) on a CPU (any
    dtype: in fp32 without a shared prefix every call is SDPA's), None (transformers' default,
    SDPA) otherwise."""
    if device.type == "cpu":
        return register()
    return None


SHARED_PREFIX_MODELS = frozenset({"llama", "qwen2", "qwen3", "mistral"})
"""Model types whose attention layers pass the forward's keyword arguments down to the attention
function and add nothing to plain softmax attention but, where configured, a sliding window (which
:func:`takes_shared_prefix` refuses)."""


def takes_shared_prefix(model: Any) -> bool:
    """Whether ``model`` can decode with shared prefixes: it runs :data:`NAME` on a CPU, its type is
    one of :data:`SHARED_PREFIX_MODELS`, and no layer has a sliding window (a window counts positions
    from the row's start, which the shared part does not see; a config without ``layer_types`` but
    with ``sliding_window`` set, as Mistral's, windows every layer) or a logit soft-cap."""
    config = getattr(model, "config", None)
    device = getattr(model, "device", torch.device("cpu"))
    if getattr(config, "_attn_implementation", None) != NAME or torch.device(device).type != "cpu":
        return False
    if getattr(config, "model_type", None) not in SHARED_PREFIX_MODELS:
        return False
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True):
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in layer_types):
        return False
    return not getattr(config, "attn_logit_softcapping", None)
