"""Pick a sandbox backend by name: one place that turns config into a sandbox factory.

Kinds (docs/method.md, "Components"):

- ``inprocess``: the embedded MCP servers in this process, one SQLite database
  per episode (``rewardbox.sandbox.inprocess.InProcessSandboxFactory``).
- ``external``: servers from a ThinkingBox ``servers.yaml``, spawned per episode
  over stdio (or reused from a warm pool, for servers with
  ``episodes_per_process > 1``) or reached over streamable HTTP
  (:class:`ExternalSandbox` made by ``ExternalSandboxFactory``; await its
  ``aclose()`` when the campaign ends).
- ``proxy``: sessions on a running ThinkingBox Session Proxy (:class:`ProxySandbox`).

Each factory is a zero-argument callable that returns a fresh, unstarted
sandbox per episode (a factory with an ``aclose`` coroutine holds resources
across episodes and wants it awaited at the end); backends are imported lazily so an unused one costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewardbox.sandbox.base import Sandbox

KINDS = ("external", "inprocess", "proxy")


def _external(
    servers: str | Path | Any, timeouts: Any = None, **options: Any
) -> Callable[[], Sandbox]:
    from rewardbox.sandbox.config import SandboxTimeouts
    from rewardbox.sandbox.pool import ExternalSandboxFactory
    from rewardbox.sandbox.servers_config import ServersConfig, load_servers_config

    config = servers if isinstance(servers, ServersConfig) else load_servers_config(servers)
    if isinstance(timeouts, dict):
        timeouts = SandboxTimeouts(**timeouts)
    return ExternalSandboxFactory(config, timeouts=timeouts, **options)


def _proxy(base_url: str, **options: Any) -> Callable[[], Sandbox]:
    from rewardbox.sandbox.proxy_client import ProxySandbox

    return functools.partial(ProxySandbox, base_url, **options)


def _inprocess(**options: Any) -> Callable[[], Sandbox]:
    from rewardbox.sandbox.inprocess import InProcessSandboxFactory

    return InProcessSandboxFactory(**options)


def build_sandbox_factory(kind: str, **cfg: Any) -> Callable[[], Sandbox]:
    """A zero-argument callable that makes one fresh sandbox per episode.

    Args:
        kind: ``"inprocess"``, ``"external"`` or ``"proxy"``.
        **cfg: backend options.
            ``external``: ``servers`` (servers.yaml path or ``ServersConfig``),
            optional ``timeouts`` (``SandboxTimeouts`` or a dict of its fields),
            ``connect_attempts``, ``mode``.
            ``proxy``: ``base_url``, optional ``api_key_env``, ``timeout_s``, ...
            (see :class:`~rewardbox.sandbox.proxy_client.ProxySandbox`).
            ``inprocess``: passed to ``InProcessSandboxFactory``.

    Returns:
        The factory. Config is validated here, so a bad servers.yaml fails
        before any episode runs.

    Raises:
        ValueError: unknown ``kind`` or bad options (``ServersConfigError`` for
            a bad servers.yaml, naming the file and field).
        TypeError: a required option is missing.
    """
    builders = {"external": _external, "inprocess": _inprocess, "proxy": _proxy}
    if kind not in builders:
        raise ValueError(f"unknown sandbox kind {kind!r}; expected one of {', '.join(KINDS)}")
    return builders[kind](**cfg)
