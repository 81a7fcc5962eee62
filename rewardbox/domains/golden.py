"""Golden state by replay, and the ``__reserved__geteffects`` payload.

The golden state is the terminal state you get by replaying the task's golden
tool interactions on a FRESH database initialised the same way (same seed, same
data patch), through the same ``ToolRunner`` the agent's calls use
(docs/thinkingbox.md, "Server effects and golden state", ``apply_golden_set_to_database``). Unlike upstream,
an interaction that fails is not skipped: the golden state is then unbuildable,
reported as ``golden_error``, and the task must be treated as invalid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardbox import strict_json
from rewardbox.domains.base import DataPatchError, ToolRunner
from rewardbox.domains.database import EpisodeDatabase, task_image
from rewardbox.grading.canonical import State, diff_states, primary_keys, state_hash


def golden_interactions(golden_test_case: Any) -> list[dict[str, Any]]:
    """The ``tool_interactions`` list of a ``golden_test_case`` (checked shape).

    Raises:
        DataPatchError: the block is not ``{tool_interactions: [{tool, parameters}]}``.
    """
    if not golden_test_case:
        return []
    if not isinstance(golden_test_case, Mapping):
        raise DataPatchError("golden_test_case must be a mapping with 'tool_interactions'")
    items = golden_test_case.get("tool_interactions") or []
    if not isinstance(items, list):
        raise DataPatchError("golden_test_case.tool_interactions must be a list")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("tool"), str):
            raise DataPatchError(f"golden_test_case.tool_interactions[{i}]: needs a 'tool' name")
        if not isinstance(item.get("parameters") or {}, Mapping):
            raise DataPatchError(
                f"golden_test_case.tool_interactions[{i}].parameters must be a mapping"
            )
    return [dict(item) for item in items]


def build_golden_state(
    runner: ToolRunner, data_patch: Mapping[str, Any] | None, interactions: list[dict[str, Any]]
) -> tuple[State | None, str | None]:
    """Replay the golden interactions on a fresh database (same seed, same patch).

    The replay is deterministic (same tools, same starting database), so its
    result is kept on the task's prepared image and reused by later episodes
    of the task; the returned state is shared read-only.

    Returns:
        ``(golden_state, None)``, or ``(None, message)`` when an interaction
        fails: the golden state cannot be built and the task is invalid.

    Raises:
        DataPatchError: the data patch is invalid.
    """
    image = task_image(runner.domain, data_patch)
    key = strict_json.dumps(interactions, sort_keys=True, default=str)
    cached = image.golden.get(key)
    if cached is None:
        db = EpisodeDatabase(runner.domain, data_patch)
        try:
            cached = image.golden[key] = _replay(runner, db, interactions)
        finally:
            db.dispose()
    return cached


def _replay(
    runner: ToolRunner, db: EpisodeDatabase, interactions: list[dict[str, Any]]
) -> tuple[State | None, str | None]:
    for i, item in enumerate(interactions):
        payload, failed = runner.invoke(db.engine, item["tool"], item.get("parameters") or {})
        if failed:
            return None, f"golden interaction {i} ({item['tool']}) failed: {payload['error']}"
    return db.dump(), None


def compute_effects(
    runner: ToolRunner,
    initial_state: State,
    result_state: State,
    golden: tuple[State | None, str | None],
) -> dict[str, Any]:
    """The ``__reserved__geteffects`` payload.

    Args:
        runner: the domain's tool runner (for the primary keys of the diff).
        initial_state: the state right after init (seed + data patch).
        result_state: the terminal state now.
        golden: ``build_golden_state`` output.

    Returns:
        ``{initial_db_state, result_db_state, result_db_hash, golden_db_state,
        golden_db_hash, diff}``; when the golden state cannot be built,
        ``golden_db_state``/``golden_db_hash`` are None, ``diff`` is empty and
        ``golden_error`` says why (the task is invalid, never graded).
    """
    golden_state, error = golden
    effects: dict[str, Any] = {
        "initial_db_state": initial_state,
        "result_db_state": result_state,
        "result_db_hash": state_hash(result_state),
        "golden_db_state": golden_state,
        "golden_db_hash": None if golden_state is None else state_hash(golden_state),
        "diff": [],
    }
    if error is not None or golden_state is None:
        effects["golden_error"] = error or "golden state missing"
    else:
        keys = primary_keys(runner.domain.metadata)
        effects["diff"] = diff_states(result_state, golden_state, keys=keys)
    return effects
