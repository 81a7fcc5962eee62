"""The task record shared by every stage.

A task is one hydrated ThinkingBox test case (docs/thinkingbox.md, "Dataset layout"): the
first user message, the simulated user's private context, the merged
``world_state`` sent to the tool servers, the tools the agent may see, the
policy text, and the test code that grades the terminal state.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rewardbox import strict_json


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; the input of every content hash."""
    return strict_json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


GRADING_ONLY_KEYS = frozenset(
    {
        "golden_test_case",
        "rubrics_yesno",
        "rubrics",
        "rubric",
        "expected_response",
        "judge_questions",
    }
)
"""Keys of a server's ``init`` block that only the grader reads; not part of a task's identity.
``golden_test_case`` enters identity through its golden actions instead."""


def starting_data(init: dict[str, Any]) -> dict[str, Any]:
    """A test's ``init`` without grading-only keys: ``{server: {key: value}}``.

    A key counts as grading-only when it is in :data:`GRADING_ONLY_KEYS` or
    starts with ``rubric``; a server left with nothing (or None values only) is dropped.
    """
    out: dict[str, Any] = {}
    for server, block in (init or {}).items():
        if not isinstance(block, dict):
            out[server] = block
            continue
        kept = {
            k: v
            for k, v in block.items()
            if k not in GRADING_ONLY_KEYS and not str(k).startswith("rubric") and v is not None
        }
        if kept:
            out[server] = kept
    return out


@dataclass(frozen=True)
class ToolOverride:
    """A scenario tool entry (docs/thinkingbox.md, "Dataset layout"): which tool, and how the agent sees it."""

    name: str
    override_description: str | None = None
    override_arg_description: dict[str, str] | None = None
    direct_response: str | None = None
    is_end_turn: bool = False


@dataclass(frozen=True)
class Task:
    """One task. Plain data: picklable, JSON-serialisable via ``to_dict``.

    Attributes:
        uid: ``"<file basename>:<test function name>"`` (docs/thinkingbox.md, "Test files").
        dataset: the dataset (domain) name, e.g. ``"retail"``.
        scenario: scenario name; agent: agent config name.
        query: the first user message, verbatim.
        user_context: persona and facts for the user simulator ('' if none).
        init: the test's own ``init`` block, before merging (used for the content hash).
        world_state: scenario ``world_state`` merged with ``init`` (docs/thinkingbox.md, "Merging init"):
            ``{server_name: server_config}``; key order is tool priority.
        tools: the scenario's tool entries; their names are the available tools.
        system_instructions: the agent file's system prompt.
        bot_instructions: scenario + test instructions joined with newlines (docs/thinkingbox.md, "Episode loop").
        builtin_tools: agent builtin tools as JSON-schema dicts (``is_end_turn`` tools).
        test_code: the test file with other tests blanked, plus ``__tb_test_fn = name``.
        test_name, test_file: where the test lives.
        tags: tags from defaults and the test.
        max_user_turns, max_agent_turns: episode limits (defaults: docs/thinkingbox.md, "Test files").
        split: ``"candidate"`` or ``"benchmark"`` once assigned.
        fixtures: test fixtures by name, ``{name: {type: "pkg.mod.attr", **kwargs}}``
            (conftest.yaml files, then the scenario's ``fixtures``), injected into
            the test function by parameter name (docs/thinkingbox.md, "Test code").
    """

    uid: str
    dataset: str
    scenario: str
    agent: str
    query: str
    user_context: str
    init: dict[str, Any]
    world_state: dict[str, Any]
    tools: tuple[ToolOverride, ...]
    system_instructions: str
    bot_instructions: str
    test_code: str
    test_name: str
    test_file: str
    builtin_tools: tuple[dict[str, Any], ...] = ()
    tags: tuple[str, ...] = ()
    max_user_turns: int = 10
    max_agent_turns: int = sys.maxsize
    split: str = "candidate"
    metadata: dict[str, Any] = field(default_factory=dict)
    fixtures: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def available_tools(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def domain(self) -> str:
        """``metadata["domain"]`` (set from a profile's ``tasks.domains``), else the scenario, else the dataset."""
        return str(self.metadata.get("domain") or self.scenario or self.dataset)

    def golden_interactions(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Reference actions as ``(server, tool, parameters)``, in world_state order."""
        out: list[tuple[str, str, dict[str, Any]]] = []
        for server, cfg in self.world_state.items():
            golden = (cfg or {}).get("golden_test_case") or {}
            for item in golden.get("tool_interactions") or []:
                out.append((server, item["tool"], dict(item.get("parameters") or {})))
        return out

    def content_hash(self) -> str:
        """SHA-256 of the task's identity (the exclusion key; docs/thinkingbox.md, "Task identity").

        Identity is what the agent faces and must do: the query and the user context
        (whitespace runs collapsed to one space, ends stripped: a reflowed or
        double-spaced twin is the same task), the starting data (the test's ``init`` without its
        grading-only keys, :data:`GRADING_ONLY_KEYS`) and the golden actions
        (``(server, tool, parameters)`` in order). Two tasks that differ only in
        how they are graded (e.g. one adds ``rubrics_yesno``) are the same task.
        """
        payload = canonical_json(
            {
                "query": " ".join(self.query.split()),
                "user_context": " ".join(self.user_context.split()),
                "starting_data": starting_data(self.init),
                "golden_actions": [list(item) for item in self.golden_interactions()],
            }
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        data = dict(data)
        data["tools"] = tuple(ToolOverride(**t) for t in data.get("tools", ()))
        data["builtin_tools"] = tuple(data.get("builtin_tools", ()))
        data["tags"] = tuple(data.get("tags", ()))
        return cls(**data)


def task_set_version(tasks: Iterable[Task]) -> str:
    """The version of a task set: SHA-256 of its sorted ``uid:content hash`` pairs, 12 hex characters.

    Order-free and the one identity of a task set wherever one is needed: the run tag
    ``rewardbox/task_set_version`` and the checkpoint sensor's run key, the assets' data versions and
    ``input_hash`` metadata, and the campaign journals' identities (docs/audit.md). Two sets with the
    same tasks (by :meth:`Task.content_hash`) under the same uids have the same version.
    """
    digest = hashlib.sha256("".join(sorted(f"{t.uid}:{t.content_hash()}" for t in tasks)).encode())
    return digest.hexdigest()[:12]
