"""``python -m rewardbox.envserver`` serves a ThinkingBox dataset directory on the given port (a subprocess, a free port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip(
    "openenv.core", reason="the environment server needs the 'env' extra (openenv-core)"
)


from rewardbox.envserver.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_cli_serves_a_thinkingbox_dataset_directory_until_stopped():
    """The hotel domain's dataset directory is in ThinkingBox layout; served by path, as any dataset is."""
    from rewardbox.domains.registry import dataset_dir

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rewardbox.envserver",
            "--dataset",
            str(dataset_dir("hotel")),
            "--profile",
            "test",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline, tasks = time.monotonic() + 90, None
        while tasks is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                tasks = httpx.get(f"http://127.0.0.1:{port}/tasks", timeout=5).json()
            except httpx.TransportError:
                time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read().decode()
        assert tasks and all(t["uid"].startswith("hotel_") for t in tasks)
        assert (
            httpx.get(f"http://127.0.0.1:{port}/metadata", timeout=5).json()["name"] == "rewardbox"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bad_limits_are_refused_before_serving():
    with pytest.raises(ValueError, match="max_user_turns"):
        main(["--domain", "retail", "--profile", "test", "--max-user-turns", "-1"])
