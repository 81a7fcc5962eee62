"""Log-probabilities of sampled completions under the distribution that sampled them.

The local policy samples from ``softmax(guide_mask(logits / T))``: the
temperature ``T`` divides the logits, then the tool-call guide
(``rewardbox.policy.guided``) sets to ``-inf`` every token that cannot continue
a real tool name or parameter key. The trainer scores exactly that
distribution (on-policy scoring, as verl and TRL divide by the sampling
temperature before the log-softmax): logits / T, then the guide's mask for the
same decoded prefix (recomputed by the guide's own code, which is a pure
function of the prefix), then log-softmax. The sampler's own log-probs
(recorded per token by ``rewardbox.policy.sampling``) are the PPO "old"
log-probs, so ``max |sampler - trainer|`` measures how far the two drift.

Logits are computed only at completion positions: the decoder's hidden
states ``[B, W, H]`` are gathered at the ``T`` positions that predict a
completion token before the ``lm_head``, as TRL's ``logits_to_keep`` does, so
the vocabulary projection costs ``B x T x V`` instead of ``B x W x V``. A
prompt prefix every row of a micro-batch shares (the system prompt, tool list
and worked example: about 900 of 1,100 tokens in the embedded domains; a
whole first-turn prompt within a group) runs once, its key/value cache
repeated for the rows, as generation's prefix cache does. The trainer goes
further (``shared_prefix``): a prefix shared by a block of samples (a group's
first prompt) runs once per optimiser step and is passed in as ``SharedPrefix``.

Mixed precision (``run_decoder``): a LoRA adapter's weights are fp32 (peft's
``autocast_adapter_dtype``: the master weights and AdamW's state) while the
frozen base may be bf16. peft would then cast every adapter layer's input to
fp32 and its output back; the decoder instead runs under ``torch.autocast`` in
the base's dtype, so the adapter's matmuls take a bf16 copy of its weights and
their gradients reach the fp32 weights through the cast (the mixed precision of
``torch.amp`` and of transformers' ``Trainer(bf16=True)``; docs/performance.md,
"Precision").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rewardbox.policy.guided import ToolCallGuide, VocabularyIndex
from rewardbox.policy.prefix_cache import common_prefix_len

MIN_SHARED_PREFIX_TOKENS = 64
"""A prompt prefix shared by a whole micro-batch is computed once when at least this long."""


@dataclass
class SharedPrefix:
    """A prompt prefix encoded once (batch 1) whose key/value states several micro-batches reuse.

    Attributes:
        ids: the prefix's ``n`` token ids; every scored row's prompt starts with them and is longer.
        kv: per decoder layer ``(keys, values)``, each ``[1, kv_heads, n, head_dim]``.
    """

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def length(self) -> int:
        return len(self.ids)


@dataclass
class Sample:
    """One policy completion to score.

    Attributes:
        prompt_ids, completion_ids: the exact token ids.
        advantage: its rollout's advantage.
        old_logprobs: per completion token, the sampler's log-prob (None: unknown,
            e.g. re-tokenised off-policy rollouts; the trainer then uses the
            current policy's, detached, from the first epoch).
        guide_masks: ``(t, allowed [V] bool)`` for each completion position ``t``
            whose sampling the tool-call guide restricted.
        trainer_logprobs: per completion token, the trainer's own log-prob at the step's
            start, set by its first epoch when the trainer's log-probs are the "old" ones
            (``GRPOConfig.old_logprobs``, ``trainer.optimise_step``).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    old_logprobs: list[float] | None = None
    guide_masks: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    trainer_logprobs: list[float] | None = None


def guide_masks(
    index: VocabularyIndex, signatures: dict[str, tuple[str, ...]], completion_ids: Sequence[int]
) -> list[tuple[int, torch.Tensor]]:
    """The guide's allow-masks along a completion, from ``ToolCallGuide`` itself.

    Args:
        index: the vocabulary index (the policy's ``VocabularyIndex``).
        signatures: tool name -> parameter names of the turn's tools; empty = unguided.
        completion_ids: the completion's token ids ``[T]``.

    Returns:
        ``[(t, allowed)]``: position ``t`` (0-based, the token it predicts) and a
        bool mask ``[V]`` (``V = index.vocab_size``) of the tokens the guide allowed
        there; positions the guide left alone are omitted.
    """
    if not signatures or len(completion_ids) < 2:
        return []
    guide = ToolCallGuide(index, [signatures], prompt_len=0)
    ids = torch.tensor([list(completion_ids)], dtype=torch.long)
    probe = torch.zeros((1, index.vocab_size))
    out = []
    for t in range(1, len(completion_ids)):
        masked = guide(ids[:, :t], probe)
        if masked is not probe:
            out.append((t, torch.isfinite(masked[0])))
    return out


