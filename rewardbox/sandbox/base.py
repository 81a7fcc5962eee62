"""The sandbox contract: one isolated set of tool servers per episode.

Lifecycle (docs/thinkingbox.md, "Session Proxy", "Reserved tools"): ``start`` (spawn servers, list
tools, check ``available_tools``, call ``__reserved__init`` on each server in
order) → ``call_tool``* → ``get_effects`` → ``close`` (``__reserved__teardown``,
then reap). Every infrastructure fault raises ``SandboxError`` (a system
error); a tool's own ``{"error": ...}`` output is ordinary tool output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the agent sees it: name, description, cleaned JSON schema.

    Attributes:
        name: the tool name the agent calls (unique across a sandbox's servers).
        description: the text the model reads (a domain tool's docstring).
        input_schema: JSON Schema of the arguments, ``$ref`` resolved and ``$defs``/``title``
            dropped as the Session Proxy cleans them (docs/thinkingbox.md, "Servers").
        is_end_turn: calling it ends the agent's turn (an ``is_end_turn`` builtin tool).
    """

    name: str
    description: str
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    is_end_turn: bool = False

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry: ``{type: function, function: {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


class Sandbox(Protocol):
    """One episode's backend. Async; not shared between episodes."""

    async def start(
        self, world_state: dict[str, Any], available_tools: list[str]
    ) -> dict[str, Any]:
        """Spawn and init servers. Returns ``{server: init_result}``. Raises SandboxError."""

    async def list_tools(self) -> list[ToolSpec]:
        """The available tools only, schemas cleaned (docs/thinkingbox.md, "Servers")."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; returns the text of the result. Raises SandboxError on faults."""

    async def get_effects(self) -> dict[str, dict[str, Any]]:
        """``{server: geteffects JSON}``. Raises SandboxError."""

    async def close(self) -> None:
        """Teardown and reap every process. Never raises; idempotent."""


class SandboxFactory(Protocol):
    def __call__(self) -> Sandbox: ...
