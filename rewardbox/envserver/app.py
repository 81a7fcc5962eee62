"""The FastAPI app: OpenEnv's own app factory around ``RewardboxEnvironment``.

``create_fastapi_app`` (openenv-core) registers ``/ws`` (one environment per
WebSocket session: what ``EnvClient`` speaks), ``/reset``, ``/step`` and
``/state`` (stateless HTTP: each request gets a fresh environment, so a
multi-step episode needs ``/ws``), ``/schema``, ``/metadata`` and ``/health``.
We add ``GET /tasks`` (the served tasks) and close the grading pool on shutdown.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect
from openenv.core.env_server import create_fastapi_app
from openenv.core.env_server.types import ConcurrencyConfig

from rewardbox.envserver.environment import RewardboxEnvironment
from rewardbox.envserver.models import RewardboxAction, RewardboxObservation
from rewardbox.envserver.services import EnvServices


def build_app(services: EnvServices, max_sessions: int = 16, session_timeout_s: float | None = None) -> FastAPI:
    """The server app for ``services``.

    Args:
        services: shared tasks, sandbox factory, user simulator and grader.
        max_sessions: concurrent WebSocket sessions (episodes in flight), >= 1;
            one more is refused with OpenEnv's ``CAPACITY_REACHED`` error.
        session_timeout_s: idle seconds after which OpenEnv's reaper ends a
            session (its sandbox is torn down); None keeps sessions until they close.
    """
    factory = functools.partial(RewardboxEnvironment, services)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout_s)
    app = create_fastapi_app(factory, RewardboxAction, RewardboxObservation, concurrency_config=config)

    @app.get("/tasks", tags=["Environment Info"], summary="The tasks this server serves")
    def list_tasks() -> list[dict[str, Any]]:
        return [{"uid": t.uid, "dataset": t.dataset, "query": t.query} for t in services.tasks.values()]

    app.router.on_shutdown.append(services.close)
    app.add_middleware(QuietWebSocketClose)
    return app


class QuietWebSocketClose:
    """Swallows the ``WebSocketDisconnect`` OpenEnv's ``/ws`` raises after a client closed normally.

    OpenEnv's endpoint ends every session with ``websocket.close()`` and catches
    only ``RuntimeError``; when the client has already closed, Starlette raises
    ``WebSocketDisconnect`` and uvicorn logs an "Exception in ASGI application"
    for each finished session. The session is already cleaned up by then.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise
