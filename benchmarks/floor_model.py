"""The model rows of ``benchmarks.floor``: prefill, decode, rows per decode step, GRPO seconds per sample.

Not a benchmark of its own (no ``run``); ``benchmarks.floor`` and
``scripts/gpu_bench.py`` call it. See ``benchmarks.floor`` for the floors.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.floor import (
    attention_flops_per_token,
    decode_tok_s,
    kv_bytes_per_row,
    matmul_params,
    prefill_tok_s,
)
from benchmarks.rows import alternated, row

DEMO_BATCH_SIZES = (1, 4, 8)
"""Decode batch sizes the demo forms (issue 28: 3.0-3.85 rows per step on average, up to 8 in flight)."""


TOOL_RESULT_TOKENS = 60
"""Tokens between one agent turn and the next in ``group_samples_like_grpo`` (a tool result with the
chat template's markers): the demo's second-turn prompts were 80-240 tokens longer than the first
(completions of 7-64 tokens), in the steps a one-off dump of ``make demo``'s GRPO samples showed."""

MULTI_TURN = 3
"""Agent turns per rollout of the floor's multi-turn GRPO row: the demo's steps scored 21 and 25
samples for 8 rollouts (2.6-3.1 turns each) in that dump."""


def group_samples_like_grpo(
    groups: int, group_size: int, prompt: int, completion: int, vocab: int, turns: int = 1
) -> list:
    """``groups x group_size`` rollouts of ``turns`` agent turns each, one sample per turn.

    A 900/1,100 system prefix is shared by all, each group's first prompt by its rows, and turn
    ``k + 1``'s prompt is turn ``k``'s prompt, its completion and ``TOOL_RESULT_TOKENS`` more (a
    later turn's prompt extends its rollout's earlier turns, as in a real step).
    """
    from rewardbox.training.logprobs import Sample

    gen = torch.Generator().manual_seed(0)
    system = torch.randint(10, vocab, (prompt * 9 // 11,), generator=gen).tolist()
    out = []
    for _ in range(groups):
        own = torch.randint(10, vocab, (prompt - len(system),), generator=gen).tolist()
        for r in range(group_size):
            context = system + own
            for _ in range(turns):
                done = torch.randint(10, vocab, (completion,), generator=gen).tolist()
                out.append(Sample(context, done, advantage=1.0 if r % 2 else -1.0))
                tool = torch.randint(10, vocab, (TOOL_RESULT_TOKENS,), generator=gen).tolist()
                context = context + done + tool
    return out


def grpo_seconds_per_sample(model, samples, repeats: int = 1) -> tuple[float, int]:
    """Best seconds per sample of ``trainer.optimise_step`` (LoRA r16, all linear), and tokens the decoder ran."""
    from rewardbox.threads import wide_team
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.shared_prefix import plan_blocks, tokens_run
    from rewardbox.training.trainer import optimise_step

    config = GRPOConfig(micro_batch_sequences=2)
    lora = attach_lora(model, config)
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-5)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        with wide_team():  # as the product's update runs (trainer._optimise_epochs)
            optimise_step(lora, optimizer, samples, config, pad_id=0)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    ran = tokens_run(plan_blocks(sorted(samples, key=lambda s: s.prompt_ids)))
    lora.unload()
    return best / len(samples), ran


def rows_per_decode_step(
    checkpoint: Path, requests: int = 8, gap_s: float = 0.15, new_tokens: int = 24
) -> dict:
    """Rows per decode forward while ``requests`` short requests arrive ``gap_s`` apart at ``LocalPolicy``.

    Returns ``rows_per_step`` (mean rows per decode forward), ``decode_steps``, ``in_flight``
    (``requests``) and ``share_of_in_flight``: per decode step, its rows over the requests in flight
    at the model then (asked and not yet answered), averaged over the steps. The first ratio is
    bounded by the arrivals (the first request decodes alone until the second arrives); the second
    is what batching decides: 1.0 when every request waiting at the model decodes in every step.
    """
    from rewardbox.policy.base import ChatRequest
    from rewardbox.policy.local import LocalPolicy

    policy = LocalPolicy(checkpoint, max_batch_size=16, seed=0, guided_tool_calls=False)
    steps: list[tuple[float, int]] = []  # (time, rows) of each decode forward
    spans: list[list[float]] = [[0.0, float("inf")] for _ in range(requests)]
    hook = policy.model.register_forward_pre_hook(
        lambda _m, _a, kw: (
            steps.append((time.perf_counter(), kw["input_ids"].shape[0]))
            if kw["input_ids"].shape[1] == 1
            else None
        ),
        with_kwargs=True,
    )

    async def one(i: int):
        await asyncio.sleep(i * gap_s)
        spans[i][0] = time.perf_counter()
        done = await policy.complete(
            ChatRequest(
                messages=[{"role": "user", "content": f"Note {i} about tea."}],
                tools=[],
                max_new_tokens=new_tokens,
                temperature=0.0,
            )
        )
        spans[i][1] = time.perf_counter()
        return done

    async def go():
        try:
            return await asyncio.gather(*(one(i) for i in range(requests)))
        finally:
            await policy.aclose()

    asyncio.run(go())
    hook.remove()
    shares = [
        rows / max(1, sum(1 for start, end in spans if start <= t < end)) for t, rows in steps
    ]
    return {
        "rows_per_step": sum(rows for _, rows in steps) / max(1, len(steps)),
        "decode_steps": len(steps),
        "in_flight": requests,
        "share_of_in_flight": sum(shares) / max(1, len(shares)),
    }


def _fractions(model, floor: dict, prompt: int, completion: int) -> tuple[float, float]:
    """(prefill floor tok/s, decode floor tok/s per row) for ``model`` in its dtype."""
    dtype = next(model.parameters()).dtype
    gflops = floor["gemm_bf16_gflops"] if dtype == torch.bfloat16 else floor["gemm_fp32_gflops"]
    params = matmul_params(model)
    flops = 2.0 * params + attention_flops_per_token(model.config, prompt // 2)
    itemsize = torch.finfo(dtype).bits // 8
    weight_bytes = sum(p.numel() for p in model.parameters()) * itemsize
    return gflops * 1e9 / flops, (
        floor["memory_gib_s"] * (1 << 30),
        weight_bytes,
        kv_bytes_per_row(model.config, prompt + completion // 2, itemsize),
    )


def model_rows(
    floor: dict,
    prompt: int,
    completion: int,
    groups: int,
    group_size: int,
    *,
    model=None,
    checkpoint: Path | None = None,
    rows_step: bool = True,
) -> list[dict]:
    """Prefill, decode (``DEMO_BATCH_SIZES``), rows per step and GRPO rows as fractions of ``floor``.

    Args:
        floor: ``benchmarks.floor.machine_floor()``'s figures.
        prompt, completion, groups, group_size: sizes (``benchmarks.floor.sizes``).
        model: a causal LM to measure (built from a config); None loads the SmolLM2 checkpoint
            in ``policy.dtype: auto``'s dtype.
        checkpoint: the checkpoint directory for the rows-per-step row (None: converted SmolLM2).
        rows_step: measure rows per decode step (needs a checkpoint directory with a tokenizer).
    """
    if model is None:
        from transformers import AutoModelForCausalLM

        from rewardbox.policy.attention import implementation_for
        from rewardbox.policy.checkpoint import convert_gguf_to_safetensors
        from rewardbox.policy.precision import resolve_dtype

        checkpoint = checkpoint or convert_gguf_to_safetensors(
            Path(tempfile.gettempdir()) / "rewardbox-bench-base"
        )
        dtype = resolve_dtype("auto")
        # the attention the local policy loads this dtype with (rewardbox.policy.attention)
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint,
            dtype=dtype,
            attn_implementation=implementation_for(torch.device("cpu"), dtype),
        )
    model.eval()
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    rows = _speed_rows(model, floor, prompt, completion, dtype)
    if rows_step and checkpoint is not None:
        from rewardbox.threads import current_thread_policy, restore_thread_policy

        applied = current_thread_policy()
        measured = rows_per_decode_step(checkpoint)
        if (
            applied is not None
        ):  # its LocalPolicy measured teams of its own; the GRPO row keeps ours
            restore_thread_policy(applied)
        rows.append(
            row(
                "rows per decode step, 8 requests 0.15 s apart",
                measured["rows_per_step"],
                "rows",
                8.0,
                "requests in flight",
                detail=measured,
            )
        )
        rows.append(
            row(
                "decode rows / requests in flight at that step",
                measured["share_of_in_flight"],
                "share",
                1.0,
                "all in flight",
            )
        )
    rows.append(_grpo_row(model, floor, prompt, completion, groups, group_size, dtype))
    rows.append(_grpo_row(model, floor, prompt, completion, groups, group_size, dtype, MULTI_TURN))
    return rows


def _speed_rows(model, floor: dict, prompt: int, completion: int, dtype: str) -> list[dict]:
    """Prefill at batch 1 and decode at ``DEMO_BATCH_SIZES`` against the GEMM and memory floors."""
    prefill_floor, (bandwidth, weight_bytes, kv_row) = _fractions(model, floor, prompt, completion)
    from rewardbox.threads import wide_team

    with wide_team():  # the policy prefills with the wide team (worker._admit)
        prefill = prefill_tok_s(model, 1, prompt)
    rows = [
        row(
            f"prefill {prompt} tokens, batch 1 ({dtype})",
            prefill,
            "tokens/s",
            prefill_floor,
            "GEMM floor, this run",
        )
    ]
    packed = _packed_linears(model)
    ways = _decode_weights(packed, _shared_tokens(model, prompt))
    for batch in DEMO_BATCH_SIZES:
        measured = _paired_decode(model, batch, prompt, ways)
        for label, _, shared in ways:
            # bytes a step reads: the weights, the shared prefix's KV once, each row's own KV
            own = kv_row * (prompt + completion // 2 - shared) / (prompt + completion // 2)
            read = weight_bytes + kv_row * shared / (prompt + completion // 2) + batch * own
            rows.append(
                row(
                    f"decode, batch {batch}, {prompt}-token context ({dtype}{label})",
                    measured[label],
                    "tokens/s",
                    bandwidth * batch / read,
                    "memory floor of the bytes this layout reads, this run",
                )
            )
        rows.append(_ceiling_row(model, batch, dtype, ways[0], weight_bytes, kv_row))
    if packed is not None:
        packed.drop()  # the GRPO row runs without the copies, as the update does
    return rows


def _ceiling_row(model, batch: int, dtype: str, way, weight_bytes: float, kv_bytes: float) -> dict:
    """The decode ceiling at ``batch`` rows in ``way`` (the policy's: packed where it packs, each row
    with its whole context; ``weight_bytes`` of parameters and ``kv_bytes`` of keys and values per row
    read a step): the matmuls alone (``floor.linear_pass_seconds``) plus the rows' keys and values read
    at the memory bandwidth, against the decode floor at that bandwidth. The bandwidth is measured on this team right before and after
    the pass (the better of the two), since a shared machine's memory rate moves from minute to minute."""
    from benchmarks.floor import linear_pass_seconds, memory_gib_s

    label, scope, _ = way
    parameter = next(model.parameters())
    linear_bytes = matmul_params(model) * parameter.element_size()
    device = str(parameter.device)
    before = memory_gib_s(device)
    with scope():
        matmuls = linear_pass_seconds(model, batch)
    bandwidth = max(before, memory_gib_s(device)) * (1 << 30)
    kv_seconds = batch * kv_bytes / bandwidth
    return row(
        f"decode ceiling, batch {batch}: matmuls alone + KV at the memory floor ({dtype}{label})",
        batch / (matmuls + kv_seconds),
        "tokens/s",
        bandwidth * batch / (weight_bytes + batch * kv_bytes),
        "memory floor, bandwidth measured beside it",
        detail={
            "matmul_seconds": matmuls,
            "linear_weight_gib_s": linear_bytes / matmuls / (1 << 30),
            "memory_gib_s": bandwidth / (1 << 30),
            "kv_seconds": kv_seconds,
        },
    )


def _paired_decode(model, batch: int, prompt: int, ways: list, pairs: int = 3) -> dict[str, float]:
    """Median of ``pairs`` decode tok/s runs per way (weights, shared prefix), the ways alternated (so
    a load spike on this shared machine hits all; a single best-of-2 flipped their order)."""
    import statistics

    def measure(scope, shared: int) -> float:
        with scope():
            return decode_tok_s(model, batch, prompt, steps=16, repeats=1, shared_tokens=shared)

    runs = alternated(
        {label: functools.partial(measure, scope, shared) for label, scope, shared in ways}, pairs
    )
    return {label: statistics.median(values) for label, values in runs.items()}


def _shared_tokens(model, prompt: int) -> int:
    """The shared-prefix row's shared tokens (``prompt - OWN_TOKENS``), 0 where the model cannot take a
    shared prefix (``attention.takes_shared_prefix``) or the prompt is too short."""
    from benchmarks.floor import OWN_TOKENS
    from rewardbox.policy.attention import takes_shared_prefix

    if not takes_shared_prefix(model) or prompt <= OWN_TOKENS:
        return 0
    return prompt - OWN_TOKENS


def _packed_linears(model):
    """``PackedLinears`` over ``model`` where the local policy would pack its weights, else None."""
    from rewardbox.policy import packed_linear

    parameter = next(model.parameters())
    if not packed_linear.available(parameter.dtype, parameter.device):
        return None
    return packed_linear.PackedLinears(model)


def _decode_weights(packed, shared: int = 0) -> list:
    """``(label, context factory, shared tokens)`` per way of running the decode rows: the policy's
    packed weights and, beside them in the same run, plain ``F.linear`` (``packed_linear``; plain
    only without), each row with the whole context its own; then, with ``shared``, the policy's way
    with the rows sharing the context's first ``shared`` tokens (``attention.SharedPrefix``)."""
    from contextlib import nullcontext

    if packed is None:
        ways = [("", nullcontext, 0)]
    else:
        ways = [(", packed weights", packed.active, 0), (", F.linear weights", nullcontext, 0)]
    if shared:
        label, scope, _ = ways[0]
        ways.append((f"{label}, {shared}-token shared prefix", scope, shared))
    return ways


def _grpo_row(
    model,
    floor: dict,
    prompt: int,
    completion: int,
    groups: int,
    group_size: int,
    dtype: str,
    turns: int = 1,
) -> dict:
    """GRPO seconds per scored sample against 4 x matmul parameters x decoder tokens run / GEMM GFLOP/s
    (rollouts of ``turns`` agent turns, one sample each: ``group_samples_like_grpo``)."""
    samples = group_samples_like_grpo(
        groups, group_size, prompt, completion, model.config.vocab_size, turns
    )
    per_sample_s, ran = grpo_seconds_per_sample(model, samples)
    head = model.get_output_embeddings().weight.numel()
    gflops = floor["gemm_bf16_gflops"] if dtype == "bfloat16" else floor["gemm_fp32_gflops"]
    flops = 4.0 * (matmul_params(model) - head) * ran + 4.0 * head * completion * len(samples)
    floor_s = flops / (gflops * 1e9) / len(samples)
    return row(
        f"GRPO seconds per scored sample ({groups}x{group_size}"
        + (f"x{turns} turns" if turns > 1 else "")
        + f", {prompt}+{completion} tokens, {dtype})",
        per_sample_s,
        "s",
        floor_s,
        "GEMM floor, this run",
        detail={"decoder_tokens_run": ran, "samples": len(samples)},
    )
