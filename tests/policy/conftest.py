"""Fixtures for policy tests: a tiny fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rewardbox.sandbox.base import ToolSpec


def chat_response(content: str | None = "", *, tool_calls: list[dict] | None = None, finish_reason: str = "stop",
                  reasoning: str | None = None, usage: dict | None = None) -> dict[str, Any]:
    """A chat.completion JSON body as an OpenAI-compatible server returns it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                           "prompt_tokens_details": {"cached_tokens": 64}},
    }


class FakeOpenAI:
    """Serves scripted responses in order; records every request body.

    ``script`` items are ``(status, json_body, headers)``; when it runs out, the
    ``default`` item is served forever.
    """

    def __init__(self) -> None:
        self.script: deque[tuple[int, Any, dict[str, str]]] = deque()
        self.default: tuple[int, Any, dict[str, str]] = (500, {"error": {"message": "no script"}}, {})
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("content-length", 0))
                fake.requests.append({"path": self.path, "body": json.loads(self.rfile.read(length) or b"{}")})
                status, body, headers = fake.script.popleft() if fake.script else fake.default
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.script.append((status, body, headers or {}))


@pytest.fixture
def fake_openai():
    fake = FakeOpenAI()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _spec(name: str, props: dict[str, Any], required: list[str], description: str = "") -> ToolSpec:
    return ToolSpec(name, description or f"The {name} tool.", {"type": "object", "properties": props, "required": required})


@pytest.fixture
def retail_tools() -> list[ToolSpec]:
    s = {"type": "string"}
    return [
        _spec("get_order", {"order_id": s}, ["order_id"]),
        _spec("cancel_order", {"order_id": s}, ["order_id"]),
        _spec("update_address", {"order_id": s, "zip": s}, ["order_id", "zip"]),
        _spec("refund_order", {"order_id": s, "amount": {"type": "number"}}, ["order_id", "amount"]),
        _spec("list_stores", {}, []),
        _spec("set_quantity", {"order_id": s, "quantity": {"type": "integer"}, "gift": {"type": "boolean"},
                               "tags": {"type": "array", "items": {"type": "string"}},
                               "mode": {"type": "string", "enum": ["fast", "slow"]},
                               "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}, ["order_id", "quantity"]),
    ]
