"""The Dagster UI in a real browser: the band histogram and the report chart are visible without a click.

A tiny materialisation (``tests/ui/ui_definitions.py``: the ``test`` profile, scripted policies) goes into a
temporary Dagster instance; ``dagster-webserver`` serves it; headless Chromium (Debian's package, installed by
``make test`` through ``scripts/install_chromium.sh``) opens each asset's page at 1600 x 1400 and the test
reads the rendered page: the chart is an ``<img>`` that loaded, inside the window, not a "[Show Markdown]"
button; the per-domain report tables and the band table fit their column with no cell wrapped.
Screenshots are saved under the test's temporary directory (the path is printed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.ui.browser import Browser, find_chromium

REPO = Path(__file__).resolve().parents[2]

FACTS_JS = """
((keys) => {
  const out = {};
  for (const td of document.querySelectorAll('tr > td:first-child')) {
    const key = td.innerText.trim();
    if (!keys.includes(key) && !key.startsWith('per_domain')) continue;
    const cell = td.parentElement.lastElementChild, box = cell.getBoundingClientRect();
    const img = cell.querySelector('img'), table = cell.querySelector('table');
    const fact = {text: cell.innerText.slice(0, 200), cellRight: box.right, windowWidth: window.innerWidth};
    if (img) {
      const r = img.getBoundingClientRect();
      Object.assign(fact, {img: img.getAttribute('src').slice(0, 40), loaded: img.complete && img.naturalWidth > 0,
                           width: r.width, height: r.height, right: r.right});
    }
    if (table) {
      const cells = [...table.querySelectorAll('td, th')].map(c => c.getBoundingClientRect().height);
      Object.assign(fact, {cells: cells.length, minHeight: Math.min(...cells), maxHeight: Math.max(...cells),
                           tableRight: table.getBoundingClientRect().right,
                           columns: [...table.querySelectorAll('th')].map(th => th.innerText.trim())});
    }
    out[key] = fact;
  }
  return out;
})(%s)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip(
            "no chromium on PATH: `make test` installs Debian's package (scripts/install_chromium.sh, "
            "needs root and apt); install it to run the browser test"
        )
    return path


@pytest.fixture(scope="module")
def ui(tmp_path_factory, chromium):
    """A materialised instance served by dagster-webserver; yields ``(base_url, browser, shots_dir)``."""
    import dagster as dg

    from tests.ui.ui_definitions import ui_assets, ui_resources

    root = tmp_path_factory.mktemp("dagster_ui")
    home, data, shots = root / "home", root / "data", root / "screenshots"
    for path in (home, data, shots):
        path.mkdir()
    # no "join the community" dialog over the page, no telemetry
    (home / "dagster.yaml").write_text("nux:\n  enabled: false\ntelemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "REWARDBOX_UI_DATA": str(data),
        "PYTHONPATH": str(REPO),
    }
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert dg.materialize(
            ui_assets(), resources=ui_resources(str(data)), instance=instance
        ).success
    port = _free_port()
    log = (root / "webserver.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagster_webserver",
            "-f",
            str(REPO / "tests/ui/ui_definitions.py"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    browser = None
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            try:
                if httpx.get(f"{url}/server_info", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (
                root / "webserver.log"
            ).read_text()
            time.sleep(1)
        browser = Browser(chromium, root / "chromium")
        yield url, browser, shots
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        print(f"screenshots: {shots}")


def _page_facts(ui, asset: str, keys: list[str], chart: str) -> dict:
    """The facts of ``keys`` once the page shows them and ``chart`` has an image that loaded (or 90 s passed:
    the UI renders markdown with a lazily loaded component, so the image comes after the text)."""
    url, browser, shots = ui
    ready = f"!!document.body && document.body.innerText.includes({keys[-1]!r})"
    browser.open(f"{url}/assets/{asset}", ready)
    deadline = time.monotonic() + 90
    while True:
        facts = browser.evaluate(FACTS_JS % keys)
        if facts.get(chart, {}).get("loaded") or time.monotonic() > deadline:
            break
        time.sleep(1)
    browser.screenshot(shots / f"{asset}.png")
    assert (shots / f"{asset}.png").stat().st_size > 10_000
    return facts


def _assert_chart_in_place(fact: dict, what: str) -> None:
    assert "[Show Markdown]" not in fact["text"], f"{what} hides behind a button: {fact}"
    assert fact.get("img", "").startswith("data:image/svg+xml;base64,"), fact
    assert fact["loaded"] and fact["width"] > 100 and fact["height"] > 50, (
        f"{what} did not render: {fact}"
    )
    assert fact["right"] <= fact["windowWidth"], f"{what} runs past the window: {fact}"


def _assert_table_fits(fact: dict, what: str) -> None:
    assert fact["cells"] > 0, fact
    assert fact["maxHeight"] < 1.5 * fact["minHeight"], (
        f"{what}: a cell wraps onto a second line: {fact}"
    )
    assert fact["tableRight"] <= fact["cellRight"] + 1, f"{what}: wider than its column: {fact}"


def test_the_band_histogram_is_visible_without_a_click(ui):
    facts = _page_facts(ui, "task_difficulty", ["band_histogram", "band_plot"], "band_plot")
    _assert_chart_in_place(facts["band_plot"], "band_plot")
    bands = facts["band_histogram"]
    assert bands["columns"][:2] == ["band", "tasks"], bands
    _assert_table_fits(bands, "band_histogram")


def test_the_report_chart_and_per_domain_tables_are_visible_without_a_click(ui):
    tables = [
        "per_domain pass@1",
        "per_domain pass@1 change",
        "per_domain pass@2",
        "per_domain pass^2",
    ]
    facts = _page_facts(ui, "reliability_report", ["plot", *tables], "plot")
    _assert_chart_in_place(facts["plot"], "plot")
    for key in tables:
        _assert_table_fits(facts[key], key)
    cost = next((k for k in facts if k.startswith("per_domain cost")), None)
    if cost is not None:
        _assert_table_fits(facts[cost], cost)
