"""One local GRPO optimiser step on the embedded model: time and peak memory (issue #13).

The batch is the issue's: ``sequences x (prompt_tokens + completion_tokens)``
token ids (16 x (1,095 + 40) by default; smaller sizes via arguments or
``REWARDBOX_BENCH_GRPO="sequences,prompt,completion,repeats"``), LoRA r 8 on the
attention projections, AdamW, micro-batches of 4. Three ways to take the same
step, interleaved per repeat so machine load hits each alike:

* ``full-vocab logits`` (the anchor: the trainer before issue #10/#13): logits
  for every prompt position, then the completion slices' log-softmax.
* ``completion-only logits`` (``rewardbox.training.trainer.optimise_step``):
  hidden states gathered at the completion positions before the ``lm_head``
  (TRL's ``logits_to_keep``), temperature and guide applied; once with every
  prompt computed in full, once (the trainer's default) with the prompt prefix
  the micro-batch shares computed once.
* ``TRL GRPO loss`` (when ``trl`` is installed): ``trl.GRPOTrainer._compute_loss``
  ("dapo" = token-mean, beta 0, its fused LM head) and backward on the same
  micro-batches, then the same clip and AdamW step.

Memory is what autograd saves for backward over the step (activations,
logits: the part of the footprint that differs between the ways; distinct
storages, summed over micro-batches), counted with ``saved_tensors_hooks``, so
it does not depend on the machine's load or the allocator. Prompts share their
first ``SHARED_PROMPT_FRAC`` tokens, as the embedded domains' prompts do; the
trainer computes such a prefix once per step (``training.shared_prefix``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
ISSUE_TODAY_S = 112.0
"""Today's step at 16 x (1,095 + 40), measured when issue #13 was filed (2 cores)."""


def _load():
    return os.getloadavg()[0]


SHARED_PROMPT_FRAC = 900 / 1095
"""Share of a prompt that every prompt of a domain repeats (system prompt, tool list, worked example)."""


def _batch(sequences: int, prompt_tokens: int, completion_tokens: int, vocab: int):
    """Random token ids; every prompt starts with the same ``SHARED_PROMPT_FRAC`` of its tokens, as real ones do."""
    from rewardbox.training.logprobs import Sample

    gen = torch.Generator().manual_seed(0)
    shared = torch.randint(
        100, vocab, (int(prompt_tokens * SHARED_PROMPT_FRAC),), generator=gen
    ).tolist()
    out = []
    for i in range(sequences):
        own = torch.randint(
            100, vocab, (prompt_tokens - len(shared) + completion_tokens,), generator=gen
        ).tolist()
        ids = shared + own
        out.append(Sample(ids[:prompt_tokens], ids[prompt_tokens:], 1.0 if i % 2 else -1.0))
    return out


def _full_vocab_logprobs(model, batch, pad_id: int, temperature: float = 1.0):
    """The trainer's scoring before this change: logits at every position (the anchor)."""
    from rewardbox.training.logprobs import right_padded

    input_ids, attention = right_padded(batch, pad_id, "cpu")
    logits = model(input_ids=input_ids, attention_mask=attention).logits.float() / temperature
    t_max = max(len(s.completion_ids) for s in batch)
    out, mask = torch.zeros((len(batch), t_max)), torch.zeros((len(batch), t_max))
    for i, s in enumerate(batch):
        start, n = len(s.prompt_ids), len(s.completion_ids)
        step_logits = logits[i, start - 1 : start - 1 + n]
        out[i, :n] = (
            torch.log_softmax(step_logits, dim=-1)
            .gather(1, torch.tensor(s.completion_ids)[:, None])
            .squeeze(1)
        )
        mask[i, :n] = 1.0
    return out, mask


