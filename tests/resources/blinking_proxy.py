"""A TCP forwarder to a real job server that can stop answering for a while: the dashboard "blinks".

Only for tests: every connection is forwarded to ``target`` while it is up; while it is down
every connection (open or new) is cut at once, as a lost route or a restarting dashboard does.
"""

from __future__ import annotations

import socket
import threading


class BlinkingProxy:
    """``http://127.0.0.1:<port>`` forwarding to ``target_host:target_port``; :meth:`down` / :meth:`up`."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.is_up, self.open, self.lock = True, [], threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def down(self) -> None:
        with self.lock:
            self.is_up = False
            for sock in self.open:
                _close(sock)
            self.open.clear()

    def up(self) -> None:
        with self.lock:
            self.is_up = True

    def close(self) -> None:
        self.down()
        _close(self.listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if not self.is_up:
                    _close(client)
                    continue
                try:
                    server = socket.create_connection(self.target, timeout=5)
                except OSError:
                    _close(client)
                    continue
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
