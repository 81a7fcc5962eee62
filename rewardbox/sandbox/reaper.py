"""Process reaping for tool-server processes.

- :func:`launcher_argv` wraps a server command in the PDEATHSIG launcher
  (:mod:`rewardbox.sandbox.launcher`): the server dies with the worker that
  spawned it, even when that worker is killed with SIGKILL, and its pid is
  written to a pidfile before ``exec`` (same pid, so the pidfile names the
  server itself). Caveat (Linux semantics): PDEATHSIG fires when the *thread*
  that forked the child exits, so the event loop that starts a sandbox must
  outlive the sandbox.
- :class:`TrackedProcess` remembers a pid with its start time (so a recycled
  pid is never signalled); :func:`reap` sends SIGTERM to its process group,
  waits ``term_grace_s``, then SIGKILLs.

A zombie counts as dead: it holds no resources but a pid slot, and in a
container whose PID 1 never reaps, orphaned zombies can linger.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

_POLL_S = 0.02


def launcher_argv(command: list[str], pidfile: Path | str, *, pdeathsig: bool = True) -> list[str]:
    """The argv that runs ``command`` through the PDEATHSIG launcher.

    Args:
        command: the server command, ``[executable, *args]``.
        pidfile: where the launcher writes the server's pid (one integer).
        pdeathsig: set ``PR_SET_PDEATHSIG=SIGKILL`` (Linux only; ignored elsewhere).

    Returns:
        ``[sys.executable, "-I", "-S", <launcher.py>, flags..., "--", *command]``.
    """
    argv = [sys.executable, "-I", "-S", str(Path(__file__).resolve().with_name("launcher.py"))]
    if pdeathsig:
        argv += ["--pdeathsig", "--parent", str(os.getpid())]
    return [*argv, "--pidfile", str(pidfile), "--", *command]


@dataclass
class TrackedProcess:
    """A spawned server process, identified by pid and start time."""

    pid: int
    create_time: float | None = None
    label: str = ""
    _proc: object | None = field(default=None, repr=False)

    @classmethod
    def from_pidfile(cls, pidfile: Path, label: str = "") -> TrackedProcess | None:
        """Read a launcher pidfile; ``None`` if it is absent or empty."""
        try:
            pid = int(Path(pidfile).read_text().strip())
        except (OSError, ValueError):
            return None
        return cls.from_pid(pid, label)

    @classmethod
    def from_pid(cls, pid: int, label: str = "") -> TrackedProcess:
        """Track a pid; one that no longer exists is recorded as already dead."""
        import psutil

        try:
            proc = psutil.Process(pid)
            return cls(pid=pid, create_time=proc.create_time(), label=label, _proc=proc)
        except psutil.Error:
            return cls(pid=pid, label=label)

    def is_alive(self) -> bool:
        """True while the process runs and is not a zombie; never raises."""
        import psutil

        proc = self._proc
        if not isinstance(proc, psutil.Process):
            return False
        try:
            # is_running() compares create_time, so a recycled pid reads as dead.
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process's group (it leads one) or to the pid; never raises."""
        if not self.is_alive():
            return
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


async def wait_dead(procs: list[TrackedProcess], timeout_s: float) -> bool:
    """Poll until every process is dead or ``timeout_s`` passes. True if all dead.

    Polls with psutil rather than ``waitpid`` so the event loop's child
    watcher keeps the exit status of its own children.
    """
    deadline = time.monotonic() + timeout_s
    while any(p.is_alive() for p in procs):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


async def reap(
    procs: list[TrackedProcess], term_grace_s: float = 2.0, kill_wait_s: float = 1.0
) -> list[int]:
    """SIGTERM each live process group, wait up to ``term_grace_s``, then SIGKILL.

    Args:
        procs: processes to end; dead ones are skipped.
        term_grace_s: grace between SIGTERM and SIGKILL, seconds.
        kill_wait_s: how long to wait for SIGKILL to be observed, seconds.

    Returns:
        The pids still alive afterwards (normally empty; an unkillable process,
        e.g. in uninterruptible sleep, is logged). Never raises.
    """
    live = [p for p in procs if p.is_alive()]
    if not live:
        return []
    for proc in live:
        proc.signal_group(signal.SIGTERM)
    if not await wait_dead(live, term_grace_s):
        for proc in live:
            proc.signal_group(signal.SIGKILL)
        await wait_dead(live, kill_wait_s)
    survivors = [p.pid for p in live if p.is_alive()]
    if survivors:
        logger.warning("server processes %s survived SIGKILL", survivors)
    return survivors


def kill_now(procs: list[TrackedProcess]) -> None:
    """SIGKILL every live process group immediately (synchronous last resort)."""
    for proc in procs:
        proc.signal_group(signal.SIGKILL)


if __name__ == "__main__":  # ``python -m rewardbox.sandbox.reaper -- cmd...`` also launches
    from rewardbox.sandbox.launcher import main

    main(sys.argv[1:])