def _anchor_step(model, optimizer, samples, config, pad_id):
    from rewardbox.training.losses import policy_loss

    total_tokens = sum(len(s.completion_ids) for s in samples)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for start in range(0, len(samples), config.micro_batch_sequences):
        batch = samples[start : start + config.micro_batch_sequences]
        logprobs, mask = _full_vocab_logprobs(model, batch, pad_id, config.temperature)
        adv = torch.tensor([s.advantage for s in batch])
        loss, _ = policy_loss(logprobs, logprobs.detach(), adv, mask, clip_eps=config.clip_eps)
        (loss * mask.sum().item() / total_tokens).backward()
    torch.nn.utils.clip_grad_norm_(
        [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
    )
    optimizer.step()
    model.eval()


def _without_shared_prefix(fn):
    """Run ``fn`` with the trainer's shared-prefix computation switched off (each row's prompt in full)."""
    from rewardbox.training import logprobs

    saved = logprobs.MIN_SHARED_PREFIX_TOKENS
    logprobs.MIN_SHARED_PREFIX_TOKENS = 1 << 30
    try:
        return fn()
    finally:
        logprobs.MIN_SHARED_PREFIX_TOKENS = saved


def _trl_stepper(ckpt: Path, config, tokenizer):
    """A ``trl.GRPOTrainer`` on the same checkpoint and LoRA; returns (model, step fn) or None without trl."""
    try:
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM
        from trl import GRPOConfig as TrlConfig
        from trl import GRPOTrainer
    except ImportError:
        return None
    args = TrlConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        report_to=[],
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=64,
        loss_type="dapo",
        beta=0.0,
        temperature=config.temperature,
        bf16=False,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(ckpt),
        reward_funcs=lambda completions, **kw: [0.0],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x", "y"]}),
        processing_class=tokenizer,
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA),
    )
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step(samples):
        total_tokens = sum(len(s.completion_ids) for s in samples)
        model.train()
        optimizer.zero_grad(set_to_none=True)
        for start in range(0, len(samples), config.micro_batch_sequences):
            batch = samples[start : start + config.micro_batch_sequences]
            inputs = {
                "prompt_ids": torch.tensor([s.prompt_ids for s in batch]),
                "completion_ids": torch.tensor([s.completion_ids for s in batch]),
                "advantages": torch.tensor([s.advantage for s in batch]),
                "num_items_in_batch": torch.tensor(float(total_tokens)),
            }
            inputs["prompt_mask"] = torch.ones_like(inputs["prompt_ids"])
            inputs["completion_mask"] = torch.ones_like(inputs["completion_ids"])
            trainer._compute_loss(model, inputs).backward()
        torch.nn.utils.clip_grad_norm_(
            [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
        )
        optimizer.step()
        model.eval()

    return model, step


class _SavedForBackward:
    """Bytes of the distinct tensors autograd saves for backward (activation memory), per block."""

    def __init__(self, exclude: set[int]):
        self.total = 0
        self._seen: set[int] = set(exclude)  # the weights themselves are not activation memory

    def pack(self, tensor):
        key = tensor.untyped_storage().data_ptr()
        if key not in self._seen:
            self._seen.add(key)
            self.total += tensor.untyped_storage().nbytes()
        return tensor

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)


def _timed(fn, weights: set[int]) -> tuple[float, int]:
    """(seconds, bytes saved for backward over the step: every micro-batch's graph, summed, weights excluded)."""
    t0 = time.perf_counter()
    with _SavedForBackward(weights) as saved:
        fn()
    return time.perf_counter() - t0, saved.total


def _sizes(sequences, prompt_tokens, completion_tokens, repeats, threads):
    env = os.environ.get("REWARDBOX_BENCH_GRPO")
    if env:
        sequences, prompt_tokens, completion_tokens, repeats, *rest = (
            int(x) for x in env.split(",")
        )
        threads = rest[0] if rest else threads
    return sequences, prompt_tokens, completion_tokens, repeats, threads