def right_padded(batch: Sequence[Sample], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + completion of each sample, right-padded with ``pad_id``.

    Returns:
        ``(input_ids, attention_mask)``, both ``[B, T_max]`` long tensors on ``device``
        (``T_max`` = the longest prompt + completion; mask 1 on real tokens).
    """
    seqs = [s.prompt_ids + s.completion_ids for s in batch]
    width = max(len(x) for x in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, seq in enumerate(seqs):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
    return input_ids.to(device), attention.to(device)


def _allowed(batch: Sequence[Sample], t_max: int, vocab: int, device) -> torch.Tensor | None:
    if not any(s.guide_masks for s in batch):
        return None
    allowed = torch.ones((len(batch), t_max, vocab), dtype=torch.bool, device=device)
    for i, sample in enumerate(batch):
        for t, keep in sample.guide_masks:
            width = min(vocab, keep.shape[0])
            allowed[i, t, :width] = keep[:width].to(device)
            allowed[i, t, width:] = False
    return allowed


def mixed_precision_dtype(model) -> torch.dtype | None:
    """The 16-bit dtype the decoder computes a trainable fp32 adapter in, or None (as stored).

    Set when the base weights (``merged_sampling.base_dtype``) are bf16 (fp16 on CUDA only: CPU
    autocast's fp16 is not what the base multiplies in) and some trainable weight is fp32: a LoRA
    adapter on a 16-bit base. A full fine-tune (cast to fp32, ``checkpoint.trainable``) and a model
    with nothing trainable get None.
    """
    from rewardbox.training.merged_sampling import base_dtype

    dtype = base_dtype(model)
    if dtype not in (torch.bfloat16, torch.float16):
        return None
    if dtype == torch.float16 and next(model.parameters()).device.type != "cuda":
        return None
    if not any(p.requires_grad and p.dtype == torch.float32 for p in model.parameters()):
        return None
    return dtype


def run_decoder(model, **inputs):
    """``model.get_decoder()(**inputs)``, an fp32 adapter on a 16-bit base computed in the base's dtype.

    With :func:`mixed_precision_dtype` set, the call runs under ``torch.autocast`` in that dtype with
    peft's cast of each adapter layer's input to fp32 turned off (``peft.helpers.
    disable_input_dtype_casting``): the adapter's matmuls multiply bf16 activations by a bf16 copy of
    the fp32 weights, and the weights' gradients come back in fp32. Otherwise a plain call. Only the
    forward runs under autocast; backward follows the dtypes it recorded (``torch.amp``'s rule).

    Returns:
        The decoder's output (``BaseModelOutputWithPast``).
    """
    dtype = mixed_precision_dtype(model)
    if dtype is None:
        return model.get_decoder()(**inputs)
    from peft.helpers import disable_input_dtype_casting

    device = next(model.parameters()).device.type
    with torch.autocast(device_type=device, dtype=dtype), disable_input_dtype_casting(model):
        return model.get_decoder()(**inputs)


def _hidden_states(
    model,
    batch: Sequence[Sample],
    pad_id: int,
    device,
    min_shared: int,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, int]:
    """Decoder hidden states ``[B, W - n, H]`` of each row after the prompt prefix all rows share, and ``n``.

    The shared prefix (``n`` tokens, 0 when shorter than ``min_shared``) runs once
    at batch 1 and its key/value cache is repeated for the rows; gradients flow
    back through it once. The prefix's states do not depend on what follows
    (causal attention), so the result equals a full forward of every row. With
    ``prefix`` (encoded once per optimiser step, ``shared_prefix``) its states are
    used instead and nothing before ``prefix.length`` runs here.
    """
    from transformers import DynamicCache

    if prefix is not None:
        n = prefix.length
        cache = DynamicCache(
            [
                (k.expand(len(batch), -1, -1, -1), v.expand(len(batch), -1, -1, -1))
                for k, v in prefix.kv
            ]
        )
    else:
        n = common_prefix_len([s.prompt_ids for s in batch]) if len(batch) > 1 else 0
        if n < min_shared:
            input_ids, attention = right_padded(batch, pad_id, device)
            hidden = run_decoder(model, input_ids=input_ids, attention_mask=attention)
            return hidden.last_hidden_state, 0
        ids = torch.tensor([batch[0].prompt_ids[:n]], dtype=torch.long, device=device)
        cache = run_decoder(model, input_ids=ids, use_cache=True).cache
        cache.batch_repeat_interleave(len(batch))
    rest = [Sample(s.prompt_ids[n:], s.completion_ids, s.advantage) for s in batch]
    suffix_ids, suffix_mask = right_padded(rest, pad_id, device)
    attention = torch.cat(
        [torch.ones((len(batch), n), dtype=torch.long, device=device), suffix_mask], dim=1
    )
    positions = torch.arange(n, n + suffix_ids.shape[1], device=device).expand(len(batch), -1)
    hidden = run_decoder(
        model,
        input_ids=suffix_ids,
        attention_mask=attention,
        position_ids=positions,
        cache=cache,
        use_cache=True,
    ).last_hidden_state
    return hidden, n


def completion_logprobs(
    model: torch.nn.Module,
    batch: Sequence[Sample],
    pad_id: int,
    temperature: float = 1.0,
    min_shared_prefix_tokens: int | None = None,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token under ``guide(logits / temperature)``.

    Args:
        model: a causal LM with ``get_decoder()`` and ``get_output_embeddings()``
            (transformers models, peft-wrapped or not).
        batch: samples; each needs >= 1 prompt token and >= 1 completion token.
        pad_id: padding token id (right padding; padded positions are never scored).
        temperature: the sampling temperature, > 0.
        min_shared_prefix_tokens: a prompt prefix shared by every row of at least
            this many tokens is computed once (see ``_hidden_states``); None reads
            ``MIN_SHARED_PREFIX_TOKENS``.
        prefix: key/value states of a prefix every row's prompt starts with, computed
            elsewhere (once per optimiser step: ``shared_prefix.scored_micro_batches``).

    Returns:
        ``(logprobs [B, T] float32, mask [B, T] float32)``, ``T`` the longest
        completion; mask is 1 on completion tokens, 0 on padding (logprob 0 there).

    Raises:
        ValueError: a non-positive temperature or an empty prompt/completion.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score samples, got {temperature}")
    if any(not s.prompt_ids or not s.completion_ids for s in batch):
        raise ValueError("every sample needs at least one prompt token and one completion token")
    device = next(model.parameters()).device
    min_shared = (
        MIN_SHARED_PREFIX_TOKENS if min_shared_prefix_tokens is None else min_shared_prefix_tokens
    )
    if prefix is not None and any(
        s.prompt_ids[: prefix.length] != prefix.ids or len(s.prompt_ids) <= prefix.length
        for s in batch
    ):
        raise ValueError(
            f"every prompt must start with the {prefix.length}-token shared prefix and extend it"
        )
    hidden, shared = _hidden_states(model, batch, pad_id, device, min_shared, prefix)
    t_max = max(len(s.completion_ids) for s in batch)
    positions, targets, mask = _completion_index(batch, t_max, shared, device)
    picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))  # [B, T, H]
    logits = model.get_output_embeddings()(picked).float() / temperature  # [B, T, V]
    allowed = _allowed(batch, t_max, logits.shape[-1], device)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    return torch.where(mask > 0, logprobs, torch.zeros_like(logprobs)), mask


def _completion_index(
    batch: Sequence[Sample], t_max: int, shared: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(positions, targets, mask)``, each ``[B, t_max]``: the hidden-state position that predicts each
    completion token (``shared`` prefix positions are not in ``hidden``), the token, 1.0 on real tokens."""
    positions = torch.zeros((len(batch), t_max), dtype=torch.long)
    targets = torch.zeros((len(batch), t_max), dtype=torch.long)
    mask = torch.zeros((len(batch), t_max))
    for i, s in enumerate(batch):
        start, n = len(s.prompt_ids), len(s.completion_ids)
        positions[i, :n] = torch.arange(start - 1 - shared, start - 1 - shared + n)
        targets[i, :n] = torch.tensor(s.completion_ids)
        mask[i, :n] = 1.0
    return positions.to(device), targets.to(device), mask.to(device)
