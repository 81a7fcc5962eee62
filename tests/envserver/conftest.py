"""A real environment server on 127.0.0.1 (a free port), run by uvicorn in a thread of the test process.

``served`` serves the embedded retail and hotel tasks with the real in-process
sandbox, scripted user and grading pool; ``crashing_server`` is the same server
whose sandboxes crash (``SandboxError``) on the tool named ``CRASH_TOOL`` or,
for ``CRASH_ON_START_TASK``, on start: an injected infrastructure fault.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.errors import SandboxError

ADDRESS_TASK = "retail_address.py:test_retail_address_change_01"
"""Golden: find_customer(email), then update_shipping_address(ORD-6171, ADR-2017-W) (a write)."""
if TYPE_CHECKING:
    from rewardbox.envserver.services import EnvServices

CRASH_TOOL = "update_shipping_address"
CRASH_ON_START_TASK = "retail_address.py:test_retail_address_change_02"


@dataclass
class Served:
    """A running server: its base URL and the services behind it (tasks by uid)."""

    url: str
    services: EnvServices


def serve(services: EnvServices, max_sessions: int = 8) -> Iterator[Served]:
    import uvicorn

    from rewardbox.envserver.app import build_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(services, max_sessions=max_sessions), log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the environment server did not start within 30 s")
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", services)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def _services(domains: list[str]) -> EnvServices:
    from rewardbox.envserver.services import build_services
    from rewardbox.runtime.verl_services import load_served_tasks, loop_services

    profile = load_profile("test")
    return build_services(load_served_tasks(profile, domains), loop_services(profile))


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve(_services(["retail", "hotel"]))


class RecordingSandbox:
    """Wraps a real sandbox; ``closed[i]`` turns True when the i-th sandbox made is closed."""

    def __init__(self, inner, closed: list[bool]):
        self.inner, self.closed, self.index = inner, closed, len(closed)
        closed.append(False)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def close(self):
        self.closed[self.index] = True
        await self.inner.close()


class CrashingSandbox:
    """Wraps a real sandbox; an injected fault raises ``SandboxError`` (an infrastructure fault)."""

    def __init__(self, inner):
        self.inner = inner

    async def start(self, world_state, available_tools):
        if self._crash_on_start(world_state):
            raise SandboxError("injected: the tool server died during start")
        return await self.inner.start(world_state, available_tools)

    async def list_tools(self):
        return await self.inner.list_tools()

    async def call_tool(self, name, arguments):
        if name == CRASH_TOOL:
            raise SandboxError(f"injected: the tool server crashed during {name}")
        return await self.inner.call_tool(name, arguments)

    async def get_effects(self):
        return await self.inner.get_effects()

    async def close(self):
        await self.inner.close()

    @staticmethod
    def _crash_on_start(world_state) -> bool:
        return any((cfg or {}).get("crash_on_start") for cfg in world_state.values())


@pytest.fixture(scope="module")
def crashing_server() -> Iterator[Served]:
    services = _services(["retail"])
    inner_factory = services.sandbox_factory
    services.sandbox_factory = lambda: CrashingSandbox(inner_factory())
    task = services.tasks[CRASH_ON_START_TASK]
    first_server = next(iter(task.world_state))
    world_state = {
        **task.world_state,
        first_server: {**task.world_state[first_server], "crash_on_start": True},
    }
    from dataclasses import replace

    services.tasks[CRASH_ON_START_TASK] = replace(task, world_state=world_state)
    yield from serve(services)
