"""On-policy LoRA rollouts sampled from weights with the adapter merged in; the update on it unmerged.

An unmerged LoRA layer computes ``W x + s B (A x)`` for every token: two more small matmuls
per adapted linear, 5-8% of a decode step (issue 28; measured again in
``python -m benchmarks merged_sampling``, docs/performance.md). Merged, the layer computes
``(W + s B A) x``: the base layer's cost alone. The trainer needs the adapter unmerged (its
gradients flow through ``A`` and ``B``; a merged peft layer skips them), so the weights
alternate: merged in place for a step's rollouts (peft ``merge_adapter``), unmerged before its
update (``unmerge_adapter``).

- No second copy: the merge writes into the base weights (peak: one layer's ``B A``).
- Drift: ``(W + D) - D`` rounds in fp32, so each merge/unmerge cycle may move a base weight by
  up to half an ulp of ``W + D``; over a run's steps that stays within a few ulps (tested),
  far below one update's change, and the saved adapter never contains the base.
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
    """

    def __init__(self, model: Any, policy: Any = None, merge: bool = True):
        self.model, self.policy = model, policy
        self.merge = merge and hasattr(model, "merge_adapter")
        self.merged = False
        self.switches = 0

    def for_rollouts(self) -> None:
        """Merge the adapter into the weights (no-op when merged or when merging is off)."""
        if self.merge and not self.merged:
            self._switch(self.model.merge_adapter)
            self.merged = True

    def for_update(self) -> None:
        """Unmerge the adapter, so the update's gradients reach it (no-op when unmerged)."""
        if self.merged:
            self._switch(self.model.unmerge_adapter)
            self.merged = False

    def _switch(self, change) -> None:
        """Run ``change`` (no decode step in between: under the policy's lock) and drop the policy's
        cached prefix KV, computed with the other weights."""
        lock = getattr(self.policy, "generation_lock", None)
        with lock if lock is not None else nullcontext():
            change()
            if self.policy is not None:
                self.policy.weights_changed()
        self.switches += 1
