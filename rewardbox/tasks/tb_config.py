"""ThinkingBox config files and the rules that combine them
(docs/thinkingbox.md, "Dataset layout", "Test files", "Merging init").

Pydantic models for ``agent/*.yaml``, ``scenario/*.yaml``, ``conftest.yaml`` and
a test's merged YAML config; the ``init`` -> ``world_state`` merge (docs/thinkingbox.md, "Merging init"); the
bot-instructions join (docs/thinkingbox.md, "Episode loop"). Validation errors become TaskFormatErrors that
name the file, the line and the field.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.load_errors import yaml_error

DEFAULT_MAX_USER_SIM_TURNS = 10
DEFAULT_MAX_AGENT_SIM_TURNS = sys.maxsize


class BuiltinTool(BaseModel):
    """An agent builtin tool; ``parameters`` is accepted as ``input_schema``."""

    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    is_end_turn: bool = False


class AgentConfig(BaseModel):
    """``agent/<name>.yaml``; other keys (``parallel_tool_calls``...) are ignored."""

    model_config = ConfigDict(extra="ignore")
    system_instructions: str
    builtin_tools: list[BuiltinTool] = []


class ToolEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    override_description: str | None = None
    override_arg_description: dict[str, str] | None = None
    direct_response: str | None = None
    is_end_turn: bool = False


class ScenarioConfig(BaseModel):
    """``scenario/<name>.yaml``."""

    model_config = ConfigDict(extra="ignore")
    world_state: dict[str, Any]
    tools: list[ToolEntry]
    bot_instructions: str | None = None
    tags: list[str] | dict[str, Any] | None = None
    fixtures: dict[str, dict[str, Any]] = {}
    metadata: dict[str, Any] = {}


class TestConfig(BaseModel):
    """A test's merged YAML config (defaults: docs/thinkingbox.md, "Test files")."""

    __test__ = False
    model_config = ConfigDict(extra="forbid")
    scenario: str
    query: str
    user_context: str | None = None
    max_user_sim_turns: int | None = DEFAULT_MAX_USER_SIM_TURNS
    max_agent_sim_turns: int = DEFAULT_MAX_AGENT_SIM_TURNS
    bot_instructions: str | None = None
    history: Any = None
    init: dict[str, dict[str, Any]] = {}
    format_query: bool = False  # ignored, as upstream
    tags: list[str] | dict[str, Any] | None = None


def recursive_merge(base: Any, override: Any) -> Any:
    """Merge a test's ``init`` value into the scenario's (docs/thinkingbox.md, "Merging init").

    dict + dict recurses (the test's keys win), list + list concatenates
    (scenario items first), anything else becomes a deep copy of ``override``.
    Neither input is modified. A test can never delete a key or empty a list.
    """
    if isinstance(base, dict) and isinstance(override, dict):
        out = copy.deepcopy(base)
        for key, value in override.items():
            out[key] = recursive_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(override, list):
        return copy.deepcopy(base) + copy.deepcopy(override)
    return copy.deepcopy(override)


def merge_init(world_state: dict[str, Any], init: dict[str, Any] | None) -> dict[str, Any]:
    """The ``server_config`` for ``session_create``: ``init`` merged per server key.

    A truthy scenario value is combined with :func:`recursive_merge`; a falsy
    one (missing, None, ``{}``) is replaced by the test's value as is. Key order
    (tool priority) is the scenario's, then new servers in ``init`` order.
    """
    out = copy.deepcopy(world_state)
    for server, value in (init or {}).items():
        current = out.get(server)
        out[server] = recursive_merge(current, value) if current else copy.deepcopy(value)
    return out


def merge_bot_instructions(scenario: str | None, test: str | None) -> str:
    """Scenario and test instructions joined with ``"\\n"``, non-None ones only."""
    return "\n".join(s for s in (scenario, test) if s is not None)


def flatten_tags(value: list[str] | dict[str, Any] | None) -> tuple[list[str], bool]:
    """Flatten tags: a list as is; a mapping gives ``labels`` + ``category`` and ``skip``."""
    if value is None:
        return [], False
    if isinstance(value, list):
        return [str(t) for t in value], False
    labels = list(value.get("labels") or []) + list(value.get("category") or [])
    return [str(t) for t in labels], bool(value.get("skip"))


def _yaml_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the node at ``loc`` (a pydantic error location) in ``text``."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == str(part)]
            if not match:
                break
            line, node = match[0][0].start_mark.line + 1, match[0][1]
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def format_validation_error(path: Path, exc: ValidationError, line_of: Any) -> TaskFormatError:
    """The first pydantic error as a TaskFormatError; ``line_of(loc)`` gives its line."""
    first = exc.errors()[0]
    loc = tuple(first["loc"])
    return TaskFormatError(
        str(path), first["msg"], line=line_of(loc), field=".".join(map(str, loc)) or None
    )


def load_config_file(path: Path, model: type[BaseModel]) -> BaseModel:
    """Read and validate one YAML config file; errors name the file, line and field."""
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from exc
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise format_validation_error(path, exc, lambda loc: _yaml_line(text, loc)) from exc


class Conftest(BaseModel):
    """``conftest.yaml``: ``fixtures: {name: {type: pkg.mod.attr, **kwargs}}``."""

    model_config = ConfigDict(extra="ignore")
    fixtures: dict[str, dict[str, Any]] = {}


def builtin_tool_dict(tool: BuiltinTool) -> dict[str, Any]:
    """``{name, description, input_schema, is_end_turn}``: the fields of ``ToolSpec``."""
    schema = tool.input_schema or tool.parameters or {"type": "object", "properties": {}}
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": schema,
        "is_end_turn": tool.is_end_turn,
    }


UPSTREAM_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "agent": ("system_instructions", "builtin_tools"),
    "agent.builtin_tools[]": ("name", "description", "input_schema"),
    "scenario": ("world_state", "tools"),
    "scenario.tools[]": ("name",),
}
"""Keys the upstream harness (``tb infer``) requires in agent and scenario files
(its ``AgentConfig``, ``ToolDef``, ``ScenarioConfig``, ``ToolDefOverride``); our own
loader is more lenient (docs/thinkingbox.md, "Running our domains under tb infer")."""


def _missing(path: Path, where: str, value: Any, kind: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path} ({where}): expected a mapping, got {type(value).__name__}"]
    return [
        f"{path} ({where}): required key {key!r} is missing"
        for key in UPSTREAM_REQUIRED_KEYS[kind]
        if key not in value
    ]


def upstream_schema_problems(root: str | Path) -> list[str]:
    """Every place where a dataset's agent or scenario files lack a key the upstream harness requires.

    Args:
        root: a ThinkingBox-layout dataset directory (``agent/``, ``scenario/``).

    Returns:
        One line per problem (file, where, key); empty when the files would load upstream.
        Test files are checked by our loader (``load_dataset``), whose required keys
        (``scenario``, ``query``) are the upstream ones.
    """
    root = Path(root)
    problems: list[str] = []
    for kind, list_key in (("agent", "builtin_tools"), ("scenario", "tools")):
        for path in sorted((root / kind).glob("*.yaml")):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            problems += _missing(path, kind, doc, kind)
            items = doc.get(list_key) if isinstance(doc, dict) else None
            for i, item in enumerate(items if isinstance(items, list) else []):
                problems += _missing(path, f"{list_key}[{i}]", item, f"{kind}.{list_key}[]")
    return problems
