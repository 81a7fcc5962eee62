"""Serve a checkpoint with ``vllm serve`` for the length of a block: start, wait for health, stop.

``serve(config, checkpoint_dir, log_path)`` is a context manager: it picks a free port, starts
``vllm serve <checkpoint> --enable-auto-tool-choice --tool-call-parser <parser> --chat-template <ours>``
in its own process group, polls ``GET /health`` (httpx, retried with tenacity) until it answers 200 or
``startup_timeout_s`` passes, yields the OpenAI-compatible base URL, and on exit sends SIGTERM to the
process group, then SIGKILL after ``shutdown_timeout_s``. Nothing here knows Dagster; the resource
``resources/vllm_server.py`` wraps it.

vLLM flags as its docs name them ("OpenAI-Compatible Server", "Tool Calling"): ``--host``, ``--port``,
``--served-model-name``, ``--dtype``, ``--max-model-len``, ``--gpu-memory-utilization``,
``--enable-auto-tool-choice``, ``--tool-call-parser``, ``--chat-template``, ``--reasoning-parser``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from rewardbox.errors import InfrastructureError
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.serving_config import ServingConfig

_LOG_TAIL_CHARS = 2000


class ServingError(InfrastructureError):
    """The vLLM server did not start, exited early or never became healthy (a system error)."""

    kind = "serving"


class _NotHealthy(Exception):
    """``/health`` did not answer 200 yet (retried until the start-up deadline)."""


@dataclass
class VllmServer:
    """A running ``vllm serve`` process.

    Attributes:
        base_url: the OpenAI-compatible root, e.g. ``http://127.0.0.1:41234/v1``.
        model: the served model name requests must use.
        command: the exact argv started.
        process: the ``Popen`` (its own session: ``pid`` is the process-group id).
        log_path: where the server's stdout and stderr go.
        startup_s: seconds from start to the first healthy answer.
    """

    base_url: str
    model: str
    command: list[str]
    process: subprocess.Popen
    log_path: Path
    startup_s: float = 0.0
    metadata: dict[str, object] = field(default_factory=dict)

    def policy_config(self, policy: PolicyConfig) -> PolicyConfig:
        """An ``endpoint`` policy at this server, keeping ``policy``'s name (sampling is set per purpose by the
        episode and GRPO configs).

        Our template opens no reasoning, so ``reasoning_open`` is False; the endpoint's retry settings are
        the defaults of ``PolicyConfig`` unless ``policy`` is itself an endpoint.
        """
        keep = {"name": policy.name}
        if policy.kind == "endpoint":
            keep |= {
                k: getattr(policy, k)
                for k in (
                    "timeout_s",
                    "max_retries",
                    "max_timeout_retries",
                    "max_rate_limit_retries",
                    "extra_body",
                )
            }
        return PolicyConfig(
            kind="endpoint",
            base_url=self.base_url,
            model=self.model,
            api_key_env="VLLM_API_KEY",
            reasoning_open=False,
            **keep,
        )


def template_path(config: ServingConfig) -> Path:
    """The ``--chat-template`` file: the configured one, else ``rewardbox/policy/chat_template.jinja``."""
    if config.chat_template:
        return Path(config.chat_template).expanduser().resolve()
    return Path(str(resources.files("rewardbox.policy").joinpath("chat_template.jinja")))


def build_command(config: ServingConfig, checkpoint_dir: str | os.PathLike, port: int) -> list[str]:
    """The ``vllm serve`` argv for ``checkpoint_dir`` on ``port`` (no process is started).

    Raises:
        FileNotFoundError: the chat template file does not exist (a config error).
    """
    template = template_path(config)
    if not template.is_file():
        raise FileNotFoundError(f"serving.chat_template {str(template)!r} does not exist")
    command = [
        config.executable,
        "serve",
        str(checkpoint_dir),
        "--host",
        config.host,
        "--port",
        str(port),
        "--served-model-name",
        config.served_model_name,
        "--dtype",
        config.dtype,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        config.parser,
        "--chat-template",
        str(template),
    ]
    if config.reasoning_parser:
        command += ["--reasoning-parser", config.reasoning_parser]
    if config.max_model_len:
        command += ["--max-model-len", str(config.max_model_len)]
    if config.gpu_memory_utilization:
        command += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    return command + list(config.extra_args)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it; another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def unavailable_reason(config: ServingConfig, *, gpu_available: bool | None = None) -> str | None:
    """Why vLLM cannot serve on this machine, or None when it can.

    Args:
        gpu_available: overrides the ``torch.cuda.is_available()`` probe (tests).
    """
    if shutil.which(config.executable) is None:
        return (
            f"vLLM serving skipped: no {config.executable!r} executable on PATH (install vllm on a GPU "
            "machine, or point policy.kind: endpoint at any OpenAI-compatible server)"
        )
    if config.require_gpu:
        if gpu_available is None:
            import torch

            gpu_available = torch.cuda.is_available()
        if not gpu_available:
            return (
                "vLLM serving skipped: no CUDA GPU on this machine (serving.require_gpu); "
                "the profile's policy is used instead"
            )
    return None


def wait_for_health(
    root_url: str,
    timeout_s: float,
    poll_s: float = 1.0,
    process: subprocess.Popen | None = None,
    log_path: Path | None = None,
) -> float:
    """Poll ``GET <root_url>/health`` until it answers 200; return the seconds waited.

    Raises:
        ServingError: no 200 within ``timeout_s`` (cause ``timeout``), or ``process`` exited first
            (cause ``crash``, with the tail of ``log_path``). Each poll has its own short timeout, so a
            server that accepts connections and never answers cannot hang the caller.
    """
    started = time.monotonic()
    per_poll_s = max(0.1, min(5.0, timeout_s / 2))

    def poll() -> None:
        if process is not None and process.poll() is not None:
            raise ServingError(
                f"vllm serve exited with code {process.returncode} before it was healthy"
                f"{_log_tail(log_path)}",
                cause="crash",
            )
        try:
            response = httpx.get(f"{root_url}/health", timeout=per_poll_s)
        except httpx.HTTPError as exc:
            raise _NotHealthy(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise _NotHealthy(f"HTTP {response.status_code}")

    retrying = Retrying(
        retry=retry_if_exception_type(_NotHealthy),
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(poll_s),
        reraise=True,
    )
    try:
        retrying(poll)
    except _NotHealthy as exc:
        raise ServingError(
            f"{root_url}/health did not answer 200 within {timeout_s:.0f} s (last: {exc})"
            f"{_log_tail(log_path)}",
            cause="timeout",
        ) from exc
    return time.monotonic() - started


def stop_process_group(process: subprocess.Popen, timeout_s: float) -> str:
    """SIGTERM the process group of ``process``, SIGKILL it after ``timeout_s``; return how it ended.

    Returns ``"exited"`` (already gone), ``"terminated"`` or ``"killed"``. Children the server forked (vLLM's
    engine core and workers) share the group, so none outlives it.
    """
    if process.poll() is not None:
        _signal_group(process.pid, signal.SIGKILL)  # stray children of an exited leader
        return "exited"
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
        _signal_group(process.pid, signal.SIGKILL)
        return "terminated"
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
        return "killed"


_DEFAULT_SIGTERM_THEN_EXEC = (
    "import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execvp(sys.argv[1], sys.argv[1:])"
)
"""Run before the server's own argv (same pid, then exec): an ignored SIGTERM (``SIG_IGN``) and a blocked
signal mask survive ``exec``, so a server started from a process that ignores or blocks SIGTERM (some test
runners, supervisors, threads of other libraries) could only be SIGKILLed; this restores the default first,
which ``subprocess``'s ``restore_signals`` does not do for SIGTERM."""