def run(
    sequences: int = 16,
    prompt_tokens: int = 1095,
    completion_tokens: int = 40,
    repeats: int = 1,
    checkpoint: str | None = None,
    threads: int = 2,
) -> list[dict]:
    """Time one GRPO step three ways; rows ``{row, value, unit, anchor, ratio, load}``.

    ``ratio`` is anchor / value for times (above 1 = faster than the anchor) and
    value / anchor for memory (below 1 = less memory). ``threads``: torch
    intra-op threads (on an oversubscribed machine 1 is far steadier: measured
    here at load 8, one 2 x 136-token forward and backward took 1.8-2.8 s with
    1 thread and 14-25 s with 2). ``REWARDBOX_BENCH_GRPO="seqs,prompt,completion,repeats[,threads]"``
    overrides the sizes.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import optimise_step

    sequences, prompt_tokens, completion_tokens, repeats, threads = _sizes(
        sequences, prompt_tokens, completion_tokens, repeats, threads
    )
    torch.set_num_threads(threads)
    ckpt = (
        Path(checkpoint)
        if checkpoint
        else convert_gguf_to_safetensors(Path(tempfile.gettempdir()) / "rewardbox-bench-base")
    )
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    config = GRPOConfig(
        lora_r=LORA["r"],
        lora_alpha=LORA["lora_alpha"],
        lora_target_modules=LORA["target_modules"],
        micro_batch_sequences=4,
        temperature=1.0,
    )
    model = attach_lora(AutoModelForCausalLM.from_pretrained(ckpt), config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    samples = _batch(sequences, prompt_tokens, completion_tokens, model.config.vocab_size)
    pad = tokenizer.convert_tokens_to_ids("<|im_end|>")
    warm = _batch(2, 32, 8, model.config.vocab_size)
    ways = {
        "full-vocab logits": lambda b: _anchor_step(model, optimizer, b, config, pad),
        "completion-only logits, no shared prefix": lambda b: _without_shared_prefix(
            lambda: optimise_step(model, optimizer, b, config, pad)
        ),
        "completion-only logits + shared prefix once": lambda b: optimise_step(
            model, optimizer, b, config, pad
        ),
    }
    trl = _trl_stepper(ckpt, config, tokenizer)
    if trl is not None:
        ways["TRL GRPO loss"] = trl[1]
    for fn in ways.values():
        fn(warm)  # optimiser state, thread pools, first-call dispatch: outside the timing
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    if trl is not None:
        weights |= {p.untyped_storage().data_ptr() for p in trl[0].parameters()}
    measured: dict[str, list[tuple[float, int]]] = {name: [] for name in ways}
    loads = []
    for _ in range(repeats):
        for name, fn in ways.items():
            measured[name].append(_timed(lambda fn=fn: fn(samples), weights))
            loads.append(_load())
    return _rows(measured, sequences, prompt_tokens, completion_tokens, statistics.median(loads))


def _rows(measured, sequences, prompt_tokens, completion_tokens, load) -> list[dict]:
    size = f"{sequences} x ({prompt_tokens} + {completion_tokens}) tokens, {torch.get_num_threads()} thread(s)"
    median_s = {name: statistics.median(t for t, _ in runs) for name, runs in measured.items()}
    peak_gib = {
        name: statistics.median(m for _, m in runs) / 2**30 for name, runs in measured.items()
    }
    anchor = "full-vocab logits"
    rows = []
    for name in measured:
        rows.append(
            {
                "row": f"GRPO step, {name}, {size}",
                "value": round(median_s[name], 2),
                "unit": "s",
                "anchor": f"{anchor}: {median_s[anchor]:.2f} s",
                "ratio": round(median_s[anchor] / median_s[name], 3),
                "load": round(load, 2),
            }
        )
        rows.append(
            {
                "row": f"GRPO step saved-for-backward memory, {name}",
                "value": round(peak_gib[name], 3),
                "unit": "GiB",
                "anchor": f"{anchor}: {peak_gib[anchor]:.3f} GiB",
                "ratio": round(peak_gib[name] / peak_gib[anchor], 3) if peak_gib[anchor] else None,
                "load": round(load, 2),
            }
        )
    for row in rows:
        print(
            f"{row['row']}: {row['value']} {row['unit']} (anchor {row['anchor']}, ratio {row['ratio']}, "
            f"load {row['load']})"
        )
    return rows
