"""The floor benchmark's pieces and the GPU script's CPU dry run (scripts/gpu_bench.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from benchmarks import floor

ROOT = Path(__file__).resolve().parents[2]


def test_floor_figures_are_positive_and_bandwidth_is_bytes_over_time():
    assert floor.gemm_gflops(torch.float32, shape=(64, 64, 64), repeats=2) > 0
    assert floor.memory_gib_s(nbytes=8 << 20, repeats=2) > 0


def test_attention_and_kv_terms_follow_the_config():
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3
    )
    assert floor.attention_flops_per_token(config, 100) == 4 * 30 * 100 * 576
    assert floor.kv_bytes_per_row(config, 100, 4) == 2 * 30 * 3 * 64 * 100 * 4


def test_the_matmul_pass_runs_every_linear_once_per_repeat_at_decode_shapes():
    """``linear_pass_seconds`` is a decode step's matmuls alone: each linear layer (the LM head too)
    once per repeat and once untimed before them, on ``batch`` rows of one position."""
    from tests.fixtures.tiny_models import tiny_llama

    model = tiny_llama()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    seen = []
    for layer in linears:
        layer.register_forward_hook(
            lambda layer, args, out: seen.append((layer, tuple(args[0].shape), out.shape[-1]))
        )
    seconds = floor.linear_pass_seconds(model, batch=3, repeats=2)
    assert seconds > 0
    assert len(seen) == 3 * len(linears) and {layer for layer, _, _ in seen} == set(linears)
    for layer, shape, out in seen:
        assert shape == (3, 1, layer.in_features) and out == layer.out_features


def test_the_matmul_pass_multiplies_packed_weights_and_a_tied_head_once(monkeypatch):
    """In bf16 under ``PackedLinears.active`` every call of the pass takes the packed kernel (bf16
    inputs, inference mode), and a tied LM head is one layer of the pass, not two."""
    from rewardbox.policy import packed_linear
    from tests.fixtures.tiny_models import tiny_llama

    if not packed_linear.available(torch.bfloat16, "cpu"):
        pytest.skip("this CPU has no bf16 units or oneDNN's packing ops: nothing is packed")
    model = tiny_llama(tie_word_embeddings=True).to(torch.bfloat16).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 * 7 + 1
    calls = []
    real = packed_linear.packed_linear

    def counting(x, packed, bias):
        calls.append((x.dtype, tuple(x.shape)))
        return real(x, packed, bias)

    monkeypatch.setattr(packed_linear, "packed_linear", counting)
    packed = packed_linear.PackedLinears(model)
    with packed.active():
        floor.linear_pass_seconds(model, batch=2, repeats=3)
    assert len(calls) == 4 * len(linears)
    assert {dtype for dtype, _ in calls} == {torch.bfloat16}
    assert sum(shape == (2, 1, 32) for _, shape in calls) == 4 * (2 * 6 + 1)  # all but down_proj


def test_the_ceiling_adds_the_rows_kv_at_the_better_of_two_memory_reads(monkeypatch):
    """The decode ceiling is ``B / (matmul seconds + B x KV bytes / bandwidth)`` against the decode
    floor ``bandwidth x B / (weight bytes + B x KV bytes)``, with the bandwidth the better of the reads
    taken just before and after the pass."""
    from contextlib import nullcontext

    from benchmarks import floor_model
    from tests.fixtures.tiny_models import tiny_llama

    model = tiny_llama()
    reads = iter([1.0, 2.0])
    monkeypatch.setattr(floor, "memory_gib_s", lambda device: next(reads))
    monkeypatch.setattr(floor, "linear_pass_seconds", lambda model, batch: 0.5)
    kv = 1 << 29  # half a GiB per row
    weights = sum(p.numel() * 4 for p in model.parameters())
    got = floor_model._ceiling_row(model, 4, "float32", ("", nullcontext, 0), weights, kv)
    bandwidth = 2.0 * (1 << 30)
    assert got["value"] == pytest.approx(4 / (0.5 + 4 * kv / bandwidth))
    assert got["anchor"] == pytest.approx(bandwidth * 4 / (weights + 4 * kv))
    assert got["detail"]["memory_gib_s"] == 2.0 and got["detail"]["matmul_seconds"] == 0.5


def test_paired_decode_alternates_the_ways_each_in_its_scope_and_takes_medians(monkeypatch):
    """The decode rows' ways run in order, then reversed (``rows.alternated``), each inside its own
    weights scope with its shared tokens; each way's figure is the median of its runs."""
    from contextlib import contextmanager

    from benchmarks import floor_model

    order, inside = [], []

    def scope_of(label):
        @contextmanager
        def scope():
            inside.append(label)
            yield
            inside.pop()

        return scope

    def fake_decode(model, batch, prompt, steps, repeats, shared_tokens):
        order.append((inside[-1], shared_tokens))
        return float(len(order))

    monkeypatch.setattr(floor_model, "decode_tok_s", fake_decode)
    ways = [("a", scope_of("a"), 0), ("b", scope_of("b"), 7)]
    got = floor_model._paired_decode(None, 8, 100, ways, pairs=3)
    assert order == [("a", 0), ("b", 7), ("b", 7), ("a", 0), ("a", 0), ("b", 7)]
    assert got == {"a": 4.0, "b": 3.0}  # a ran 1st, 4th, 5th; b 2nd, 3rd, 6th


def test_sizes_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("REWARDBOX_BENCH_FLOOR", "200,10,1,2")
    assert floor.sizes() == (200, 10, 1, 2)


