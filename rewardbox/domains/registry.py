"""Which embedded domain serves which MCP server name, and where its dataset lives.

The keys are the ``world_state`` server names of the tasks (docs/thinkingbox.md,
"Dataset layout"). Builders are stored as import paths so that importing the
registry does not import every domain.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVER_BUILDERS: dict[str, str] = {
    "rewardbox_retail": "rewardbox.domains.retail.server:build_server",
    "rewardbox_hotel": "rewardbox.domains.hotel.server:build_server",
    "rewardbox_helpdesk": "rewardbox.domains.helpdesk.server:build_server",
}
"""Server name -> ``"module:function"`` of a zero-argument builder of a fresh MCP server."""

DOMAIN_SERVERS: dict[str, str] = {"retail": "rewardbox_retail", "hotel": "rewardbox_hotel",
                                   "helpdesk": "rewardbox_helpdesk"}
"""Domain (dataset) name -> its server name."""

_DOMAINS_ROOT = Path(__file__).resolve().parent


def server_names() -> list[str]:
    """Every registered server name."""
    return sorted(SERVER_BUILDERS)


def get_server_builder(server_name: str) -> Callable[[], Any]:
    """The builder of a server name.

    Raises:
        KeyError: the name is not registered (the message lists the known names).
    """
    try:
        target = SERVER_BUILDERS[server_name]
    except KeyError:
        raise KeyError(f"no embedded server named {server_name!r}; known: {server_names()}") from None
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def build_server(server_name: str) -> Any:
    """A fresh MCP server (fresh state) for a server name."""
    return get_server_builder(server_name)()


def dataset_dir(domain: str) -> Path:
    """The ThinkingBox-layout dataset directory of an embedded domain.

    Raises:
        KeyError: unknown domain.
    """
    if domain not in DOMAIN_SERVERS:
        raise KeyError(f"no embedded domain named {domain!r}; known: {sorted(DOMAIN_SERVERS)}")
    return _DOMAINS_ROOT / domain / "dataset"
