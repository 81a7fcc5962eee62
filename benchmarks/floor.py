"""The model path against this machine's floor, measured in the same run (issue 28).

First the floor, in this process with the thread policy the policy uses
(``rewardbox.threads``, applied first; each figure with the team its rows run on:
the wide team for GEMMs, prefill and the update, the decode team for memory
and decode steps): GEMM GFLOP/s in float32 and bfloat16 (a prefill-shaped
``[M x K] @ [K x N]`` matmul, SmolLM2-135M's MLP widths) and memory bandwidth
(GiB/s reading a tensor far larger than the caches). Then the model, in the
dtype ``policy.dtype: auto`` picks here (``rewardbox.policy.precision``), each
figure as a fraction of its floor:

* **prefill tok/s**: one forward over ``B x L`` prompt tokens; floor = GEMM
  GFLOP/s (model dtype) / FLOPs per token (``2 x matmul parameters`` plus
  attention ``4 x layers x L/2 x hidden``).
* **decode tok/s** at the batch sizes the demo forms: steps of ``B`` rows against
  a ``L``-token cache; floor = bandwidth x ``B`` / bytes read per step (every
  weight once, plus the rows' key/value cache). Where the policy packs its bf16
  weights (``rewardbox.policy.packed_linear``) the rows are measured packed and,
  beside them, with plain ``F.linear`` weights. Where the model takes a shared
  prefix (``rewardbox.policy.attention``), a third row has the rows share the
  context's first ``L - OWN_TOKENS`` tokens, kept once, as the demo's rows share
  their domain prefix; its floor counts the bytes that layout reads (the prefix's
  key/value cache once, each row's own columns).
* **decode ceiling** at each of those batch sizes: one pass of ``B`` rows over
  every linear layer in the policy's way (packed where it packs) and nothing
  else (``linear_pass_seconds``), plus the rows' key/value bytes read at the
  memory bandwidth, which is measured again beside the pass on the same team;
  floor = that bandwidth x ``B`` / bytes read per step, as for the decode row.
  An eager decode step does at least this work, so the ratio is the most such
  a step could reach with this matmul kernel.
* **rows per decode step**: 8 requests reach ``LocalPolicy`` 0.15 s apart (as
  episodes' turns do); the mean number of rows per decode forward over 8
  requests in flight (bounded by the arrivals: the first request decodes alone
  until the second comes), and per step its rows over the requests in flight at
  the model then (what continuous batching decides; 1.0 when every waiting
  request decodes in every step).
* **seconds per scored GRPO sample**: ``trainer.optimise_step`` on ``G``-sample
  groups with a shared first prompt (LoRA r16, all linear layers); floor = FLOPs
  of forward and input-gradient backward (``4 x matmul parameters`` per token the
  step runs, the shared prefix once per group) / GEMM GFLOP/s.

Sizes: ``REWARDBOX_BENCH_FLOOR="prompt,completion,groups,group_size"``
(default ``1100,40,2,4``). Each figure is a best of a few repeats, so load
spikes hurt it less; the load is printed with every row. Models come from
``SmolLM2-135M``'s converted checkpoint (prefill, decode, GRPO) or, with
``model_config`` given (``scripts/gpu_bench.py``, the CPU dry-run test), are
built from a config with random weights.
"""

from __future__ import annotations

import os
import time

import torch

from benchmarks.rows import row

GEMM_SHAPE = (512, 576, 1536)
OWN_TOKENS = 100
"""Each row's own context tokens in the shared-prefix decode row (the demo's prompts: about 1,000
tokens of domain prefix, then the task's own)."""
MEMORY_BYTES = 256 << 20


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync()
        best = min(best, time.perf_counter() - t0)
    return best


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def gemm_gflops(
    dtype: torch.dtype, device: str = "cpu", shape=GEMM_SHAPE, repeats: int = 5
) -> float:
    """Best-of-``repeats`` GFLOP/s of ``[M, K] @ [K, N]`` in ``dtype`` (``2 M K N`` FLOPs per product)."""
    m, k, n = shape
    a, b = (
        torch.randn(m, k, device=device, dtype=dtype),
        torch.randn(k, n, device=device, dtype=dtype),
    )
    inner = 4
    seconds = _best(lambda: [torch.mm(a, b) for _ in range(inner)], repeats)
    return 2 * m * k * n * inner / seconds / 1e9


