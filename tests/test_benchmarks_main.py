"""``python -m benchmarks``: rows against anchors, a table, FAIL lines and the exit status."""

from __future__ import annotations

import json

from benchmarks.__main__ import as_rows, discover, main, table
from benchmarks.rows import row


def _raises():
    raise RuntimeError("no model")


def test_table_exit_status_and_json(tmp_path, capsys):
    available = {
        "fast": lambda: [row("fast path", 20.0, "ms", 25.0, "goal", ok=True, goal="< 25 ms")],
        "slow": lambda: [
            row("slow path", 30.0, "tokens/s", 60.0, "plain generate", ok=False, goal="x0.50")
        ],
        "legacy": lambda: {"median_ms": 1.0},
        "broken": _raises,
    }
    assert main([], available, out_dir=tmp_path) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL slow: slow path: x0.50" in out
        and "FAIL broken: broken: raised RuntimeError: no model" in out
    )
    assert "fast path" in out and "0.800" in out and "0.500" in out  # ratio = value / anchor
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert [r["row"] for r in saved] == ["fast path", "slow path", "legacy", "broken"]
    assert saved[2]["detail"] == {"median_ms": 1.0} and all("/" in r["load"] for r in saved)
    assert main(["fast"], available, out_dir=tmp_path) == 0


def test_rows_and_discovery():
    r = row("x", 3.0, "s", None)
    assert r["ratio"] is None and set(r) >= {"row", "value", "unit", "anchor", "ratio", "load"}
    assert as_rows("x", [r]) == [r]
    assert "-" in table([r]).splitlines()[1]
    assert {"sandbox_overhead", "generation", "grading"} <= set(discover())
