"""Server templates: a fresh server state per episode at the cost of a fork (docs/external_servers.md).

A stdio server written in Python spends most of its start-up importing (the mcp SDK, its data,
its indexes): 1-3 s on a loaded machine, per episode. A template is one process per server that
has done all of that and stopped right before serving (``rewardbox.sandbox.zygote``); each episode
gets a child forked from it, with new stdio pipes: copy-on-write memory, no import, no shared
state (the template never served an episode). The episode's stdio command becomes
``attach.py`` (``rewardbox.sandbox.attach``), which hands the MCP client's pipes and stderr log to
the template and exits, so the client, the stderr log, pid tracking and reaping work as for a
fresh process.

A server gets a template when its servers.yaml entry has ``start: template`` (the default) and its
command is ``{python} [-u|-B|-E|-s|-O] -m module ...`` or ``{python} ... script.py ...`` (any
Python interpreter; env and cwd as for a fresh process). It falls back to a fresh process per
episode, with one warning per server and the reason in :meth:`TemplateSet.report`, when the
command is not Python, the server starts threads or opens sockets before serving, it serves
without ``asyncio.run``/``anyio.run``, or the template fails. The first forked episode is checked
against a fresh process like any reuse (``rewardbox.sandbox.canary``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from rewardbox.sandbox.reaper import TrackedProcess, kill_now, launcher_argv
from rewardbox.sandbox.servers_config import ProcessServer, ServersConfig

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
ZYGOTE, ATTACH = str(HERE / "zygote.py"), str(HERE / "attach.py")
MARK = "rewardbox-template:"
_SAFE_FLAGS = {"-u", "-B", "-E", "-s", "-O", "-OO"}
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
_POLL_S = 0.01


def split_python_command(argv: list[str]) -> tuple[list[str], list[str]] | str:
    """``(interpreter + flags, target)`` of a Python server command, or why it has no template.

    ``target`` is ``["-m", module, *args]`` or ``[script, *args]``.
    """
    if not argv:
        return "empty command"
    exe = shutil.which(argv[0]) or argv[0]
    if not (
        _PYTHON_NAME.fullmatch(os.path.basename(exe))
        or os.path.realpath(exe) == os.path.realpath(sys.executable)
    ):
        return f"{argv[0]!r} is not a Python interpreter"
    i = 1
    while i < len(argv) and argv[i] in _SAFE_FLAGS:
        i += 1
    if i + 1 < len(argv) and argv[i] == "-m":
        return argv[:i], argv[i:]
    if i < len(argv) and argv[i].endswith(".py"):
        return argv[:i], argv[i:]
    return "the command is neither `{python} -m module ...` nor `{python} script.py ...`"


class _Template:
    """One running template process and its fork socket."""

    def __init__(self, proc: subprocess.Popen, tracked: TrackedProcess | None, workdir: Path):
        self.proc, self.tracked, self.workdir = proc, tracked, workdir
        self.socket = str(workdir / "fork.sock")

    def alive(self) -> bool:
        return self.proc.poll() is None


class TemplateSet:
    """The templates of one campaign's servers, started on first use; picklable copies start empty.

    Args:
        config: the servers config.
        ready_timeout_s: how long a template may take to reach its fork point, seconds.

    Attributes:
        fallbacks: ``{server: reason}`` for every server that runs fresh processes instead.
    """

    def __init__(self, config: ServersConfig, *, ready_timeout_s: float = 120.0):
        self.config, self.ready_timeout_s = config, ready_timeout_s
        self.fallbacks: dict[str, str] = {}
        self.new_fallbacks: list[
            str
        ] = []  # servers that fell back since the caller last took this list
        self._templates: dict[str, _Template] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._procs: list[TrackedProcess] = []
        self._dirs: list[Path] = []
        self._finalizer = weakref.finalize(self, _cleanup, self._procs, self._dirs)

    async def attach_argv(self, name: str) -> list[str] | None:
        """The stdio command that forks an episode's server from ``name``'s template (pidfile appended
        by the caller), or None: spawn a fresh process. Never raises."""
        server = self.config.servers.get(name)
        if (
            not isinstance(server, ProcessServer)
            or server.start != "template"
            or name in self.fallbacks
        ):
            return None
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            template = self._templates.get(name)
            if template is None or not template.alive():
                try:
                    template = await self._start(name, server)
                except Exception as exc:  # noqa: BLE001 - any failure means: fresh processes
                    self.fall_back(
                        name,
                        f"{type(exc).__name__}: {exc}"
                        if not isinstance(exc, _NoTemplate)
                        else str(exc),
                    )
                    return None
        return [sys.executable, "-I", "-S", ATTACH, template.socket]

    def fall_back(self, name: str, reason: str) -> bool:
        """Use fresh processes for ``name`` from now on; warn once, end its template.

        Returns:
            True the first time (the caller records it once in the episode's events).
        """
        if name in self.fallbacks:
            return False
        self.fallbacks[name] = reason
        self.new_fallbacks.append(name)
        logger.warning("server %s: no template, a fresh process per episode: %s", name, reason)
        template = self._templates.pop(name, None)
        if template is not None and template.tracked is not None:
            kill_now([template.tracked])
        return True

    def report(self) -> dict[str, str]:
        """``{server: "template" | "fresh: <reason>"}`` for every server seen."""
        out = {name: "template" for name in self._templates}
        out.update({name: f"fresh: {reason}" for name, reason in self.fallbacks.items()})
        return out

    def close(self) -> None:
        """End every template (their children die with them) and remove their files; idempotent.

        Waits up to 2 s per template for the kernel to end it (SIGKILL is asynchronous).
        """
        _cleanup(self._procs, self._dirs)
        for template in self._templates.values():
            try:
                template.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                logger.warning("server template pid %s survived SIGKILL for 2 s", template.proc.pid)
        self._procs.clear()
        self._dirs.clear()
        self._templates.clear()

    async def _start(self, name: str, server: ProcessServer) -> _Template:
        argv = server.argv(self.config.source, name)
        split = split_python_command(argv)
        if isinstance(split, str):
            raise _NoTemplate(split)
        interpreter, target = split
        workdir = Path(tempfile.mkdtemp(prefix="rewardbox-template-"))
        self._dirs.append(workdir)
        pidfile, errlog = workdir / "template.pid", workdir / "template.stderr"
        command = launcher_argv(
            [*interpreter, ZYGOTE, "--socket", str(workdir / "fork.sock"), "--", *target], pidfile
        )
        with open(errlog, "w", encoding="utf-8") as err:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=server.process_env(self.config.source, name),
                cwd=server.resolved_cwd(self.config.source, name),
                start_new_session=True,
            )
        template = _Template(proc, None, workdir)
        try:
            status = await self._wait_status(proc)
        finally:
            template.tracked = TrackedProcess.from_pidfile(pidfile, label=f"{name}#template")
            if template.tracked is not None:
                self._procs.append(template.tracked)
        if status != "ready":
            kill_now([template.tracked] if template.tracked else [])
            tail = errlog.read_text(encoding="utf-8", errors="replace").strip()[-1000:]
            raise _NoTemplate(
                status.removeprefix("unforkable ") + (f"; stderr: ...{tail}" if tail else "")
            )
        self._templates[name] = template
        logger.info(
            "server %s: template ready (pid %s)",
            name,
            template.tracked.pid if template.tracked else "?",
        )
        return template

    async def _wait_status(self, proc: subprocess.Popen) -> str:
        """The template's first status line (``ready`` / ``unforkable ...``), polled without blocking the loop."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        buffer, deadline = b"", time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                return "unforkable the template exited before it was ready"
            buffer += chunk or b""
            for line in buffer.decode(errors="replace").splitlines():
                if line.startswith(MARK):
                    return line[len(MARK) :].strip()
            await asyncio.sleep(_POLL_S)
        return f"unforkable the template was not ready after {self.ready_timeout_s} s"

    def __reduce__(self):
        return (TemplateSet, (self.config,), {"ready_timeout_s": self.ready_timeout_s})

    def __setstate__(self, state: dict) -> None:
        self.ready_timeout_s = state["ready_timeout_s"]


class _NoTemplate(Exception):
    """This server cannot run from a template; the message says why."""


def _cleanup(procs: list[TrackedProcess], dirs: list[Path]) -> None:
    kill_now(procs)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
