"""Grading throughput: one test run in the worker pool vs a fresh process per test (issue #3).

Baseline: ThinkingBox's ``TestScriptSubprocess`` starts a Python process per test,
about 0.35 s each on a 2-core machine (docs/thinkingbox.md, "Reference costs").
"""

from __future__ import annotations

import statistics
import time

from benchmarks.rows import row
from rewardbox.grading.testrunner import TestRunner

BASELINE_PER_TEST_S = 0.35
CODE = """
def validate_database(x):
    srv = x.effects["srv"]
    assert srv["result_db_hash"] == srv["golden_db_hash"], srv["diff"]

def test_case(x):
    validate_database(x)

__tb_test_fn = test_case
"""


def run(tests: int = 300) -> list[dict]:
    """Median per test in the warm worker pool; anchor: a fresh process per test (0.35 s)."""
    big_state = {
        "orders": [
            {"order_id": f"ORD-{i}", "status": "delivered", "total": i * 1.5} for i in range(2000)
        ]
    }
    context = {
        "response": "ok <DONE>",
        "messages": [],
        "tool_calls": [],
        "effects": {
            "srv": {
                "result_db_hash": "h",
                "golden_db_hash": "h",
                "diff": [],
                "initial_db_state": big_state,
                "result_db_state": big_state,
            }
        },
    }
    with TestRunner(max_workers=1, timeout_s=30) as runner:
        runner.run_code_sync(CODE, context)  # start the worker outside the timing
        times = []
        for _ in range(tests):
            t0 = time.perf_counter()
            outcome = runner.run_code_sync(CODE, context)
            times.append(time.perf_counter() - t0)
            assert outcome.result, outcome.message
    median_s = statistics.median(times)
    result = {
        "tests": tests,
        "median_ms": median_s * 1e3,
        "ratio_vs_subprocess_per_test": median_s / BASELINE_PER_TEST_S,
    }
    print(
        f"grading n={tests}: median {median_s * 1e3:.2f} ms per test; ratio vs a process per test (0.35 s): "
        f"{result['ratio_vs_subprocess_per_test']:.4f}"
    )
    return [
        row(
            "grading, one test in the worker pool (median)",
            median_s * 1e3,
            "ms",
            BASELINE_PER_TEST_S * 1e3,
            "a process per test",
            detail=result,
        )
    ]
