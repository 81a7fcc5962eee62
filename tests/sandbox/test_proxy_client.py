"""ProxySandbox against a fake ThinkingBox Session Proxy over real HTTP.

The fake (a Starlette app on uvicorn in a thread, 127.0.0.1, ephemeral port)
implements the endpoints of docs/thinkingbox.md, "Session Proxy", with an in-memory store, and can be told to
answer the next requests of an endpoint with injected failures.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from rewardbox.errors import SandboxError
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.proxy_client import ProxySandbox, session_timeout_s

TOOLS = {
    "echo": {
        "description": "Echo text.",
        "inputSchema": {
            "type": "object",
            "title": "echoArguments",
            "properties": {"text": {"type": "string", "title": "Text"}},
            "required": ["text"],
        },
    },
    "add_item": {
        "description": "Add an item.",
        "inputSchema": {
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "$defs": {
                "Item": {
                    "type": "object",
                    "title": "Item",
                    "properties": {"name": {"type": "string"}},
                }
            },
        },
    },
    "slow": {"description": "Takes a while.", "inputSchema": {"type": "object", "properties": {}}},
}


def ok(value: Any) -> JSONResponse:
    kind = "string" if isinstance(value, str) else "object"
    return JSONResponse({"success": True, "content": {"type": kind, "value": value}})


def fail(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(
        {"success": False, "content": {"type": "string", "value": message}}, status_code=status
    )


class FakeProxy:
    """In-memory session proxy with failure injection."""

    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.forced: dict[str, list[Any]] = {}
        self.api_key: str | None = None

    def reset(self) -> None:
        self.__init__()

    def force(self, endpoint: str, *responses: Any) -> None:
        self.forced.setdefault(endpoint, []).extend(responses)

    async def handle(self, request: Request) -> Any:
        endpoint = request.url.path.strip("/")
        body = await request.json()
        self.requests.append((endpoint, body, dict(request.headers)))
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return PlainTextResponse("unauthorized", status_code=401)
        if self.forced.get(endpoint):
            return self.forced[endpoint].pop(0)
        return await getattr(self, endpoint)(body)

    async def session_create(self, body: dict[str, Any]) -> Any:
        sid = body["session_id"]
        if sid in self.sessions:
            return fail(f"Session {sid} already exists")
        for name in body["available_tools"]:
            if name not in TOOLS:
                return fail(f"Tool {name} does not exist")
        if any(
            isinstance(cfg, dict) and cfg.get("fail_init") for cfg in body["server_config"].values()
        ):
            return fail("__reserved__init failed: bad data_patch")
        self.sessions[sid] = {
            "available": body["available_tools"],
            "items": [],
            "config": body["server_config"],
        }
        return ok({srv: {} for srv in body["server_config"]})

    async def list_tools(self, body: dict[str, Any]) -> Any:
        session = self.sessions[body["session_id"]]
        return ok({"tools": {name: TOOLS[name] for name in reversed(session["available"])}})

    async def call_tool(self, body: dict[str, Any]) -> Any:
        session = self.sessions.get(body["session_id"])
        if session is None or body["tool_name"] not in session["available"]:
            return fail(f"Tool {body['tool_name']} does not exist")
        if body["tool_name"] == "slow":
            await asyncio.sleep(1.0)
        if body["tool_name"] == "add_item":
            session["items"].append(body["arguments"]["item"])
            return ok(f'{{"id": {len(session["items"])}}}')
        return ok(body["arguments"].get("text", ""))

    async def get_effects(self, body: dict[str, Any]) -> Any:
        session = self.sessions[body["session_id"]]
        return ok({srv: {"items": session["items"]} for srv in session["config"]})

    async def session_destroy(self, body: dict[str, Any]) -> Any:
        self.sessions.pop(body["session_id"], None)
        return ok("Ok")


@pytest.fixture(scope="module")
def proxy_server():
    fake = FakeProxy()
    names = ["session_create", "list_tools", "call_tool", "get_effects", "session_destroy"]
    app = Starlette(routes=[Route(f"/{n}", fake.handle, methods=["POST"]) for n in names])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield fake, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture()
def proxy(proxy_server):
    fake, url = proxy_server
    fake.reset()
    return fake, url


class Sleeps:
    """Records the backoff delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def run(coro):
    return asyncio.run(coro)


def test_session_timeout_formula():
    assert session_timeout_s(60) == 54.0  # 0.9 T wins for short timeouts
    assert session_timeout_s(900) == 870.0  # T - 30 wins for long ones


def test_full_episode_over_the_proxy(proxy):
    fake, url = proxy

    async def episode():
        sandbox = ProxySandbox(url, timeout_s=60)
        init = await sandbox.start({"retail": {"data_patch": {"orders": []}}}, ["echo", "add_item"])
        specs = await sandbox.list_tools()
        echoed = await sandbox.call_tool("echo", {"text": "hello"})
        added = await sandbox.call_tool("add_item", {"item": {"name": "lamp"}})
        effects = await sandbox.get_effects()
        await sandbox.close()
        await sandbox.close()
        return sandbox, init, specs, echoed, added, effects

    sandbox, init, specs, echoed, added, effects = run(episode())
    create = fake.requests[0][1]
    assert (
        uuid.UUID(create["session_id"]).version == 4 and create["session_id"] == sandbox.session_id
    )
    assert create["server_config"] == {"retail": {"data_patch": {"orders": []}}}
    assert create["available_tools"] == ["echo", "add_item"] and create["timeout"] == 54.0
    assert init == {"retail": {}}
    assert [s.name for s in specs] == ["echo", "add_item"]  # available_tools order
    assert specs[0].input_schema == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    assert specs[1].input_schema["properties"]["item"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}},
    }
    assert echoed == "hello" and added == '{"id": 1}'
    assert effects == {"retail": {"items": [{"name": "lamp"}]}}
    assert [r[0] for r in fake.requests].count("session_destroy") == 1 and fake.sessions == {}


