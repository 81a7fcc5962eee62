"""The verl agent loop inside verl's own environment, against verl's real interfaces and a fake token server.

Runs ``tests/fixtures/verl_agent_loop_check.py`` and ``verl_trials_check.py`` with verl's Python
(``REWARDBOX_VERL_PYTHON``, else ``.venv-verl``; ``make verl-env`` creates it) and the embedded model's
real tokenizer; the trial rule itself is tested here in our environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rewardbox.training.verl.agent_loop import rollout_trial

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "fixtures" / "verl_agent_loop_check.py"
TRIALS = ROOT / "tests" / "fixtures" / "verl_trials_check.py"
ENV = {
    "PYTHONPATH": str(ROOT),
    "PATH": "/usr/bin:/bin",
    "HOME": str(Path.home()),
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


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
def test_verl_runs_a_golden_episode_to_reward_1_and_drops_a_sandbox_crash(
    smollm2_tokenizer_dir, tmp_path
):
    facts = _run_in_verl(CHECK, smollm2_tokenizer_dir, tmp_path, timeout=540)
    # built by verl's registry + hydra from the file build_agent_loop_config wrote; rows through RLHFDataset
    assert facts["loop_class"] == "RewardboxAgentLoop" and facts["rows"] == 1
    assert (
        facts["reward"] == 1.0 and facts["extra_fields"]["rewardbox_termination_reason"] == "done"
    )
    # mask 1 exactly on the two sampled turns, with the server's log-probs; 0 on the tool result
    assert facts["policy_text"] == facts["golden_text"]
    assert (
        facts["masked_text"].startswith("\n<|im_start|>user\n<result>\n")
        and "cancelled" in facts["masked_text"]
    )
    assert facts["policy_logprobs"] == [-0.5] and facts["other_logprobs"] == [0.0]
    assert (
        len(set(facts["lengths"])) == 1 and facts["sticky"] == 1
    )  # one request id: one server's prefix cache
    assert facts["prompt_tail"].endswith("Please cancel ORD-1.<|im_end|>\n<|im_start|>assistant\n")
    # verl's own post-processing: padded to response_length, reward on the last response token
    batch = facts["batch"]
    assert batch["mask_sum"] == facts["policy_tokens"] and batch["response_width"] == 1024
    assert batch["rm_score_at_last_token"] == batch["rm_score_total"] == 1.0 and batch[
        "passed_column"
    ] == [1.0]
    # a sandbox crash on every try is raised (verl drops the rollout), never a reward
    crash = facts["crash"]
    assert isinstance(crash, dict) and crash["kind"] == "sandbox_crash" and crash["tries"] == 2
    assert crash["sandboxes_closed"] == [True, True]
    assert batch["truncated_column"] == [0.0]  # the golden rollout: no turn cut
    # issue 24 item 1: max_model_len = P + 7, 6, 5 and response_length 8; the engine stops at its context
    for cut, seen in facts["context_cuts"].items():
        assert seen["max_tokens"] == [int(cut)] and seen["policy_tokens"] == int(
            cut
        )  # capped to the room, once
        assert seen["truncated_turns"] == 1 and seen["reward_extra_info"]["truncated"] == 1.0
        assert seen["truncated_column"] == [
            1.0
        ]  # in verl's batch, where its validation metrics read it
        assert (
            seen["termination"] != "done" and seen["reward_extra_info"]["passed"] == 0.0
        )  # the cut call never ran


def test_trial_is_the_rollouts_place_in_its_group_on_both_of_verls_paths():
    assert [rollout_trial({"session_id": j, "priority": 99}, 4) for j in range(4)] == [
        0,
        1,
        2,
        3,
    ]  # V1 wins
    # legacy: priority = p * n + j over the interleaved batch (n = 4 here, 3 prompts)
    assert [rollout_trial({"priority": p * 4 + j}, 4) for p in range(3) for j in range(4)] == [
        0,
        1,
        2,
        3,
    ] * 3
    # a validation batch of val_kwargs.n = 2 < n: still distinct within each group of 2
    assert [rollout_trial({"priority": p * 2 + j}, 4) for p in range(3) for j in range(2)] == [
        0,
        1,
        2,
        3,
        0,
        1,
    ]
    with pytest.raises(ValueError):
        rollout_trial({"session_id": 0}, 0)


def test_trial_without_session_id_or_priority_counts_per_group():
    a = [rollout_trial({"uid": "group-a"}, 4) for _ in range(3)]
    b = rollout_trial({"uid": "group-b", "extra_info": {"uid": "task"}}, 4)
    from_task = [rollout_trial({"extra_info": {"uid": "task-only"}}, 4) for _ in range(2)]
    assert a == [0, 1, 2] and b == 0 and from_task == [0, 1]


@pytest.mark.skipif(_verl_python() is None, reason="verl's environment is absent (make verl-env)")
@pytest.mark.timeout(300)
def test_verl_gives_every_rollout_of_a_group_its_own_trial_on_v1_and_legacy(
    smollm2_tokenizer_dir, tmp_path
):
    facts = _run_in_verl(TRIALS, smollm2_tokenizer_dir, tmp_path, timeout=240)
    n = facts["n"]
    for path in ("v1", "legacy"):
        groups: dict[str, list[int]] = {}
        for row in facts[path]:
            groups.setdefault(row["uid"], []).append(row["trial"])
        assert len(groups) == 3, path  # 3 prompts (verl's uid each), n rollouts each
        assert all(sorted(trials) == list(range(n)) for trials in groups.values()), (path, groups)
    # V1's stored keys are {uid}_{session_id}_{index}: the trial is the session
    assert all(row["key"] == f"{row['uid']}_{row['trial']}_0" for row in facts["v1"])
    # legacy: the manager split 6 rows over 2 workers, so one group ran on both, and still got trials 0 and 1
    workers: dict[str, set[int]] = {}
    for row in facts["legacy"]:
        workers.setdefault(row["uid"], set()).add(row["worker"])
    assert sorted(len(w) for w in workers.values()) == [1, 1, 2]


def _run_in_verl(script, *args, timeout: float) -> dict:
    """Run a fixture script with verl's Python; the JSON object its last line prints."""
    proc = subprocess.run(
        [_verl_python(), str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
