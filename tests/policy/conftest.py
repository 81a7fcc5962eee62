"""Fixtures for policy tests: tool specs (the fake OpenAI server lives in tests/conftest.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rewardbox.sandbox.base import ToolSpec
from tests.fixtures.fake_openai import FakeOpenAI, chat_response  # noqa: F401 - re-exported for the tests


def _spec(name: str, props: dict[str, Any], required: list[str], description: str = "") -> ToolSpec:
    return ToolSpec(
        name,
        description or f"The {name} tool.",
        {"type": "object", "properties": props, "required": required},
    )


@pytest.fixture
def retail_tools() -> list[ToolSpec]:
    s = {"type": "string"}
    return [
        _spec("get_order", {"order_id": s}, ["order_id"]),
        _spec("cancel_order", {"order_id": s}, ["order_id"]),
        _spec("update_address", {"order_id": s, "zip": s}, ["order_id", "zip"]),
        _spec(
            "refund_order", {"order_id": s, "amount": {"type": "number"}}, ["order_id", "amount"]
        ),
        _spec("list_stores", {}, []),
        _spec(
            "set_quantity",
            {
                "order_id": s,
                "quantity": {"type": "integer"},
                "gift": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            ["order_id", "quantity"],
        ),
    ]


def complete_once(policy, request):
    """``policy.complete(request)`` in its own event loop, the policy's client closed after."""

    async def go():
        try:
            return await policy.complete(request)
        finally:
            await policy.aclose()

    return asyncio.run(go())