def memory_gib_s(device: str = "cpu", nbytes: int = MEMORY_BYTES, repeats: int = 5) -> float:
    """Best-of-``repeats`` read bandwidth, GiB/s: summing a ``nbytes`` float32 tensor."""
    x = torch.ones(nbytes // 4, device=device)
    return nbytes / _best(lambda: x.sum(), repeats) / (1 << 30)


def machine_floor(device: str = "cpu") -> dict[str, float]:
    """``{gemm_fp32_gflops, gemm_bf16_gflops, memory_gib_s}`` measured now, each with the thread team
    its rows run on (``rewardbox.threads``): the GEMMs with the wide team (prefill, the update), the
    memory read with the decode team (decode steps)."""
    from rewardbox.threads import wide_team

    with wide_team():
        gemm = {
            "gemm_fp32_gflops": gemm_gflops(torch.float32, device),
            "gemm_bf16_gflops": gemm_gflops(torch.bfloat16, device),
        }
    return gemm | {"memory_gib_s": memory_gib_s(device)}


def matmul_params(model) -> int:
    """Parameters multiplied per token: every linear weight, the LM head included (tied or not)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def prefill_tok_s(model, batch: int, prompt_tokens: int, repeats: int = 2) -> float:
    """Prompt tokens per second of one forward over ``batch x prompt_tokens`` ids (no cache kept)."""
    device = next(model.parameters()).device
    ids = torch.randint(10, model.config.vocab_size, (batch, prompt_tokens), device=device)
    with torch.inference_mode():
        seconds = _best(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), repeats)
    return batch * prompt_tokens / seconds


def decode_tok_s(
    model,
    batch: int,
    context_tokens: int,
    steps: int = 8,
    repeats: int = 2,
    shared_tokens: int = 0,
) -> float:
    """Tokens per second of ``steps`` decode steps of ``batch`` rows after a ``context_tokens`` context.

    The context is prefilled once at batch 1 (untimed) and its cache repeated for the rows, a
    fresh copy per repeat, so only the decode steps are timed (through ``kv_cache.preallocated_cache``,
    the policy's in-place cache). With ``shared_tokens`` (a model that takes a shared prefix,
    ``attention.takes_shared_prefix``), the rows share the context's first ``shared_tokens`` tokens,
    kept once (``attention.SharedPrefix``), and each has ``context_tokens - shared_tokens`` tokens of
    its own, prefilled untimed through ``decode.prefill`` as the policy does.
    """
    if shared_tokens:
        return _shared_decode_tok_s(model, batch, context_tokens, steps, repeats, shared_tokens)
    from rewardbox.policy.kv_cache import preallocated_cache

    device = next(model.parameters()).device
    ids = torch.randint(10, model.config.vocab_size, (1, context_tokens), device=device)
    best = float("inf")
    with torch.inference_mode():
        prefilled = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        for _ in range(repeats):
            cache = preallocated_cache(model.config, context_tokens + steps, prefilled.cache)
            cache.batch_repeat_interleave(batch)
            step = prefilled.logits[:, -1:].argmax(-1).expand(batch, 1)
            _sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                out = model(input_ids=step, cache=cache, use_cache=True, logits_to_keep=1)
                step = out.logits[:, -1:].argmax(-1)
            _sync()
            best = min(best, time.perf_counter() - t0)
    return batch * steps / best


def linear_pass_seconds(model, batch: int, repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds of one pass over every ``nn.Linear`` of ``model`` (a tied LM head
    once) with ``batch`` rows of one position each (``[batch, 1, in] -> [batch, 1, out]``), after one
    untimed pass (which packs the weights where ``PackedLinears.active`` is entered): a decode step's
    matmuls through the layers' own forwards (``PackedLinears.active`` makes that the packed oneDNN
    kernel, with its per-call module and lookup cost) and nothing else: no attention, norms,
    rotary or element-wise ops. An eager decode step makes these calls and more."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {
        width: torch.randn(batch, 1, width, device=device, dtype=dtype)
        for width in {layer.in_features for layer in layers}
    }

    def one_pass() -> None:
        for layer in layers:
            layer(inputs[layer.in_features])

    with torch.inference_mode():
        one_pass()
        _sync()
        return _best(one_pass, repeats)


def _shared_decode_tok_s(
    model, batch: int, context_tokens: int, steps: int, repeats: int, shared_tokens: int
) -> float:
    from rewardbox.policy.attention import SharedPrefix
    from rewardbox.policy.decode import advance, prefill
    from rewardbox.policy.prefix_cache import expanded

    if not 0 < shared_tokens < context_tokens:
        raise ValueError("shared_tokens must leave each row at least one token of its own")
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    prefix = torch.randint(10, vocab, (1, shared_tokens), device=device)
    own = torch.randint(10, vocab, (batch, context_tokens - shared_tokens), device=device)
    ids = torch.cat([prefix.expand(batch, -1), own], dim=1)
    best = float("inf")
    with torch.inference_mode():
        source = model(input_ids=prefix, use_cache=True, logits_to_keep=1).cache
        for _ in range(repeats):
            shared = SharedPrefix(tuple(prefix[0].tolist()), source)
            rows, logits = prefill(
                model,
                ids,
                torch.ones_like(ids),
                expanded(source, batch),
                context_tokens + steps,
                list(range(batch)),
                shared,
            )
            rows.last = logits[:, -1].argmax(-1)
            _sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                rows.last = advance(model, rows)[:, -1].argmax(-1)
            _sync()
            best = min(best, time.perf_counter() - t0)
    return batch * steps / best


def attention_flops_per_token(config, context_tokens: int) -> float:
    """``QK^T`` and ``AV`` FLOPs per token at a mean context of ``context_tokens``."""
    return 4.0 * config.num_hidden_layers * context_tokens * config.hidden_size


def kv_bytes_per_row(config, context_tokens: int, itemsize: int) -> float:
    """Bytes of key/value cache one decode row reads at ``context_tokens``."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return (
        2.0
        * config.num_hidden_layers
        * config.num_key_value_heads
        * head_dim
        * context_tokens
        * itemsize
    )


