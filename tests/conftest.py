"""Fixtures shared across the test packages."""

from __future__ import annotations

import os
import sys
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


@pytest.fixture(autouse=True)
def _no_inherited_definitions_state_storage():
    """Each test starts with no current Dagster definitions-state storage.

    Dagster keeps it in a context variable that entering an instance sets and leaving it resets; a
    context left open (a sensor or schedule evaluation context not used with ``with``) resets it
    only when garbage-collected, which puts a closed instance's storage back in a later test
    ("unable to open database file" from ``dg.materialize``).
    """
    if "dagster" in sys.modules:
        from dagster._core.storage.defs_state.base import _current_storage

        _current_storage.set(None)
    yield
