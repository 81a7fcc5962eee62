"""Linear layers of a bf16 model on a CPU with their weights packed once for oneDNN.

A decode step multiplies a few rows by every weight of the model, so it is bound by
how fast the matmul kernel streams the weights. torch's bf16 ``F.linear`` on a CPU
hands oneDNN's matmul the weight in its plain ``[out, in]`` layout, which the kernel
repacks inside every call: a pass over SmolLM2-135M's 211 linear weights at 1-16
rows took 37-55 ms that way against 20-33 ms with the weights reordered once
(``torch.ops.mkldnn._reorder_linear_weight``, the prepacking ``torch.compile``'s
freezing pass applies on CPUs) and multiplied with ``torch.ops.mkldnn._linear_pointwise``;
the outputs were bit-identical. Decode steps at a 1,100-token context ran 1.24-1.29x
faster; in the demo's campaigns, where attention and the episodes' tools weigh more,
decode time was 1.05x and the campaigns' wall unchanged (docs/performance.md, "Decode:
weights packed once").

``PackedLinears`` does that for the local policy's decode and prefill calls without
changing the model: each plain ``nn.Linear`` gets a forward that uses the packed
weight while ``active`` is entered (the policy's worker, under ``inference_mode``)
and is ``F.linear`` everywhere else (the trainer's scoring and update, which need
autograd). The packed copies (one more copy of the weights, 270 MB for
SmolLM2-135M in bf16) are built on the first call after the weights change and
dropped by ``drop``: ``LocalPolicy.weights_changed`` (which every in-place change of
the weights must call, as the prefix cache already requires) and
``LocalPolicy.release_decode_memory`` (before each GRPO update, merged or not). A
weight replaced by a tensor at another address falls back to ``F.linear`` until the
next pack; that check is a safety net, not the guarantee. Layers with the switching
forward cannot be pickled (``torch.save(model)``; ``save_pretrained`` and state dicts
are unaffected): the local policy's model is never pickled.

Only bfloat16 on a CPU with bf16 units (``precision.has_bf16_units``) is packed:
fp32 keeps MKL's kernels, whose results the exactness tests pin
(docs/grpo_training.md, "Reproducible sampling"). ``available`` checks the ops
once against ``F.linear`` and turns packing off, with a warning, where they are
missing or disagree.
"""

from __future__ import annotations

import functools
import logging
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from rewardbox.policy.precision import has_bf16_units

log = logging.getLogger(__name__)

ROWS_HINT = 8
"""Rows oneDNN lays the packed weights out for (the demo's decode batches hold 1-8 rows)."""


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (``[out, in]``, bf16) reordered into oneDNN's layout for ``ROWS_HINT``-row inputs."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` from ``pack_weight(weight)``: ``[..., in] -> [..., out]``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@functools.cache
def _ops_agree() -> bool:
    """Whether the packing ops exist here and give ``F.linear``'s result on a probe (once per process)."""
    try:
        gen = torch.Generator().manual_seed(0)
        weight = torch.randn(96, 64, generator=gen).to(torch.bfloat16)
        bias = torch.randn(96, generator=gen).to(torch.bfloat16)
        x = torch.randn(3, 1, 64, generator=gen).to(torch.bfloat16)
        with torch.inference_mode():
            got = packed_linear(x, pack_weight(weight), bias)
            want = F.linear(x, weight, bias)
        return bool(torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2))
    except (AttributeError, RuntimeError) as exc:
        log.warning("packed bf16 linear weights unavailable (%s); decode uses F.linear", exc)
        return False


def available(dtype: torch.dtype, device: torch.device | str) -> bool:
    """True when a ``dtype`` model on ``device`` decodes with packed weights (module doc)."""
    device = torch.device(device)
    return (
        dtype == torch.bfloat16
        and device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and has_bf16_units(device)
        and _ops_agree()
    )


class PackedLinears:
    """The packed weights of one model's plain ``nn.Linear`` layers, and the switch that uses them.

    Args:
        model: the model; every module whose type is exactly ``torch.nn.Linear`` gets the switching
            forward (peft's LoRA layers wrap these, so a merged or unmerged adapter keeps working).
            The layers hold only a weak reference to this object, and a copy of a layer
            (``copy.deepcopy``) is not packed: it runs ``F.linear``.
    """

    def __init__(self, model: Any):
        self.layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
        self._managed = weakref.WeakSet(self.layers)
        self._packed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._version: object = None
        self._on = False
        for layer in self.layers:
            layer._rewardbox_packed = weakref.ref(self)
            layer.forward = types.MethodType(_switching_forward, layer)

    @property
    def packed(self) -> bool:
        """Whether packed copies are held now."""
        return len(self._packed) > 0

    @contextmanager
    def active(self, version: object = None) -> Iterator[None]:
        """Use packed weights for the calls made inside (under ``torch.inference_mode``). Packed copies
        of another ``version`` (the policy's weights version) are dropped; the first call that uses
        them packs the weights anew, so a worker that enters without running the model packs nothing."""
        if version != self._version:
            self.drop()
            self._version = version
        self._on = True
        try:
            yield
        finally:
            self._on = False

    def pack(self) -> None:
        """Pack every layer's weight now (about 0.2 s for SmolLM2-135M on 2 cores)."""
        self._packed.clear()
        with torch.inference_mode():
            for layer in self.layers:
                weight = layer.weight.detach()
                self._packed[layer] = (pack_weight(weight), weight.data_ptr())

    def drop(self) -> None:
        """Free the packed copies (the weights changed, or memory is wanted for the update)."""
        self._packed.clear()
        self._version = None

    def weight_for(self, layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor | None:
        """``layer``'s packed weight when this call may use it (inside ``active``, under inference
        mode, a bf16 input, the weight's storage unchanged since packing), else None."""
        if not self._on or x.dtype != torch.bfloat16 or not torch.is_inference_mode_enabled():
            return None
        if layer not in self._managed:  # a copy of a managed layer: never packs the originals
            return None
        if not self.packed:
            self.pack()
        held = self._packed.get(layer)
        if held is None or held[1] != layer.weight.data_ptr():
            return None
        return held[0]


def _switching_forward(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` of a layer ``PackedLinears`` manages: the packed weight when its owner
    allows it (``PackedLinears.weight_for``), ``F.linear`` otherwise."""
    ref = layer.__dict__.get("_rewardbox_packed")
    owner = ref() if ref is not None else None
    packed = None if owner is None else owner.weight_for(layer, x)
    if packed is None:
        return F.linear(x, layer.weight, layer.bias)
    return packed_linear(x, packed, layer.bias)
