"""docs/environment_server.md's ``GRPOTrainer(environment_factory=...)`` example, run as written on CPU.

The doc's Python block is executed with only its server URL, its checkpoint directory and its output
directory pointed at this test's server and temporary paths; the model is the embedded SmolLM2-135M
(converted by the project), the tool calls are parsed with the project's response template
(``trl_tokenizer``), the rewards are the grader's. Every step where some group had mixed rewards must have
a non-zero gradient, and at least one step must have had such a group.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "openenv.core", reason="the environment server needs the 'env' extra (openenv-core)"
)
trl = pytest.importorskip("trl", reason="the TRL example needs the 'bench' extra (trl==1.16.0)")

DOC = Path(__file__).resolve().parents[2] / "docs" / "environment_server.md"


def trl_block() -> str:
    return next(
        b
        for b in re.findall(
            r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL
        )
        if "GRPOTrainer(" in b
    )


def test_the_doc_names_the_trl_version_it_was_run_with():
    assert f"TRL {trl.__version__}" in DOC.read_text(encoding="utf-8")


def test_trl_tokenizer_reads_our_template_s_tool_calls(smollm2_checkpoint):
    from trl.chat_template_utils import parse_response

    from rewardbox.envserver.trl import trl_tokenizer

    tokenizer = trl_tokenizer(str(smollm2_checkpoint))
    prefix = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Cancel order 6021."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prefix.endswith("<|im_start|>assistant\n")

    def parse(
        text: str,
    ) -> dict:  # as TRL parses a generated turn: token ids after the prompt's ids
        return parse_response(
            tokenizer, tokenizer(text)["input_ids"], prefix=tokenizer(prefix)["input_ids"]
        )

    parsed = parse(
        'Let me look.\n<tool_call>{"name": "find_customer", "arguments": {"email": "a@b.test"}}</tool_call>'
        "<|im_end|>"
    )
    assert parsed["content"].strip() == "Let me look."
    assert parsed["tool_calls"] == [
        {
            "type": "function",
            "function": {"name": "find_customer", "arguments": {"email": "a@b.test"}},
        }
    ]
    assert parse("Your order is cancelled.<|im_end|>")["content"] == "Your order is cancelled."
    assert "tool_calls" not in parse("Your order is cancelled.<|im_end|>")


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("REWARDBOX_TRL_EXAMPLE"),
    reason="opt-in (REWARDBOX_TRL_EXAMPLE=1): one GRPO step takes 5-9 min on a loaded 2-core CPU "
    "(docs/environment_server.md gives the measured times)",
)
@pytest.mark.timeout(1800)
def test_the_documented_grpo_example_trains_one_step_on_cpu(served, smollm2_checkpoint, tmp_path):
    """One real GRPO step: episodes played on the server, graded, a loss and a gradient norm logged.

    GRPO's advantage is the reward minus its group's mean, so a group whose rewards are all equal gives loss 0
    and gradient 0 exactly, and a group with mixed rewards a non-zero gradient; both are checked as they occur.
    """
    block = trl_block()
    for doc_value in ('"http://127.0.0.1:8000"', '"checkpoints/base"', '"checkpoints/trl_grpo"'):
        assert doc_value in block, doc_value
    code = (
        block.replace('"http://127.0.0.1:8000"', repr(served.url))
        .replace('"checkpoints/base"', repr(str(smollm2_checkpoint)))
        .replace('"checkpoints/trl_grpo"', repr(str(tmp_path / "trl_grpo")))
    )
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the doc's own example
    steps = [entry for entry in namespace["trainer"].state.log_history if "grad_norm" in entry]
    print(
        [
            {
                k: e.get(k)
                for k in (
                    "step",
                    "reward",
                    "reward_std",
                    "frac_reward_zero_std",
                    "loss",
                    "grad_norm",
                    "tools/call_frequency",
                    "step_time",
                )
            }
            for e in steps
        ]
    )
    assert [e["step"] for e in steps] == [1], namespace["trainer"].state.log_history
    for e in steps:
        assert (
            0.0 <= e["reward"] <= 1.0 and math.isfinite(e["loss"]) and math.isfinite(e["grad_norm"])
        ), e
        if e["frac_reward_zero_std"] < 1:
            assert e["grad_norm"] > 0, e
        else:
            assert e["loss"] == 0 and e["grad_norm"] == 0, e
    envs = [env for env in _instances(namespace["trainer"]) if env.observation is not None]
    assert envs and all(
        env.reward is not None and env.observation.status == "finished" for env in envs
    )


def _instances(trainer) -> list:
    """The environment instances TRL made (one per generation)."""
    return list(getattr(trainer, "environments", None) or [])
