"""Training-pool hydration: our tasks as the dataset rows verl's agent loop reads.

verl's ``RLHFDataset`` (0.9.x) reads Parquet rows and hands every column of a row to
the agent loop's ``run(**kwargs)``. The keys it uses:

================  ==========================================================================
column            content
================  ==========================================================================
``data_source``   ``"rewardbox/<domain>"`` (verl groups validation metrics by it)
``prompt``        the opening conversation, ``[{role, content}]``: the agent's system prompt,
                  the scenario's instructions (if any) and the task's query, as the runner opens
                  it (verl exposes it as ``raw_prompt``; its length filter reads it)
``agent_name``    :data:`AGENT_NAME`, the registered ``RewardboxAgentLoop``
``ability``       ``"tool_use"``
``reward_model``  ``{"style": "rewardbox", "ground_truth": ""}``: the reward is the task's own
                  test on the terminal state, computed by the agent loop, never by verl
``extra_info``    ``{"index", "uid", "split", "task_json"}``; ``task_json`` is the whole
                  :class:`Task` (``Task.to_dict``) as JSON, so a worker rebuilds the exact task
                  with :func:`task_from_extra_info` without access to our task files
================  ==========================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rewardbox import strict_json
from rewardbox.tasks.schema import Task

AGENT_NAME = "rewardbox_agent"
DATA_SOURCE_PREFIX = "rewardbox/"


def opening_messages(task: Task) -> list[dict[str, str]]:
    """The conversation as the episode runner opens it: system prompt, scenario instructions, query."""
    messages = [{"role": "system", "content": task.system_instructions}]
    if task.bot_instructions:
        messages.append({"role": "system", "content": task.bot_instructions})
    messages.append({"role": "user", "content": task.query})
    return messages


def pool_to_verl_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """One verl dataset row per task of the training pool, in pool order.

    Args:
        tasks: the training pool (the ``training_pool`` asset: tasks of split ``candidate``).

    Returns:
        Rows with the columns in the module docstring; ``extra_info.index`` is the position.

    Raises:
        ValueError: two tasks share a uid (verl would train on one of them twice), or a task's
            content is not JSON (bad input; nothing is written).
    """
    seen: set[str] = set()
    rows = []
    for index, task in enumerate(tasks):
        if task.uid in seen:
            raise ValueError(
                f"training pool: task {task.uid!r} appears twice; verl rows need one row per task"
            )
        seen.add(task.uid)
        try:
            task_json = strict_json.dumps(task.to_dict())
        except ValueError as exc:
            raise ValueError(
                f"training pool: task {task.uid!r} does not serialise to JSON: {exc}"
            ) from exc
        rows.append(
            {
                "data_source": DATA_SOURCE_PREFIX + task.domain,
                "prompt": opening_messages(task),
                "agent_name": AGENT_NAME,
                "ability": "tool_use",
                "reward_model": {"style": "rewardbox", "ground_truth": ""},
                "extra_info": {
                    "index": index,
                    "uid": task.uid,
                    "split": task.split,
                    "task_json": task_json,
                },
            }
        )
    return rows


def write_verl_dataset(tasks: Sequence[Task], path: str | Path) -> Path:
    """Write :func:`pool_to_verl_rows` of ``tasks`` as Parquet at ``path`` (``data.train_files``).

    Raises:
        ValueError: as :func:`pool_to_verl_rows`, or an empty pool (verl cannot train on no rows).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not tasks:
        raise ValueError("training pool is empty: no verl dataset rows to write")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(pool_to_verl_rows(tasks)), out)
    return out


def task_from_extra_info(extra_info: Mapping[str, Any] | str) -> Task:
    """The task of one verl row (its ``extra_info`` as verl passes it, or that JSON).

    Raises:
        ValueError: no ``task_json`` (the row was not written by :func:`pool_to_verl_rows`), or it is
            not a task.
    """
    info = json.loads(extra_info) if isinstance(extra_info, str) else dict(extra_info)
    if not info.get("task_json"):
        raise ValueError(
            "verl row: extra_info has no task_json; write the dataset with pool_to_verl_rows"
        )
    try:
        return Task.from_dict(strict_json.loads(info["task_json"]))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"verl row {info.get('uid')!r}: task_json is not a rewardbox task: {exc}"
        ) from exc
