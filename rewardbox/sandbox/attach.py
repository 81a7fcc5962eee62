"""Hand this process's stdin/stdout/stderr to a child forked from a server template (stdlib only).

``python -I -S attach.py SOCKET PIDFILE``

The episode's stdio command when its server runs from a template (``rewardbox.sandbox.template``):
the MCP client spawns it with the episode's pipes and stderr log exactly as it would spawn the
server; it sends fds 0, 1, 2 to the template at ``SOCKET`` (``SCM_RIGHTS``), which forks a child
that serves on them and writes its own pid to ``PIDFILE`` before it serves (so the episode tracks
and reaps the server itself); this process exits once the fork is done. Only the child keeps the pipes open, so the client talks to the
server directly. Exit status 1 (and a line on stderr) when the template does not answer.
"""

import os
import socket
import sys


def main(argv):
    """Send fds 0/1/2 to the template, write the forked child's pid, exit."""
    path, pidfile = argv
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [os.fsencode(pidfile)], [0, 1, 2])
            pid = conn.recv(64).decode()
    except OSError as exc:
        sys.stderr.write("attach: the server template at %s did not answer: %s\n" % (path, exc))
        os._exit(1)
    if not pid.isdigit():
        sys.stderr.write("attach: the server template at %s did not fork\n" % path)
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