@contextmanager
def serve(
    config: ServingConfig, checkpoint_dir: str | os.PathLike, log_path: str | os.PathLike
) -> Iterator[VllmServer]:
    """Run ``vllm serve`` on ``checkpoint_dir`` for the block; stop its process group after, whatever happens.

    Args:
        config: the profile's ``serving`` section.
        checkpoint_dir: a Hugging Face checkpoint directory (base or merged).
        log_path: file for the server's stdout and stderr (kept after the block, for diagnosis).

    Raises:
        FileNotFoundError: ``checkpoint_dir`` or the chat template does not exist (config errors).
        ServingError: the server exited or never became healthy (its log's tail is in the message).
    """
    if not Path(checkpoint_dir).exists():
        raise FileNotFoundError(f"checkpoint {str(checkpoint_dir)!r} does not exist")
    port = config.port or free_port(config.host)
    command = build_command(config, checkpoint_dir, port)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-c", _DEFAULT_SIGTERM_THEN_EXEC, *command],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = VllmServer(
        f"http://{config.host}:{port}/v1", config.served_model_name, command, process, log_path
    )
    try:
        server.startup_s = wait_for_health(
            f"http://{config.host}:{port}",
            config.startup_timeout_s,
            config.health_poll_s,
            process,
            log_path,
        )
        yield server
    finally:
        server.metadata["shutdown"] = stop_process_group(process, config.shutdown_timeout_s)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _log_tail(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    text = log_path.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL_CHARS:]
    return f"; log {log_path} ends with:\n{text}" if text.strip() else f"; log {log_path} is empty"
