"""dtype auto: bf16 only where the CPU multiplies bf16 in hardware (rewardbox.policy.precision)."""

from __future__ import annotations

import pytest
import torch

from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.precision import cpu_flags, has_bf16_units, resolve_dtype


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx2", "fma"}, torch.float32),  # this project's 2-core AMD EPYC
        ({"avx512f", "avx512_bf16"}, torch.bfloat16),  # Zen 4 / Cooper Lake
        ({"avx512f", "amx_bf16", "amx_tile"}, torch.bfloat16),  # Sapphire Rapids
        (set(), torch.float32),  # unreadable /proc/cpuinfo
    ],
)
def test_auto_follows_the_cpu_flags(flags, expected):
    assert has_bf16_units("cpu", flags) is (expected == torch.bfloat16)
    assert resolve_dtype("auto", "cpu", flags) == expected


def test_explicit_dtypes_are_kept_and_bad_ones_refused():
    assert resolve_dtype("bfloat16") == torch.bfloat16 == resolve_dtype(torch.bfloat16)
    assert resolve_dtype("torch.float32", "cpu", {"amx_bf16"}) == torch.float32
    with pytest.raises(ValueError, match="floating dtype"):
        resolve_dtype("int8")
    with pytest.raises(ValueError, match="floating dtype"):
        resolve_dtype("float33")


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_policy_config_defaults_are_auto_and_counts_are_checked():
    config = PolicyConfig(kind="local")
    assert (config.dtype, config.num_threads) == ("auto", "auto")
    assert PolicyConfig(kind="local", num_threads=1).num_threads == 1
    with pytest.raises(ValueError):
        PolicyConfig(kind="local", num_threads=0)
    with pytest.raises(ValueError):
        PolicyConfig(kind="local", num_threads="many")


def test_bf16_grpo_takes_the_trainers_old_logprobs():
    """On bf16 weights the trainer's own log-probs are the PPO old ones (``grpo.old_logprobs: auto``);
    on fp32 ones the sampler's."""
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import old_logprobs_source

    assert GRPOConfig().old_logprobs == "auto" and GRPOConfig().sampler_is_cap == 2.0
    weights = torch.nn.Linear(2, 2).requires_grad_(False)
    assert old_logprobs_source(GRPOConfig(), weights) == "sampler"
    assert old_logprobs_source(GRPOConfig(), weights.to(torch.bfloat16)) == "trainer"