def test_gpu_script_dry_run_prints_every_figure_for_both_shapes(capsys):
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    threads = torch.get_num_threads()
    try:
        assert script.main(["--dry-run"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "device cpu" in out and "gemm_fp32_gflops" in out
    for shape in script.SHAPES:
        for figure in (
            "prefill",
            "decode, batch 1,",
            "decode, batch 8,",
            "GRPO seconds per scored sample",
        ):
            line = next((x for x in out.splitlines() if x.startswith(shape) and figure in x), None)
            assert line is not None, (shape, figure, out)
            value = float(re.search(r": ([0-9.e+-]+) (tokens/s|s) ", line).group(1))
            assert value > 0 and "floor" in line


@pytest.mark.parametrize("argv", [[]])
def test_gpu_script_without_cuda_says_so(argv, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(argv) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_thread_benchmark_setups_are_what_they_say():
    """benchmarks/threads.py: each setup's fresh process reports its team size and whether passive waits
    reached OpenMP (the default-waits anchor imports torch first, so they must not)."""
    from benchmarks import threads

    product = threads.measure("passive, 1 thread", steps=1)
    anchor = threads.measure(threads.ANCHOR, steps=1)
    assert product["threads"] == 1 and product["wait_policy_applied"] is True
    assert product["dtype"] in ("bfloat16", "float32")  # policy.dtype: auto's, as the model decodes
    assert anchor["threads"] == 2 and anchor["wait_policy_applied"] is False
    assert product["wall_s"] > 0 and product["cpu_s"] > 0 and anchor["wall_s"] > 0


def test_rows_per_decode_step_counts_each_steps_rows_against_the_requests_in_flight(tmp_path):
    from benchmarks.floor_model import rows_per_decode_step
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    measured = rows_per_decode_step(
        write_tiny_checkpoint(tmp_path / "ckpt"), requests=4, gap_s=0.02, new_tokens=6
    )
    assert measured["decode_steps"] > 0 and measured["in_flight"] == 4
    assert 1.0 <= measured["rows_per_step"] <= 4.0
    # a step's rows are requests in flight, so the share never passes 1; a worker that left
    # waiting requests out of running steps would show below it
    assert 0.0 < measured["share_of_in_flight"] <= 1.0


def test_each_floor_and_row_runs_on_the_team_the_product_gives_it(monkeypatch):
    """The GRPO row called optimise_step on the decode team (1 thread on the 2-core machine) while the
    product's update runs in wide_team() (2): the row read 3.85 s per sample against the demo's
    ~2 s. Checked here: the GEMM floors and the update run with the wide team, the memory read with
    the decode team (prefill and decode rows call the model the same way, inside and outside
    wide_team())."""

    from benchmarks import floor_model
    from rewardbox import threads
    from rewardbox.threads import ThreadPolicy
    from tests.fixtures.tiny_models import tiny_llama

    before = torch.get_num_threads()
    policy = ThreadPolicy(1, "PASSIVE", True, "config", {}, wide_threads=2)
    monkeypatch.setattr(threads, "_APPLIED", policy)
    torch.set_num_threads(1)
    seen = {}
    monkeypatch.setattr(
        floor,
        "gemm_gflops",
        lambda dtype, device: seen.setdefault(f"gemm {dtype}", torch.get_num_threads()) or 1.0,
    )
    monkeypatch.setattr(
        floor,
        "memory_gib_s",
        lambda device: seen.setdefault("memory", torch.get_num_threads()) or 1.0,
    )
    try:
        floor.machine_floor()
        assert seen == {"gemm torch.float32": 2, "gemm torch.bfloat16": 2, "memory": 1}
        model = tiny_llama(max_position_embeddings=512)
        teams = []
        model.model.layers[0].register_forward_pre_hook(
            lambda *_: teams.append(torch.get_num_threads())
        )
        samples = floor_model.group_samples_like_grpo(1, 2, 40, 4, model.config.vocab_size)
        per_sample, ran = floor_model.grpo_seconds_per_sample(model, samples)
        assert per_sample > 0 and ran > 0 and teams and set(teams) == {2}
        assert torch.get_num_threads() == 1  # back to the decode team
    finally:
        torch.set_num_threads(before)


def test_multi_turn_samples_extend_their_rollouts_earlier_turns():
    """The multi-turn GRPO row's step: each later turn's prompt is the turn before, its completion and a
    tool result; the trainer's plan nests them (fewer decoder tokens than the first turns' sharing alone)."""
    from benchmarks import floor_model
    from rewardbox.training.shared_prefix import plan_blocks, tokens_run

    samples = floor_model.group_samples_like_grpo(2, 3, 110, 5, 97, turns=3)
    assert len(samples) == 2 * 3 * 3
    for r in range(6):
        first, second, third = samples[3 * r : 3 * r + 3]
        for before, after in ((first, second), (second, third)):
            seen = before.prompt_ids + before.completion_ids
            assert after.prompt_ids[: len(seen)] == seen
            assert len(after.prompt_ids) == len(seen) + floor_model.TOOL_RESULT_TOKENS
    ordered = sorted(samples, key=lambda s: s.prompt_ids)
    # each group's first prompt shared (109 of its 110 tokens), every later turn a row after it
    by_group = 2 * 109 + sum(len(s.prompt_ids) + len(s.completion_ids) - 109 for s in samples)
    assert tokens_run(plan_blocks(ordered, 16)) < by_group
    single = floor_model.group_samples_like_grpo(2, 3, 110, 5, 97)
    assert len(single) == 6 and {len(s.prompt_ids) for s in single} == {110}
