"""The FastAPI app: OpenEnv's own app factory around ``RewardboxEnvironment``.

``create_fastapi_app`` (openenv-core) registers ``/ws`` (one environment per
WebSocket session: what ``EnvClient`` speaks), ``/reset``, ``/step`` and
``/state`` (stateless HTTP: each request gets a fresh environment, so a
multi-step episode needs ``/ws``), ``/schema``, ``/metadata`` and ``/health``.
We add ``GET /tasks`` (the served tasks), close the grading pool on shutdown, and answer caller
errors on the HTTP routes with a 4xx status and a message instead of OpenEnv's HTTP 500:
an unknown task 404, a bad reset argument (``trial`` < 0) 422, and ``POST /step`` without an
episode waiting for it 409 (HTTP ``/step`` runs on a fresh environment per request, so it never
has one: episodes are played over ``/ws``). On ``/ws`` the same errors reach the client as
OpenEnv error messages.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server import create_fastapi_app
from openenv.core.env_server.types import ConcurrencyConfig
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from rewardbox.envserver.environment import RewardboxEnvironment
from rewardbox.envserver.models import RewardboxAction, RewardboxObservation
from rewardbox.envserver.services import EnvServices, InvalidResetError, UnknownTaskError
from rewardbox.episode.stepwise import EpisodeClosedError

HTTP_STEP_HINT = (
    "HTTP /step runs on a fresh environment for every request (OpenEnv's stateless HTTP), so no "
    "episode is ever waiting there: play an episode over the WebSocket session /ws "
    "(rewardbox.envserver.client.RewardboxEnv, OpenEnv's EnvClient)"
)
_CALLER_ERRORS = ((UnknownTaskError, 404), (InvalidResetError, 422), (EpisodeClosedError, 409))


def build_app(
    services: EnvServices, max_sessions: int = 16, session_timeout_s: float | None = None
) -> FastAPI:
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
    app = create_fastapi_app(
        factory, RewardboxAction, RewardboxObservation, concurrency_config=config
    )

    @app.get("/tasks", tags=["Environment Info"], summary="The tasks this server serves")
    def list_tasks() -> list[dict[str, Any]]:
        return [
            {"uid": t.uid, "dataset": t.dataset, "query": t.query} for t in services.tasks.values()
        ]

    app.router.on_shutdown.append(services.close)
    for error, status in _CALLER_ERRORS:
        app.add_exception_handler(error, functools.partial(_caller_error, status))
    app.add_middleware(QuietWebSocketClose)
    return app


async def _caller_error(status: int, request: Request, exc: Exception) -> JSONResponse:
    """A caller error on an HTTP route: ``{"detail": message}`` with a 4xx status, no traceback."""
    detail = str(exc)
    if isinstance(exc, EpisodeClosedError) and request.url.path == "/step":
        detail = f"{detail}. {HTTP_STEP_HINT}"
    return JSONResponse(status_code=status, content={"detail": detail, "error": type(exc).__name__})


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
