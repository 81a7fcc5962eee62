"""The verl agent loop inside verl's own environment, against verl's real interfaces and a fake token server.

Runs ``tests/fixtures/verl_agent_loop_check.py`` with verl's Python (``REWARDBOX_VERL_PYTHON``, else
``.venv-verl``; ``make verl-env`` creates it) and the embedded model's real tokenizer.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "fixtures" / "verl_agent_loop_check.py"


def _verl_python() -> str | None:
    found = os.environ.get("REWARDBOX_VERL_PYTHON") or str(ROOT / ".venv-verl" / "bin" / "python")
    return found if Path(found).exists() else None


@pytest.fixture(scope="module")
def smollm2_tokenizer_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M's tokenizer, read from the embedded GGUF and saved as a Hugging Face tokenizer folder."""
    from transformers import AutoTokenizer

    from rewardbox.policy.checkpoint import gguf_path

    source = gguf_path()
    out = tmp_path_factory.mktemp("smollm2_tokenizer")
    AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(out)
    return out


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(600)
def test_verl_runs_a_golden_episode_to_reward_1_and_drops_a_sandbox_crash(smollm2_tokenizer_dir, tmp_path):
    proc = subprocess.run([_verl_python(), str(CHECK), str(smollm2_tokenizer_dir), str(tmp_path)],
                          capture_output=True, text=True, timeout=540, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    # built by verl's registry + hydra from the file build_agent_loop_config wrote; rows through RLHFDataset
    assert facts["loop_class"] == "RewardboxAgentLoop" and facts["rows"] == 1
    assert facts["reward"] == 1.0 and facts["extra_fields"]["rewardbox_termination_reason"] == "done"
    # mask 1 exactly on the two sampled turns, with the server's log-probs; 0 on the tool result
    assert facts["policy_text"] == facts["golden_text"]
    assert facts["masked_text"].startswith("\n<|im_start|>user\n<result>\n") and "cancelled" in facts["masked_text"]
    assert facts["policy_logprobs"] == [-0.5] and facts["other_logprobs"] == [0.0]
    assert len(set(facts["lengths"])) == 1 and facts["sticky"] == 1  # one request id: one server's prefix cache
    assert facts["prompt_tail"].endswith("Please cancel ORD-1.<|im_end|>\n<|im_start|>assistant\n")
    # verl's own post-processing: padded to response_length, reward on the last response token
    batch = facts["batch"]
    assert batch["mask_sum"] == facts["policy_tokens"] and batch["response_width"] == 1024
    assert batch["rm_score_at_last_token"] == batch["rm_score_total"] == 1.0 and batch["passed_column"] == [1.0]
    # a sandbox crash on every try is raised (verl drops the rollout), never a reward
    crash = facts["crash"]
    assert isinstance(crash, dict) and crash["kind"] == "sandbox_crash" and crash["tries"] == 2
    assert crash["sandboxes_closed"] == [True, True]
