"""Template (zygote) process of one stdio tool server (stdlib only; run by the server's own interpreter).

``python [flags] zygote.py --socket PATH -- (-m MODULE | SCRIPT) [args...]``

1. Runs the server as ``python -m MODULE`` / ``python SCRIPT`` would (``runpy``, ``__name__ ==
   "__main__"``, ``sys.argv`` and ``sys.path[0]`` as the interpreter sets them), with ``asyncio.run``
   and ``anyio.run`` hooked: the first call to either is the moment the server has imported
   everything, built its tools and indexes, and is about to serve.
2. There it checks that it can be forked safely: one thread only (``/proc/self/task``), no open
   socket but its own listener, no regular file open for writing (a database every child would
   share). If not, it reports ``unforkable <reason>`` and exits (the parent then spawns fresh processes). Otherwise it reports ``ready`` and answers fork requests on the Unix
   socket ``PATH``: each request carries three file descriptors (the episode's stdin, stdout, stderr,
   sent with ``SCM_RIGHTS`` by ``attach.py``, the message is the episode's pidfile); the template forks a child, which makes them its fds
   0/1/2, writes its pid to the pidfile, starts its own session, arms PDEATHSIG, reseeds ``random`` (and numpy's global RNG) and returns into the real
   ``run``: it serves that one episode over the new pipes. The reply is the child's pid.

Status lines go to the original stdout, prefixed ``rewardbox-template:``; the server's own stdout
writes before serving go to ``/dev/null`` (stdout is the MCP channel, never free text). See
``rewardbox.sandbox.template`` for the parent side.
"""

import os
import runpy
import signal
import socket
import sys

MARK = "rewardbox-template:"
PR_SET_PDEATHSIG = 1
_STATE = {"status_fd": -1, "forked": False}


def _status(line):
    os.write(_STATE["status_fd"], (MARK + line + "\n").encode())


def _unforkable_reason(listener_fd):
    """Why forking this process now would be unsafe, or None."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return "cannot count threads (/proc/self/task unreadable)"
    if threads > 1:
        hint = (
            "; numpy's OpenBLAS starts its threads at import: OPENBLAS_NUM_THREADS=1 in the server's env "
            "avoids them"
            if "numpy" in sys.modules
            else ""
        )
        return "%d threads are running before the server serves (started at import)%s" % (
            threads,
            hint,
        )
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if link.startswith("socket:") and int(name) != listener_fd:
            return "an open socket (fd %s) before the server serves" % name
        if int(name) > 2 and int(name) != _STATE["status_fd"] and _shared_write(name, link):
            return (
                "a file open for writing (fd %s, %s) before the server serves: every child would share it"
                % (name, link)
            )
    return None


def _shared_write(fd_name, link):
    """True for a regular file opened for writing without O_APPEND (e.g. a SQLite database opened at
    import: forked children would write one file, where fresh processes each have their own)."""
    if not link.startswith("/") or link.startswith("/dev/"):
        return False
    try:
        with open("/proc/self/fdinfo/" + fd_name) as fh:
            flags = int(next(line for line in fh if line.startswith("flags:")).split()[1], 8)
    except (OSError, StopIteration, ValueError):
        return False
    return bool(flags & (os.O_WRONLY | os.O_RDWR)) and not flags & os.O_APPEND


def _become_child(fds, pidfile, template_pid):
    """In the forked child: the episode's pipes as fds 0/1/2, own session, dies with the template."""
    with open(pidfile, "w") as fh:
        fh.write(
            str(os.getpid())
        )  # before serving: the episode tracks this pid from its first reply
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != template_pid:
            os._exit(1)  # the template died before PDEATHSIG was armed: no orphan serves on
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.close(_STATE["status_fd"])
    if "random" in sys.modules:
        sys.modules["random"].seed()  # a fresh process seeds from the OS; so does each child
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()  # numpy's global RNG too (seed() draws from the OS)
    _STATE["forked"] = True


def _serve(listener):
    """Answer fork requests until killed; returns only in a forked child."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                message, fds, _, _ = socket.recv_fds(conn, 4096, 3)
            except OSError:
                continue
            if len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                continue
            template_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                listener.close()
                _become_child(fds, message.decode(), template_pid)
                return
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(str(pid).encode())
            except OSError:
                pass


def _hook(listener):
    """Make the first ``asyncio.run``/``anyio.run`` call the fork point."""
    import asyncio

    targets = [(asyncio, "run", asyncio.run)]
    try:
        import anyio

        targets.append((anyio, "run", anyio.run))
    except ImportError:
        pass

    def fork_point():
        for module, name, real in targets:
            setattr(module, name, real)
        reason = _unforkable_reason(listener.fileno())
        if reason:
            _status("unforkable " + reason)
            os._exit(3)
        sys.stdout.flush()
        sys.stderr.flush()
        _status("ready")
        _serve(listener)

    def wrap(real):
        def hooked(*args, **kwargs):
            fork_point()
            return real(*args, **kwargs)

        return hooked

    for module, name, real in targets:
        setattr(module, name, wrap(real))


def main(argv):
    """Parse ``--socket PATH -- target``, then run the server up to its fork point."""
    split = argv.index("--")
    flags, target = argv[:split], argv[split + 1 :]
    del sys.path[0]  # this file's directory must not shadow the server's modules
    _STATE["status_fd"] = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(flags[flags.index("--socket") + 1])
    listener.listen(64)
    _hook(listener)
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(target)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))
        runpy.run_path(target[0], run_name="__main__")
    if not _STATE["forked"]:
        _status(
            "unforkable the server ended without calling asyncio.run or anyio.run (not an SDK stdio server)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
