"""Run benchmarks: ``python -m benchmarks [name ...]`` (``make bench`` runs them all).

Every module of this package with a ``run()`` function is a benchmark, named
after its module (no registration needed); they run in ``ORDER`` (the rows of
issue #13's table), then the rest alphabetically.

Result convention: ``run()`` (called with no arguments) returns a list of rows,
each a dict with these keys (``benchmarks.rows.row`` builds one)::

    row           str    the row's name, as in the issue's table
    value         float  today's figure (a median unless the name says otherwise)
    unit          str    "ms", "s", "tokens/s", "episodes/s", "GiB", ...
    anchor        float | None   the anchor / naive figure, same unit
    ratio         float | None   value / anchor
    load          str    1-minute load average / CPU count when measured, e.g. "0.52/2"
    anchor_label  str    optional: what the anchor is ("plain generate, this run")
    ok            bool | None    optional: False = the row misses its goal (make bench exits 1)
    goal          str    optional: the goal, with the figure it was judged on
    detail        dict   optional: anything else (kept in the JSON, not printed)

A benchmark that raises, or a row with ``ok`` False, prints a ``FAIL`` line and
makes the command exit with status 1; the other benchmarks still run. A legacy
``run()`` returning a dict is printed as one row without an anchor. The table is
printed at the end and the rows are written to ``benchmarks/results/<UTC time>.json``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.rows import load
from rewardbox import strict_json

ORDER = (
    "selection_pool",
    "report_metrics",
    "campaign_bookkeeping",
    "inprocess_episode",
    "sandbox_overhead",
    "floor",
    "generation",
    "grpo_step",
    "executor",
    "grading",
)
NOT_BENCHMARKS = {"__main__", "rows", "floor_model"}


def discover() -> dict[str, Callable[[], Any]]:
    """Every benchmark module's ``run``, by module name, in table order."""
    package = Path(__file__).parent
    names = [m.name for m in pkgutil.iter_modules([str(package)]) if m.name not in NOT_BENCHMARKS]
    rank = {name: i for i, name in enumerate(ORDER)}
    found = {}
    for name in sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n)):
        run = getattr(importlib.import_module(f"benchmarks.{name}"), "run", None)
        if callable(run):
            found[name] = run
    return found


def as_rows(name: str, result: Any) -> list[dict[str, Any]]:
    """A benchmark's result as rows; a legacy dict becomes one row with its JSON as detail."""
    if isinstance(result, list) and all(isinstance(r, dict) and "row" in r for r in result):
        return result
    return [
        {
            "row": name,
            "value": None,
            "unit": "",
            "anchor": None,
            "ratio": None,
            "load": load(),
            "detail": result,
        }
    ]


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if not isinstance(value, (int, float)):  # a row may carry a label instead of a number
        return f"{value} {unit}".strip()
    text = f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def table(rows: list[dict[str, Any]]) -> str:
    """The compact table: row, today, anchor, ratio, load, verdict."""
    header = ("row", "today", "anchor", "ratio", "load", "")
    lines = [header]
    for r in rows:
        verdict = {True: "ok", False: "FAIL", None: ""}[r.get("ok")]
        if r.get("goal"):
            verdict = f"{verdict} ({r['goal']})".strip()
        anchor = _fmt(r.get("anchor"), r.get("unit", ""))
        if r.get("anchor_label"):
            anchor += f" [{r['anchor_label']}]"
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
        lines.append(
            (
                r["row"],
                _fmt(r.get("value"), r.get("unit", "")),
                anchor,
                ratio,
                r.get("load", ""),
                verdict,
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths)) + "  " + line[-1] for line in lines
    )


def main(
    names: list[str],
    available: dict[str, Callable[[], Any]] | None = None,
    out_dir: Path | None = None,
) -> int:
    """Run the named benchmarks (all when none); returns the exit status (1 on any FAIL).

    Args:
        names: benchmark (module) names; empty runs every one.
        available: the benchmarks to choose from (default: ``discover()``).
        out_dir: where the JSON goes (default: ``benchmarks/results``).
    """
    available = discover() if available is None else available
    unknown = set(names) - set(available)
    if unknown:
        raise SystemExit(f"unknown benchmarks {sorted(unknown)}; choose from {sorted(available)}")
    rows: list[dict[str, Any]] = []
    status = 0
    for name in names or available:
        print(f"== {name} (load {load()})", flush=True)
        started = time.perf_counter()
        try:
            got = as_rows(name, available[name]())
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            traceback.print_exc()
            got = [
                {
                    "row": name,
                    "value": None,
                    "unit": "",
                    "anchor": None,
                    "ratio": None,
                    "load": load(),
                    "ok": False,
                    "goal": f"raised {type(exc).__name__}: {exc}",
                }
            ]
        for r in got:
            r.setdefault("benchmark", name)
            if r.get("ok") is False:
                status = 1
                print(f"FAIL {name}: {r['row']}: {r.get('goal', '')}", flush=True)
        print(f"   {name} took {time.perf_counter() - started:.0f} s", flush=True)
        rows.extend(got)
    print()
    print(table(rows))
    out = (
        out_dir or Path(__file__).parent / "results"
    ) / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(strict_json.dumps(rows, indent=2, default=str))
    print(f"results: {out}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