def sizes() -> tuple[int, int, int, int]:
    """``(prompt, completion, groups, group_size)`` from ``REWARDBOX_BENCH_FLOOR`` or the defaults."""
    raw = os.environ.get("REWARDBOX_BENCH_FLOOR", "1100,40,2,4")
    prompt, completion, groups, group_size = (int(x) for x in raw.split(","))
    return prompt, completion, groups, group_size


def run() -> list[dict]:
    """The floor rows and the model rows as fractions of them (see the module doc)."""
    from benchmarks.floor_model import model_rows
    from rewardbox.policy.precision import resolve_dtype
    from rewardbox.threads import apply_thread_policy

    policy = apply_thread_policy("auto", resolve_dtype("auto"))  # as LocalPolicy applies it
    print(f"thread policy: decode team {policy.threads}, wide team {policy.wide_threads}")
    floor = machine_floor()
    rows = [
        row("GEMM fp32 (this machine, floor)", floor["gemm_fp32_gflops"], "GFLOP/s", None),
        row(
            "GEMM bf16 (this machine, floor)",
            floor["gemm_bf16_gflops"],
            "GFLOP/s",
            floor["gemm_fp32_gflops"],
            "fp32 GEMM, this run",
        ),
        row("memory read (this machine, floor)", floor["memory_gib_s"], "GiB/s", None),
    ]
    return rows + model_rows(floor, *sizes())
