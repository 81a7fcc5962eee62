"""The warm start's stage end to end on the test profile: real episodes (scripted policy, real SQLite
sandboxes and grading), the probe's successes replayed, a tiny config-built model fine-tuned."""

from __future__ import annotations

import dataclasses

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.run import run_trials
from rewardbox.policy import build_policy
from rewardbox.runtime import warm_start
from rewardbox.runtime.compose import campaign_parts
from rewardbox.runtime.train import LeakedTasksError
from rewardbox.tasks.sources import load_candidates


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A one-layer Llama with SmolLM2's tokenizer (its vocabulary), saved as a checkpoint folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rewardbox.policy.checkpoint import gguf_path

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    out = tmp_path_factory.mktemp("tiny_base")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    # fixed weights: the log-prob assertion below flaked in CI (-0.0014 nats on one unseeded draw)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_probe_successes_of_the_pool_are_replayed_kept_and_trained_on(tiny_base, tmp_path):
    profile = load_profile("test")
    profile = profile.model_copy(
        update={"rft": profile.rft.model_copy(update={"epochs": 3, "learning_rate": 2e-2})}
    )  # at 5e-2 the last step overshot in some runs (-0.07 nats once; the update varies run to run)
    pool = load_candidates(profile.tasks).tasks[:3]
    probe_rows, _ = run_trials(
        pool, 2, build_policy(profile.policy), campaign_parts(profile), keep_results=False
    )
    successes = probe_rows.filter(probe_rows["passed"].fill_null(False))
    assert successes.height > 0, "the scripted policy's golden share must pass some probes"
    adapter, run = warm_start.train_rft(profile, pool, tiny_base, probe_rows, tmp_path / "rft")
    # every success replayed with the same seeds reproduces it (the scripted policy is deterministic)
    assert run.probe_successes == run.replayed == run.reproduced == successes.height
    assert {(k["uid"], k["trial"]) for k in run.keys} == set(
        successes.select("uid", "trial").iter_rows()
    )
    assert run.update.samples > 0 and run.update.tokens > 0
    assert run.update.logprob_after > run.update.logprob_before
    assert (adapter / "adapter_config.json").exists()
    assert (adapter / "training_metrics.json").exists()


def test_the_warm_start_refuses_a_pool_with_a_benchmark_task(tiny_base, tmp_path):
    profile = load_profile("test")
    pool = load_candidates(profile.tasks).tasks[:2]
    leaked = [pool[0], dataclasses.replace(pool[1], split="benchmark")]
    with pytest.raises(LeakedTasksError):
        warm_start.train_rft(profile, leaked, tiny_base, None, tmp_path / "rft")
    assert not (tmp_path / "rft").exists()


def _lora_b(adapter_dir):
    from safetensors.torch import load_file

    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    return {k: v for k, v in weights.items() if "lora_B" in k}


def test_grpo_starts_from_the_warm_start_adapter(tiny_base, tmp_path):
    """With ``init_adapter`` the GRPO adapter continues the warm start's: one small GRPO step leaves it
    near the warm start's weights (a fresh adapter starts at B = 0, far from them)."""
    from rewardbox.runtime import train

    profile = load_profile("test")
    profile = profile.model_copy(
        update={"rft": profile.rft.model_copy(update={"epochs": 3, "learning_rate": 5e-2})}
    )
    pool = load_candidates(profile.tasks).tasks[:3]
    probe_rows, _ = run_trials(
        pool, 2, build_policy(profile.policy), campaign_parts(profile), keep_results=False
    )
    rft, _ = warm_start.train_rft(profile, pool, tiny_base, probe_rows, tmp_path / "rft")
    grpo, _ = train.train_local(
        profile, pool, tiny_base, tmp_path / "grpo", probe_rows=probe_rows, init_adapter=rft
    )
    start, end = _lora_b(rft), _lora_b(grpo)
    assert start.keys() == end.keys() and start
    moved = sum(float((end[k] - start[k]).norm()) for k in start)
    size = sum(float(start[k].norm()) for k in start)
    assert size > 0 and moved < 0.1 * size
    fresh, _ = train.train_local(
        profile, pool, tiny_base, tmp_path / "fresh", probe_rows=probe_rows
    )
    far = sum(float((_lora_b(fresh)[k] - start[k]).norm()) for k in start)
    assert far > 0.5 * size


def test_no_probe_success_saves_an_untrained_adapter(tiny_base, tmp_path):
    """A pool without a clean success (or an empty pool) is no error: nothing replayed, the adapter is
    saved untrained (LoRA B = 0: merged equals the base) and the run says so."""
    import polars as pl

    profile = load_profile("test")
    pool = load_candidates(profile.tasks).tasks[:2]
    failed = pl.DataFrame(
        {"uid": [pool[0].uid], "trial": [0], "passed": [False], "system_error": [None]},
        schema={"uid": pl.Utf8, "trial": pl.Int64, "passed": pl.Boolean, "system_error": pl.Utf8},
    )
    for rows in (failed, failed.clear()):
        adapter, run = warm_start.train_rft(profile, pool, tiny_base, rows, tmp_path / "rft")
        assert (run.replayed, run.reproduced, run.update.samples) == (0, 0, 0)
        assert all(float(b.abs().max()) == 0.0 for b in _lora_b(adapter).values())
