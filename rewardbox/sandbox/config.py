"""Sandbox config: which tool backends episodes run against, and the time limits of their servers.

``SandboxConfig`` is composed by the profile under ``sandbox:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class SandboxTimeouts:
    """Time limits of one episode's servers, in seconds.

    Attributes:
        connect_s: spawn + MCP handshake + ``tools/list``, per attempt.
        init_s: one ``__reserved__init`` call.
        tool_s: one tool call; a hung call is cancelled here (system error).
        effects_s: one ``__reserved__geteffects`` call.
        teardown_s: one ``__reserved__teardown`` call (failures only logged).
        exit_grace_s: after stdin closes, how long a server may take to exit by itself.
        term_grace_s: between SIGTERM and SIGKILL.
    """

    connect_s: float = 60.0
    init_s: float = 120.0
    tool_s: float = 30.0
    effects_s: float = 60.0
    teardown_s: float = 2.0
    exit_grace_s: float = 1.0
    term_grace_s: float = 2.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(
                    f"SandboxTimeouts.{name} must be a positive number of seconds, got {value!r}"
                )
