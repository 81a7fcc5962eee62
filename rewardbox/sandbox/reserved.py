"""The reserved-tool protocol shared by every MCP transport (docs/thinkingbox.md, "Session Proxy", "Reserved tools")."""

from __future__ import annotations

import json
from typing import Any

import mcp_types

from rewardbox.errors import SandboxError

RESERVED_PREFIX = "__reserved__"
INIT_TOOL = "__reserved__init"
EFFECTS_TOOL = "__reserved__geteffects"
TEARDOWN_TOOL = "__reserved__teardown"
SERVER_TOOL = "__reserved__server_tool"


def first_text(result: mcp_types.CallToolResult) -> str:
    """The text of ``content[0]`` (docs/thinkingbox.md, "Session Proxy"); ``""`` when empty.

    A non-text first block (image, resource) is returned as its JSON.
    """
    if not result.content:
        return ""
    block = result.content[0]
    text = getattr(block, "text", None)
    return (
        text if isinstance(text, str) else block.model_dump_json(by_alias=True, exclude_none=True)
    )


def parse_init_reply(server: str, text: str) -> dict[str, Any]:
    """Interpret a ``__reserved__init`` reply (docs/thinkingbox.md, "Reserved tools").

    ``{}`` → ``{}``; ``{"status": "ok", ...rest}`` → ``rest`` (the init result);
    anything else (other JSON, invalid JSON, a tool error) fails the episode.

    Raises:
        SandboxError: the reply is not OK (system error: the episode cannot start).
    """
    try:
        reply = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        reply = None
    if reply == {}:
        return {}
    if isinstance(reply, dict) and reply.get("status") == "ok":
        return {k: v for k, v in reply.items() if k != "status"}
    raise SandboxError(f"__reserved__init of server {server!r} failed: {text[:1000]}")


def parse_effects_reply(text: str) -> dict[str, Any]:
    """A ``__reserved__geteffects`` reply as a dict; anything but a JSON object becomes ``{}``
    (docs/thinkingbox.md, "Reserved tools")."""
    try:
        reply = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    return reply if isinstance(reply, dict) else {}
