"""Run benchmarks: ``python -m benchmarks [sandbox_overhead] [grading] [generation] [grpo_step]``."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import generation, grading, grpo_step, sandbox_overhead

BENCHMARKS = {"sandbox_overhead": sandbox_overhead.run, "grading": grading.run, "generation": generation.run,
              "grpo_step": grpo_step.run}


def main(names: list[str]) -> None:
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        raise SystemExit(f"unknown benchmarks {sorted(unknown)}; choose from {sorted(BENCHMARKS)}")
    results = {name: BENCHMARKS[name]() for name in names or BENCHMARKS}
    out = Path(__file__).parent / "results" / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
