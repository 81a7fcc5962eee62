"""On-policy LoRA rollouts sampled from weights with the adapter merged in; the update on it unmerged.

An unmerged LoRA layer computes ``W x + s B (A x)`` for every token: two more small matmuls
per adapted linear, 5-8% of a decode step (issue 28; measured again in
``python -m benchmarks merged_sampling``, docs/performance.md). Merged, the layer computes
``(W + s B A) x``: the base layer's cost alone. The trainer needs the adapter unmerged (its
gradients flow through ``A`` and ``B``; a merged peft layer skips them), so the weights
alternate: merged in place for a step's rollouts (peft ``merge_adapter``), unmerged before its
update (``unmerge_adapter``).

- fp32 base weights: no second copy; the merge writes into the base weights (peak: one
  layer's ``B A``) and the unmerge subtracts it again. ``(W + D) - D`` rounds in fp32, so each
  merge/unmerge cycle may move a base weight by up to half an ulp of ``W + D``; over a run's
  steps that stays within a few ulps (tested), far below one update's change, and the saved
  adapter never contains the base.
- bf16/fp16 base weights: half an ulp there is 2^-9 of the weight, so subtracting would drift.
  Before each merge the adapted layers' base weights are copied aside (2 bytes per adapted
  weight, about 210 MB for SmolLM2-135M with every linear adapted, held while the rollouts run)
  and the unmerge copies them back, bit for bit, and frees the copy (``restore``), so the
  update's memory peak does not carry it. The merged weights are rounded to
  bf16, so the sampler's log-probs differ from the trainer's unmerged ones by bf16 rounding; the
  trainer's own log-probs are then the PPO "old" ones (``grpo.old_logprobs: auto``).
- On-policy scoring holds: the sampler's log-probs (merged) and the trainer's (unmerged) differ
  by float rounding only (``tests/training/test_merged_sampling.py`` on a tiny model; the slow
  on-policy test on the real weights).
- The policy's cached prefix KV is dropped whenever the weights switch (``weights_changed``).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any


class SamplingWeights:
    """Switches a peft LoRA model between merged (rollouts) and unmerged (update) weights.

    Args:
        model: the ``peft.PeftModel`` the policy samples with and the trainer updates.
        policy: the ``LocalPolicy`` sampling with it (its ``generation_lock`` is held while the
            weights change, and ``weights_changed()`` drops its cached prefix KV), or None.
        merge: False keeps the adapter unmerged throughout (both calls do nothing).
        restore: unmerge by copying back the base weights saved before the merge (exact) instead
            of subtracting ``B A`` (drifts by rounding); None: restore when the base weights are
            not fp32.
    """

    def __init__(
        self, model: Any, policy: Any = None, merge: bool = True, restore: bool | None = None
    ):
        self.model, self.policy = model, policy
        self.merge = merge and hasattr(model, "merge_adapter")
        self.restore = _low_precision(model) if restore is None else restore
        self.merged = False
        self.switches = 0
        # id(layer) -> its base weight (and bias) as before the merge, while merged (``restore``)
        self._saved: dict[int, list] = {}

    def for_rollouts(self) -> None:
        """Merge the adapter into the weights (no-op when merged or when merging is off)."""
        if self.merge and not self.merged:
            self._switch(self._merge_saving if self.restore else self.model.merge_adapter)
            self.merged = True

    def for_update(self) -> None:
        """Unmerge the adapter, so the update's gradients reach it; either way the policy's decode-only
        copies of the weights (``LocalPolicy.release_decode_memory``) are freed before the update."""
        if self.merged:
            self._switch(self._restore if self.restore else self.model.unmerge_adapter)
            self.merged = False
        else:
            release = getattr(self.policy, "release_decode_memory", None)
            if release is not None:
                release()

    def _merge_saving(self) -> None:
        """Copy each adapted layer's base weight aside, then merge (peft ``merge_adapter``)."""
        import torch

        with torch.no_grad():
            for layer in _lora_layers(self.model):
                self._saved[id(layer)] = [t.detach().clone() for t in _base_tensors(layer)]
        self.model.merge_adapter()

    def _restore(self) -> None:
        """Copy the saved base weights back and mark every layer unmerged for peft."""
        import torch

        with torch.no_grad():
            for layer in _lora_layers(self.model):
                if layer.merged:
                    for t, kept in zip(_base_tensors(layer), self._saved[id(layer)]):
                        t.copy_(kept)
                    layer.merged_adapters.clear()
        self._saved.clear()  # the update's peak does not carry the copy; the next merge makes a new one

    def _switch(self, change) -> None:
        """Run ``change`` (no decode step in between: under the policy's lock) and drop the policy's
        cached prefix KV, computed with the other weights."""
        lock = getattr(self.policy, "generation_lock", None)
        with lock if lock is not None else nullcontext():
            change()
            if self.policy is not None:
                self.policy.weights_changed()
        self.switches += 1


def _lora_layers(model: Any) -> list:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def _base_tensors(layer: Any) -> list:
    """A LoRA layer's base weight, and its bias when it has one (``lora_bias`` merges into it)."""
    base = layer.get_base_layer()
    bias = getattr(base, "bias", None)
    return [base.weight] if bias is None else [base.weight, bias]


def base_dtype(model: Any) -> Any:
    """The dtype of the model's frozen (base) weights; with nothing frozen (a full fine-tune) its
    trainable ones'; None for a model without parameters."""
    frozen = next((p for p in model.parameters() if not p.requires_grad), None)
    weight = frozen if frozen is not None else next(model.parameters(), None)
    return None if weight is None else weight.dtype


def _low_precision(model: Any) -> bool:
    """True when the model's base weights are stored in fewer than 32 bits."""
    dtype = base_dtype(model)
    return dtype is not None and dtype.itemsize < 4
