"""Token budgets that fit the tasks, and how often completions hit them.

A tool call cut by ``max_new_tokens`` is dropped by the interpreter and the
episode usually ends as ``agent_error`` with reward 0: the budget, not the
policy, decides the reward. ``required_new_tokens`` measures the longest
golden call of a set of tasks exactly as the local policy must write it
(``<tool_call>{json}</tool_call><|im_end|>`` rendered by our chat template,
counted with the policy's tokenizer); ``check_token_budget`` fails when a
profile's budget is below that plus a margin. ``rewardbox.metrics.truncation``
counts completions cut by the budget in a campaign's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rewardbox.episode.config import EpisodeConfig
from rewardbox.policy.base import Policy
from rewardbox.policy.chat_template import render_prompt
from rewardbox.tasks.schema import Task

DEFAULT_MARGIN_TOKENS = 8
"""Slack over the longest golden call: a short preamble or a differently spelled value."""

_ASSISTANT_OPEN = "<|im_start|>assistant\n"


class TokenBudgetError(ValueError):
    """The profile's ``episode.max_new_tokens`` cannot hold a golden call (a configuration error)."""


@dataclass(frozen=True)
class GoldenCallLength:
    """The longest golden call of a set of tasks: its length in tokens, and where it comes from."""

    tokens: int
    uid: str
    tool: str


def golden_call_text(tool: str, arguments: dict[str, Any]) -> str:
    """One golden call as the policy writes it: the chat template's assistant turn, end token included."""
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": tool, "arguments": arguments}}
        ],
    }
    rendered = render_prompt(
        [{"role": "user", "content": "."}, message], None, add_generation_prompt=False
    )
    return rendered[rendered.rindex(_ASSISTANT_OPEN) + len(_ASSISTANT_OPEN) :].rstrip("\n")


def required_new_tokens(tasks: Iterable[Task], tokenizer: Any) -> GoldenCallLength | None:
    """The longest golden call over ``tasks``, in tokens of ``tokenizer`` (None: no task has one).

    Args:
        tasks: tasks whose ``golden_interactions()`` are the reference calls.
        tokenizer: the policy's tokenizer (called with ``add_special_tokens=False``).
    """
    longest: GoldenCallLength | None = None
    for task in tasks:
        for _server, tool, params in task.golden_interactions():
            n = len(tokenizer(golden_call_text(tool, params), add_special_tokens=False).input_ids)
            if longest is None or n > longest.tokens:
                longest = GoldenCallLength(n, task.uid, tool)
    return longest


def check_token_budget(
    max_new_tokens: int,
    tasks: Sequence[Task],
    tokenizer: Any,
    margin_tokens: int = DEFAULT_MARGIN_TOKENS,
) -> GoldenCallLength | None:
    """Raise when ``max_new_tokens`` is below the longest golden call plus ``margin_tokens``.

    Returns:
        The longest golden call (None when no task has golden calls).

    Raises:
        TokenBudgetError: the budget is too small; the message names the task,
            the tool and the budget to set.
    """
    longest = required_new_tokens(tasks, tokenizer)
    if longest is not None and max_new_tokens < longest.tokens + margin_tokens:
        raise TokenBudgetError(
            f"episode.max_new_tokens = {max_new_tokens} cannot hold the golden call of {longest.tool!r} in task "
            f"{longest.uid!r} ({longest.tokens} tokens under the chat template); set it to at least "
            f"{longest.tokens + margin_tokens} (call + {margin_tokens} tokens margin), or a correct call is cut "
            "and scored as a policy failure"
        )
    return longest


class TurnBudgetError(ValueError):
    """The profile's episode limits cannot hold a golden trajectory (a configuration error)."""


@dataclass(frozen=True)
class GoldenTurnCount:
    """The deepest golden trajectory of a set of tasks: agent completions it needs, and its task."""

    completions: int
    uid: str


def required_agent_turns(tasks: Iterable[Task]) -> GoldenTurnCount | None:
    """The most agent completions a golden trajectory of ``tasks`` needs (None: no task has golden calls).

    A golden trajectory written one call per completion, then the answer to the user, needs
    ``len(golden calls) + 1`` completions, all between the query and the user's first reply.
    """
    deepest: GoldenTurnCount | None = None
    for task in tasks:
        needed = len(task.golden_interactions()) + 1
        if needed > 1 and (deepest is None or needed > deepest.completions):
            deepest = GoldenTurnCount(needed, task.uid)
    return deepest


def check_turn_budget(
    max_agent_turns: int, max_agent_steps_per_user_turn: int, tasks: Sequence[Task]
) -> GoldenTurnCount | None:
    """Raise when the episode's agent limits are below the deepest golden trajectory of ``tasks``.

    The token budget's twin (issue #15): a limit below the golden depth ends every correct
    episode of that task as ``agent_limit`` with reward 0, so the probe and the evaluation
    measure the limit, not the policy.

    Args:
        max_agent_turns, max_agent_steps_per_user_turn: ``EpisodeConfig``'s limits.
        tasks: the campaign's tasks.

    Returns:
        The deepest golden trajectory (None when no task has golden calls).

    Raises:
        TurnBudgetError: a limit is too small; the message names the task, the limit and the value to set.
    """
    deepest = required_agent_turns(tasks)
    if deepest is None:
        return None
    for name, limit in (
        ("max_agent_turns", max_agent_turns),
        ("max_agent_steps_per_user_turn", max_agent_steps_per_user_turn),
    ):
        if limit < deepest.completions:
            raise TurnBudgetError(
                f"episode.{name} = {limit} cannot hold the golden trajectory of task {deepest.uid!r} "
                f"({deepest.completions - 1} calls and the answer: {deepest.completions} agent completions); "
                f"set it to at least {deepest.completions}, or a correct agent ends at the limit with reward 0"
            )
    return deepest


def check_policy_budget(policy: Policy, episode: EpisodeConfig, tasks: Sequence[Task]) -> None:
    """Fail before any episode when ``episode``'s budgets cannot hold a golden trajectory of ``tasks``.

    Token budget: a policy with a known tokenizer (local) must fit the longest golden call
    (:func:`check_token_budget`, with the policy's own ``max_new_tokens``, else ``episode.max_new_tokens``);
    endpoints are not checked. Turn budget: for a policy that samples from a model
    (``samples_from_a_model``: local and endpoint), ``episode``'s agent limits must fit the deepest
    golden trajectory (:func:`check_turn_budget`); scripted policies (golden replay, null) are exempt,
    screening lifts the limits for them.

    Args:
        policy: the policy about to run.
        episode: the campaign's ``EpisodeConfig``.
        tasks: the campaign's tasks.

    Raises:
        TokenBudgetError: the budget cannot hold the longest golden call (a config error).
        TurnBudgetError: the agent limits cannot hold the deepest golden trajectory (a config error).
    """
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is not None:
        check_token_budget(
            getattr(policy, "max_new_tokens", None) or episode.max_new_tokens, tasks, tokenizer
        )
    if getattr(policy, "samples_from_a_model", False):
        check_turn_budget(episode.max_agent_turns, episode.max_agent_steps_per_user_turn, tasks)
