"""Headless Chromium driven over the Chrome DevTools Protocol (a WebSocket; no Selenium, no Playwright).

``Browser`` starts Debian's ``chromium`` with ``--remote-debugging-port=0``, attaches to its page and offers
three calls: ``open(url, ready_js)`` (navigate, then wait until a JavaScript condition holds),
``evaluate(js)`` (a JSON-able value back) and ``screenshot(path)`` (the full page as PNG).
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The path of a Chromium executable on PATH, or None."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class Browser:
    """One headless Chromium with one page, ``width`` x ``height`` CSS pixels at device scale 1."""

    def __init__(
        self, executable: str, profile_dir: Path, width: int = 1600, height: int = 1400
    ) -> None:
        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile_dir}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._ids = itertools.count(1)
        port = self._devtools_port()
        page = next(
            t
            for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            if t["type"] == "page"
        )
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _devtools_port(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if match := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                return int(match.group(1))
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"chromium did not open its DevTools port (exit {self.process.poll()})")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One CDP command; its ``result`` (events in between are skipped)."""
        call_id = next(self._ids)
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=120))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able; promises awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, ready_js: str, timeout_s: float = 180) -> None:
        """Navigate to ``url`` and wait until ``ready_js`` is truthy (the app has fetched and rendered)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(ready_js):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: not ready after {timeout_s:.0f} s ({ready_js})")
            time.sleep(1)

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the viewport) as a PNG file."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
