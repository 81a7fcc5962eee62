"""Sandbox config: which tool backends episodes run against.

Composed by the profile under ``sandbox:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxConfig(BaseModel):
    """Tool backends: in-process embedded servers, external MCP servers, or a Session Proxy.

    Attributes:
        kind: ``inprocess`` (embedded domains in this process), ``external`` (one
            MCP process per server per episode, forked from a per-server template
            by default, see docs/external_servers.md; or ``mcp-remote`` endpoints), or
            ``proxy`` (a running ThinkingBox Session Proxy at ``proxy_url``).
        servers_yaml: external only; a ThinkingBox ``servers.yaml``, merged with
            each task source's ``servers`` file (one of them must be set).
        proxy_url: proxy only; e.g. ``http://127.0.0.1:7111``.
        tool_timeout_s: external only; limit of one tool call, seconds (a hung
            call is a system error).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["inprocess", "external", "proxy"] = "inprocess"
    servers_yaml: str | None = None
    proxy_url: str | None = None
    tool_timeout_s: float = Field(30.0, gt=0)
