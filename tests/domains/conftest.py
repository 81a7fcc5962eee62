"""What the domain tests share: the three domains, their tasks, tool environments, oracle runs, stdio servers.

Plain helpers are imported with ``from .conftest import ...``; ``env`` is a
fixture that serves the ``DOMAIN`` of the test module that asks for it.
Task lists and oracle runs are computed once per domain and session (treat
them as read-only).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, TypeVar

import pytest
from mcp import Client, StdioServerParameters

from rewardbox.domains import registry
from rewardbox.domains.base import Domain, ToolRunner
from rewardbox.domains.database import EpisodeDatabase
from rewardbox.domains.server import build_server
from rewardbox.grading.canonical import primary_keys
from rewardbox.sandbox.inprocess import InProcessSandbox

ROOT = Path(__file__).resolve().parents[2]
DOMAIN_NAMES = ("retail", "hotel", "helpdesk")

T = TypeVar("T")


@dataclass(frozen=True)
class DomainUnderTest:
    """One embedded domain and the modules the tests reach into."""

    name: str
    domain: Domain
    generator: ModuleType
    server: SimpleNamespace
    seed: ModuleType

    @property
    def server_name(self) -> str:
        return self.domain.server_name

    @property
    def dataset(self) -> Path:
        return registry.dataset_dir(self.name)

    @property
    def tool_names(self) -> list[str]:
        return [fn.__name__ for fn in self.domain.tools]

    @property
    def write_tools(self) -> set[str]:
        return set(self.tool_names) - self.domain.readonly_tools


@functools.cache
def domain_under_test(name: str) -> DomainUnderTest:
    """The domain ``name`` (``retail``, ``hotel`` or ``helpdesk``)."""
    package = f"rewardbox.domains.{name}"
    return DomainUnderTest(
        name,
        importlib.import_module(f"{package}.domain").DOMAIN,
        importlib.import_module(f"{package}.generator"),
        SimpleNamespace(build_server=functools.partial(build_server, name)),
        importlib.import_module(f"{package}.seed"),
    )


@functools.cache
def domain_tasks(name: str) -> list[dict[str, Any]]:
    """The domain's generated tasks (default seed), computed once."""
    return domain_under_test(name).generator.generate_tasks()


def golden_calls(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The golden tool interactions of a task spec (its only server)."""
    (config,) = task["world_state"].values()
    return config["golden_test_case"]["tool_interactions"]


# -- tools --------------------------------------------------------------------------------

Call = Callable[..., tuple[Any, bool]]


@pytest.fixture
def env(request: pytest.FixtureRequest) -> Iterable[tuple[EpisodeDatabase, Call]]:
    """``(db, call)`` on a fresh seed database of the module's ``DOMAIN``; ``call(tool, **args)`` runs a tool."""
    domain = request.module.DOMAIN
    db = EpisodeDatabase(domain)
    runner = ToolRunner(domain)

    def call(name: str, **args: Any) -> tuple[Any, bool]:
        return runner.invoke(db.engine, name, args)

    yield db, call
    db.dispose()


def assert_fails_without_writing(
    env: tuple[EpisodeDatabase, Call], tool: str, args: dict[str, Any], error: str
) -> None:
    """The call fails with ``error`` in its message, names the tool, and leaves the database as it was."""
    db, call = env
    before = db.dump()
    payload, failed = call(tool, **args)
    assert failed and error in payload["error"] and payload["tool"] == tool
    assert db.dump() == before


def assert_calls_write_nothing(
    env: tuple[EpisodeDatabase, Call], calls: list[tuple[str, dict[str, Any]]]
) -> None:
    """Running every ``(tool, args)`` of ``calls`` leaves the database as it was."""
    db, call = env
    before = db.dump()
    for tool, args in calls:
        call(tool, **args)
    assert db.dump() == before


# -- oracle runs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleRun:
    """One task run twice in the in-process sandbox: golden calls replayed, and nothing done."""

    task: dict[str, Any]
    replayed: dict[str, Any]
    null: dict[str, Any]
    outputs: list[str]


async def episode_effects(
    task: dict[str, Any], tools: list[str], calls: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``(effects, tool outputs)`` of one in-process episode of ``task`` that makes ``calls``."""
    (server_name,) = task["world_state"]
    sb = InProcessSandbox()
    await sb.start(task["world_state"], tools)
    try:
        outputs = [await sb.call_tool(item["tool"], item["parameters"]) for item in calls]
        return (await sb.get_effects())[server_name], outputs
    finally:
        await sb.close()


@functools.cache
def oracle_runs(name: str) -> tuple[OracleRun, ...]:
    """The golden replay and the null run of every task of a domain, computed once."""
    tools = domain_under_test(name).tool_names

    async def run_all() -> list[OracleRun]:
        runs = []
        for task in domain_tasks(name):
            replayed, outputs = await episode_effects(task, tools, golden_calls(task))
            null, _ = await episode_effects(task, tools, [])
            runs.append(OracleRun(task, replayed, null, outputs))
        return runs

    return tuple(asyncio.run(run_all()))


def changed_foreign_rows(run: OracleRun, metadata: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """``(table, primary key)`` of rows that the golden replay changed but the task's data patch does not own.

    New rows do not count; a row counts when it was in the initial state and differs in the golden state.
    """
    keys = primary_keys(metadata)
    (config,) = run.task["world_state"].values()
    foreign = []
    for table, rows in run.replayed["golden_db_state"].items():
        key = keys[table]
        initial = {tuple(r[c] for c in key): r for r in run.replayed["initial_db_state"][table]}
        own = {tuple(r[c] for c in key) for r in config["data_patch"].get(table, [])}
        for row in rows:
            pk = tuple(row[c] for c in key)
            if pk in initial and row != initial[pk] and pk not in own:
                foreign.append((table, pk))
    return foreign


# -- stdio servers --------------------------------------------------------------------------


def run_stdio_server(
    module: str, session: Callable[[Client], Awaitable[T]], timeout_s: float = 60
) -> T:
    """Spawn ``python -m <module> [args]`` (a domain's stdio server) and run ``session(client)`` against it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", *module.split()],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    async def go() -> T:
        async with Client(params) as client:
            return await session(client)

    return asyncio.run(asyncio.wait_for(go(), timeout_s))


async def call_text(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """The text of a tool call's first content block."""
    return (await client.call_tool(tool, arguments)).content[0].text


async def call_json(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    """A tool call's text, parsed as JSON."""
    return json.loads(await call_text(client, tool, arguments))
