"""Which embedded domain serves which MCP server name, and where its dataset lives.

The keys are the ``world_state`` server names of the tasks (docs/thinkingbox.md,
"Dataset layout"). Every domain is served by ``rewardbox.domains.server``, imported only
when a server is built, so importing the registry does not import every domain.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOMAIN_SERVERS: dict[str, str] = {
    "retail": "rewardbox_retail",
    "hotel": "rewardbox_hotel",
    "helpdesk": "rewardbox_helpdesk",
}
"""Domain (dataset) name -> its server name."""

_DOMAINS_ROOT = Path(__file__).resolve().parent


def server_names() -> list[str]:
    """Every registered server name."""
    return sorted(DOMAIN_SERVERS.values())


def domain_of_server(server_name: str) -> str:
    """The embedded domain (``retail``, ``hotel``, ``helpdesk``) that serves ``server_name``.

    Raises:
        KeyError: the name is not registered (the message lists the known names).
    """
    for domain, name in DOMAIN_SERVERS.items():
        if name == server_name:
            return domain
    raise KeyError(f"no embedded server named {server_name!r}; known: {server_names()}")


def get_server_builder(server_name: str) -> Callable[[], Any]:
    """A zero-argument builder of a fresh MCP server for ``server_name``.

    Raises:
        KeyError: the name is not registered (the message lists the known names).
    """
    domain = domain_of_server(server_name)
    server = importlib.import_module("rewardbox.domains.server")
    return functools.partial(server.build_server, domain)


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
