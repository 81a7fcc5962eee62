"""PDEATHSIG launcher: the first thing a spawned tool server runs (stdlib only).

``python -I -S launcher.py [--pdeathsig --parent PID] [--pidfile F] -- cmd args...``

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): the kernel SIGKILLs this
   process when the thread that forked it dies, even by SIGKILL, so a server
   never outlives the episode worker. If the parent already died before the
   prctl took effect (``getppid() != PID``), exit at once.
2. Write ``os.getpid()`` to the pidfile: after step 3 that pid *is* the server.
3. ``execvp`` the command (PDEATHSIG survives exec, except for setuid binaries).

It imports only ``os``, ``sys`` and ``signal`` (``ctypes`` on Linux) so it adds
tens of milliseconds, not an interpreter's worth of imports. Spawn it through
:func:`rewardbox.sandbox.reaper.launcher_argv`.
"""

import os
import signal
import sys

PR_SET_PDEATHSIG = 1
USAGE = "usage: launcher.py [--pdeathsig --parent PID] [--pidfile F] -- cmd args...\n"


def set_pdeathsig(parent: int | None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(err))
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # orphaned before the prctl took effect


def main(argv: list[str]) -> None:
    """Parse the flags, arm PDEATHSIG, write the pidfile, exec the command."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write(USAGE)
        os._exit(2)
    split = argv.index("--")
    flags, command = argv[:split], argv[split + 1 :]
    parent = int(flags[flags.index("--parent") + 1]) if "--parent" in flags else None
    if "--pdeathsig" in flags:
        set_pdeathsig(parent)
    if "--pidfile" in flags:
        with open(flags[flags.index("--pidfile") + 1], "w") as fh:
            fh.write(str(os.getpid()))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write("launcher: cannot exec %r: %s\n" % (command[0], exc))
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
