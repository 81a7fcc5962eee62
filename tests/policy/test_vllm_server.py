"""The vLLM launcher: command, free port, health wait, process-group teardown, CPU skip (a fake ``vllm``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rewardbox.policy.serving_config import ServingConfig
from rewardbox.policy.vllm_server import (
    ServingError,
    build_command,
    free_port,
    serve,
    template_path,
    unavailable_reason,
    wait_for_health,
)

FAKE_VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "fake_vllm.py"
pytestmark = pytest.mark.timeout(60)


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_command_serves_our_template_with_the_family_parser(tmp_path):
    command = build_command(
        ServingConfig(kind="vllm", max_model_len=4096, reasoning_parser="qwen3"), tmp_path, 4321
    )
    assert command[:3] == ["vllm", "serve", str(tmp_path)]
    assert (
        "--enable-auto-tool-choice" in command and _arg(command, "--tool-call-parser") == "hermes"
    )
    assert _arg(command, "--chat-template") == str(template_path(ServingConfig()))
    assert (
        Path(_arg(command, "--chat-template"))
        .read_text()
        .startswith(
            (
                Path(__file__).resolve().parents[2] / "rewardbox/policy/chat_template.jinja"
            ).read_text()[:50]
        )
    )
    assert (_arg(command, "--port"), _arg(command, "--host")) == ("4321", "127.0.0.1")
    assert (_arg(command, "--max-model-len"), _arg(command, "--reasoning-parser")) == (
        "4096",
        "qwen3",
    )
    llama = build_command(
        ServingConfig(kind="vllm", model_family="llama3", extra_args=["--seed", "3"]), tmp_path, 1
    )
    assert _arg(llama, "--tool-call-parser") == "llama3_json" and llama[-2:] == ["--seed", "3"]
    assert "--reasoning-parser" not in llama
    override = build_command(ServingConfig(kind="vllm", tool_call_parser="pythonic"), tmp_path, 1)
    assert _arg(override, "--tool-call-parser") == "pythonic"


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="--port"):
        ServingConfig(kind="vllm", extra_args=["--port=9000"])
    with pytest.raises(FileNotFoundError, match="chat_template"):
        build_command(
            ServingConfig(kind="vllm", chat_template=str(tmp_path / "missing.jinja")), tmp_path, 1
        )


def test_free_port_is_bindable():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


class _SlowHealth(BaseHTTPRequestHandler):
    ready_at = 0.0

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200 if time.monotonic() >= self.ready_at else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_health_wait_returns_once_the_server_answers():
    handler = type("Handler", (_SlowHealth,), {"ready_at": time.monotonic() + 0.6})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        waited_s = wait_for_health(
            f"http://127.0.0.1:{server.server_address[1]}", timeout_s=10, poll_s=0.1
        )
    finally:
        server.shutdown()
    assert 0.5 <= waited_s < 5


def test_health_wait_on_a_server_that_never_answers_times_out_clearly():
    """A listening socket that never replies: every poll has its own timeout, the wait ends at the deadline."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        started = time.monotonic()
        with pytest.raises(ServingError, match="did not answer 200 within 2 s") as info:
            wait_for_health(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=2, poll_s=0.2)
    assert time.monotonic() - started < 8 and info.value.error_kind == "serving_timeout"


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ``vllm`` executable on PATH that runs tests/fixtures/fake_vllm.py; returns its state file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_VLLM}" "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    state = tmp_path / "fake_vllm_state.json"
    monkeypatch.setenv("FAKE_VLLM_STATE", str(state))
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")  # a zombie is dead


def _gone(*pids: int, within_s: float = 10.0) -> bool:
    """Every pid dead (or a zombie) within ``within_s``: SIGKILL lands at once, but a loaded machine may take a moment."""
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _config(**kwargs) -> ServingConfig:
    return ServingConfig(
        kind="vllm", require_gpu=False, startup_timeout_s=20, health_poll_s=0.1, **kwargs
    )


def test_serve_starts_the_real_process_and_teardown_kills_its_group(
    fake_vllm, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_VLLM_DELAY_S", "0.5")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    with serve(_config(), checkpoint, tmp_path / "logs" / "vllm.log") as server:
        state = json.loads(fake_vllm.read_text())
        assert (
            state["argv"][:2] == ["serve", str(checkpoint)]
            and "--enable-auto-tool-choice" in state["argv"]
        )
        assert server.base_url == f"http://127.0.0.1:{_arg(state['argv'], '--port')}/v1"
        assert _alive(state["pid"]) and _alive(state["child_pid"])
        assert server.startup_s >= 0.4
    assert server.metadata["shutdown"] == "terminated"
    assert _gone(state["pid"], state["child_pid"])  # the child in its group too


def test_a_server_that_ignores_sigterm_is_killed(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_IGNORE_TERM", "1")
    with serve(_config(shutdown_timeout_s=1), tmp_path, tmp_path / "vllm.log") as server:
        state = json.loads(fake_vllm.read_text())
    assert server.metadata["shutdown"] == "killed" and _gone(state["pid"], state["child_pid"])


def test_a_server_that_dies_while_loading_is_a_clear_system_error(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_EXIT", "3")
    started = time.monotonic()
    with (
        pytest.raises(ServingError, match="exited with code 3(.|\n)*CUDA out of memory") as info,
        serve(_config(), tmp_path, tmp_path / "vllm.log"),
    ):
        pytest.fail("the block must not run")
    assert info.value.error_kind == "serving_crash" and time.monotonic() - started < 15


def test_cpu_machine_or_missing_vllm_is_skipped_with_a_reason(fake_vllm, monkeypatch):
    assert unavailable_reason(ServingConfig(kind="vllm"), gpu_available=False).startswith(
        "vLLM serving skipped: no CUDA GPU"
    )
    assert unavailable_reason(ServingConfig(kind="vllm"), gpu_available=True) is None
    assert unavailable_reason(ServingConfig(kind="vllm", require_gpu=False)) is None
    missing = unavailable_reason(ServingConfig(kind="vllm", executable="no-such-vllm-here"))
    assert "no 'no-such-vllm-here' executable on PATH" in missing


def test_a_launcher_that_ignores_sigterm_still_stops_the_server_gracefully(fake_vllm, tmp_path):
    """SIG_IGN is inherited across exec: the launcher restores SIGTERM's default in the server (a runner or
    library that ignores SIGTERM in the calling process must not turn every teardown into a SIGKILL)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with serve(_config(shutdown_timeout_s=10), tmp_path, tmp_path / "vllm.log") as server:
            state = json.loads(fake_vllm.read_text())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert server.command[0] == "vllm"
    assert server.metadata["shutdown"] == "terminated" and _gone(state["pid"], state["child_pid"])
