"""Fixtures shared across the test packages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.fake_openai import FakeOpenAI


@pytest.fixture(scope="session")
def smollm2_checkpoint(tmp_path_factory) -> Path:
    """The real embedded model converted once per session (GGUF -> HF safetensors, about 40 s).

    ``REWARDBOX_TEST_CHECKPOINT_DIR`` points at a persistent directory to reuse across sessions.
    """
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors

    target = os.environ.get("REWARDBOX_TEST_CHECKPOINT_DIR")
    out = Path(target) if target else tmp_path_factory.mktemp("smollm2") / "base"
    return convert_gguf_to_safetensors(out)


@pytest.fixture
def fake_openai():
    """A fake OpenAI-compatible chat server on 127.0.0.1 (scripted responses, recorded requests)."""
    fake = FakeOpenAI()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