def test_proxy_refusals_are_system_errors_and_never_retried(proxy):
    fake, url = proxy

    async def episode():
        sandbox = ProxySandbox(url)
        with pytest.raises(SandboxError, match=r"session_create \(400\): Tool nope does not exist"):
            await sandbox.start({"retail": {}}, ["echo", "nope"])
        await sandbox.close()
        sandbox = ProxySandbox(url)
        with pytest.raises(SandboxError, match="__reserved__init failed"):
            await sandbox.start({"retail": {"fail_init": True}}, ["echo"])
        await sandbox.close()
        sandbox = ProxySandbox(url)
        await sandbox.start({"retail": {}}, ["echo"])
        with pytest.raises(SandboxError, match=r"call_tool \(400\): Tool slow does not exist"):
            await sandbox.call_tool("slow", {})
        fake.force(
            "call_tool",
            fail("Tool call timed out", status=504),
            PlainTextResponse("gw", status_code=504),
        )
        with pytest.raises(SandboxError, match=r"call_tool \(504\): Tool call timed out"):
            await sandbox.call_tool("echo", {"text": "x"})
        with pytest.raises(SandboxError, match="call_tool returned 504"):
            await sandbox.call_tool("echo", {"text": "x"})
        await sandbox.close()

    run(episode())
    calls = [r for r in fake.requests if r[0] == "call_tool"]
    assert len(calls) == 3  # one request each: no retry of refusals or of a timed-out tool


def test_gateway_errors_are_retried_with_capped_random_backoff(proxy):
    fake, url = proxy
    sleeps = Sleeps()

    async def episode():
        sandbox = ProxySandbox(url, retry_sleep=sleeps)
        fake.force(
            "session_create",
            PlainTextResponse("x", status_code=503),
            PlainTextResponse("x", status_code=502),
        )
        await sandbox.start({"retail": {}}, ["echo"])
        fake.force("get_effects", *[PlainTextResponse("x", status_code=504) for _ in range(6)])
        with pytest.raises(SandboxError, match="get_effects failed after retries: 504"):
            await sandbox.get_effects()
        await sandbox.close()

    run(episode())
    assert [r[0] for r in fake.requests].count("session_create") == 3
    assert [r[0] for r in fake.requests].count("get_effects") == 6  # 1 + 5 retries
    assert len(sleeps.delays) == 2 + 5
    bounds = [1, 2] + [1, 2, 4, 8, 16]  # min(2^(n-1), 32) for the n-th attempt of each call
    assert all(0 <= d <= b for d, b in zip(sleeps.delays, bounds, strict=True)), sleeps.delays


def test_rate_limit_honours_retry_after_and_timeouts_are_not_retried(proxy):
    fake, url = proxy
    sleeps = Sleeps()

    async def episode():
        sandbox = ProxySandbox(url, timeout_s=0.3, retry_sleep=sleeps)
        fake.force(
            "session_create",
            PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "7"}),
            PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "120"}),
        )
        await sandbox.start({"retail": {}}, ["slow"])
        with pytest.raises(SandboxError, match=r"call_tool timed out after 0.3 s \(not retried\)"):
            await sandbox.call_tool("slow", {})
        await sandbox.close()

    run(episode())
    assert sleeps.delays == [7.0, 32.0]  # Retry-After, capped at 32 s
    assert [r[0] for r in fake.requests].count("call_tool") == 1


def test_api_key_from_env_and_auth_retries(proxy, monkeypatch):
    fake, url = proxy
    fake.api_key = "k-123"
    sleeps = Sleeps()
    monkeypatch.setenv("RB_PROXY_KEY", "k-123")

    async def episode():
        sandbox = ProxySandbox(url, api_key_env="RB_PROXY_KEY", retry_sleep=sleeps)
        await sandbox.start({"retail": {}}, ["echo"])
        monkeypatch.setenv("RB_PROXY_KEY", "wrong")
        with pytest.raises(SandboxError, match="401"):
            await sandbox.call_tool("echo", {"text": "x"})
        monkeypatch.setenv("RB_PROXY_KEY", "k-123")
        await sandbox.close()

    run(episode())
    assert fake.requests[0][2]["authorization"] == "Bearer k-123"
    assert [r[0] for r in fake.requests].count("call_tool") == 4  # 1 + 3 re-reads of the key
    assert [r[0] for r in fake.requests][-1] == "session_destroy" and fake.sessions == {}


def test_unreachable_proxy_is_retried_then_a_system_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once we leave: connection refused
    sleeps = Sleeps()
    make = build_sandbox_factory("proxy", base_url=f"http://127.0.0.1:{port}", retry_sleep=sleeps)

    async def episode():
        sandbox = make()
        assert isinstance(sandbox, ProxySandbox)
        with pytest.raises(
            SandboxError, match="session_create failed after retries: cannot connect"
        ):
            await sandbox.start({"retail": {}}, ["echo"])
        await sandbox.close()

    run(episode())
    assert len(sleeps.delays) == 10
