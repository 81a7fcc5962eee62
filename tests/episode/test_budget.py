"""Token budgets sized from the golden calls; truncation counted per campaign."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.episode.budget import (
    TokenBudgetError,
    check_token_budget,
    golden_call_text,
    required_new_tokens,
)
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.tasks.schema import Task


class _CharTokenizer:
    """One token per character (so expected lengths are easy to count by hand)."""

    def __call__(self, text, add_special_tokens=False):
        return type("Encoded", (), {"input_ids": list(range(len(text)))})()


def _task(uid: str, calls: list[tuple[str, dict]]) -> Task:
    world = {
        "srv": {
            "golden_test_case": {
                "tool_interactions": [{"tool": t, "parameters": p} for t, p in calls]
            }
        }
    }
    return Task(
        uid=uid,
        dataset="d",
        scenario="s",
        agent="a",
        query=uid,
        user_context="",
        init={},
        world_state=world,
        tools=(),
        system_instructions="",
        bot_instructions="",
        test_code="",
        test_name="t",
        test_file="f.py",
    )


def test_golden_call_text_is_the_templates_assistant_turn():
    text = golden_call_text("cancel_order", {"order_id": "#W1", "reason": "no"})
    assert (
        text
        == '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "#W1", "reason": "no"}}</tool_call><|im_end|>'
    )


def test_required_tokens_is_the_longest_call_and_the_check_names_it():
    tasks = [
        _task("short", [("get", {"id": 1})]),
        _task("long", [("get", {"id": 1}), ("update", {"id": 1, "x": "abc"})]),
    ]
    longest = required_new_tokens(tasks, _CharTokenizer())
    expected = len(golden_call_text("update", {"id": 1, "x": "abc"}))
    assert (longest.tokens, longest.uid, longest.tool) == (expected, "long", "update")
    assert check_token_budget(expected + 8, tasks, _CharTokenizer()) == longest
    with pytest.raises(
        TokenBudgetError, match=rf"'update' in task 'long'.*at least {expected + 8}"
    ):
        check_token_budget(expected + 7, tasks, _CharTokenizer())
    assert required_new_tokens([_task("none", [])], _CharTokenizer()) is None


def test_truncation_summary_counts_cut_completions():
    rows = pl.DataFrame({"turns": [2, 3, 1, 4], "truncated_turns": [1, 0, 1, None]})
    assert truncation_summary(rows) == {
        "truncated_completions": 2,
        "completions": 6,
        "truncated_completion_frac": round(2 / 6, 4),
        "truncated_trials": 2,
    }
    assert truncation_summary(pl.DataFrame({"turns": [1]}))["completions"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "full", "learn"])
def test_local_profiles_budget_holds_every_golden_call(name):
    """The shipped local-model profiles fit their tasks' golden calls (tokenizer read from the GGUF)."""
    from transformers import AutoTokenizer

    from rewardbox.config.profile import load_profile
    from rewardbox.policy.checkpoint import gguf_path
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    profile = load_profile(name)
    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    longest = check_token_budget(profile.episode.max_new_tokens, tasks, tokenizer)
    assert longest is not None and longest.tokens > 40  # 40, the old demo budget, cut real calls


def test_turn_budget_names_the_deepest_golden_trajectory_and_the_value_to_set():
    """The token budget's twin: agent limits below the golden depth score the limit, not the policy."""
    from rewardbox.episode.budget import TurnBudgetError, check_turn_budget, required_agent_turns

    tasks = [
        _task("two", [("get", {}), ("set", {})]),
        _task("five", [("get", {})] * 4 + [("set", {})]),
    ]
    deepest = required_agent_turns(tasks)
    assert (deepest.completions, deepest.uid) == (6, "five")  # five calls, then the answer
    assert check_turn_budget(6, 6, tasks) == deepest
    with pytest.raises(TurnBudgetError, match=r"max_agent_turns = 4 .*'five'.*at least 6"):
        check_turn_budget(4, 8, tasks)
    with pytest.raises(TurnBudgetError, match=r"max_agent_steps_per_user_turn = 5 .*at least 6"):
        check_turn_budget(100, 5, tasks)
    assert (
        required_agent_turns([_task("none", [])]) is None
        and check_turn_budget(1, 1, [_task("none", [])]) is None
    )


def test_model_policies_are_held_to_the_turn_budget_and_scripted_ones_are_not():
    from rewardbox.config.profile import load_profile
    from rewardbox.episode.budget import TurnBudgetError
    from rewardbox.policy.scripted import GoldenReplayPolicy
    from rewardbox.runtime.compose import check_policy_budget

    profile = load_profile("test")
    profile.episode.max_agent_turns = 2
    deep = [_task("deep", [("get", {}), ("get", {}), ("set", {})])]

    class ModelPolicy:
        samples_from_a_model = True

    with pytest.raises(TurnBudgetError, match="'deep'"):
        check_policy_budget(ModelPolicy(), profile, deep)
    check_policy_budget(
        GoldenReplayPolicy(), profile, deep
    )  # screening replays goldens with lifted limits


@pytest.mark.parametrize("name", ["demo", "full", "test", "learn"])
def test_shipped_profiles_agent_limits_hold_every_golden_trajectory(name):
    """Every shipped profile lets a one-call-per-turn agent finish each of its tasks' golden trajectories."""
    from rewardbox.config.profile import load_profile
    from rewardbox.episode.budget import check_turn_budget
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    profile = load_profile(name)
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    assert (
        check_turn_budget(
            profile.episode.max_agent_turns, profile.episode.max_agent_steps_per_user_turn, tasks
        )
        is not None
    )
