"""The thread policy, paired: idle and under a synthetic load (issue 28, "threads that never spin").

Each setup runs in a fresh process (OpenMP reads its wait policy once, when
torch loads) and times a decode-shaped workload in the dtype ``policy.dtype: auto``
picks: ``STEPS`` steps of 30 SmolLM2-135M layers for 8 rows at a 1,100-token
context (``rewardbox.threads.decode_layer_workload``: the seven matmuls and the
attention, the decode probe's workload), wall time and the process's CPU time per
step. Setups:

* ``product``: what every model process runs (``rewardbox.threads``: passive
  OpenMP waits, team size ``"auto"``, measured at start);
* ``default waits, 2 threads``: torch imported before rewardbox, so OpenMP
  keeps its default wait policy (libgomp spins a while at each barrier), with
  2 threads: the setting issue 28 measured at 5.5x the wall time under load;
* ``passive, 2 threads`` and ``passive, 1 thread``.

Each setup runs idle (whatever else the machine runs: the load is printed) and
then with ``usable_cores()`` synthetic busy processes (pure-Python loops) started
next to it, the descheduling a shared machine causes. Rows: per setup and
condition, ms per step against the ``default waits, 2 threads`` figure of the same
condition (ratio < 1: faster than spinning); CPU seconds per step in ``detail``.
Sizes: ``REWARDBOX_BENCH_THREADS_STEPS`` (default 20; the default-waits setup under load
takes seconds per step on a 2-core machine).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

from benchmarks.rows import row
from rewardbox import strict_json

STEPS = int(os.environ.get("REWARDBOX_BENCH_THREADS_STEPS", "20"))
ANCHOR = "default waits, 2 threads"
SETUPS = {  # name -> (import torch first: OpenMP keeps its default waits, team size for apply_thread_policy)
    "product": (False, "auto"),
    ANCHOR: (True, 2),
    "passive, 2 threads": (False, 2),
    "passive, 1 thread": (False, 1),
}
CHILD = """
import sys, time
if sys.argv[3] == "torch-first":
    import torch  # OpenMP loads with its default wait policy
import rewardbox  # otherwise: sets the passive-wait environment before torch loads
import torch
from rewardbox import strict_json
from rewardbox.policy.precision import resolve_dtype
from rewardbox.threads import apply_thread_policy, decode_layer_workload
threads = sys.argv[2] if sys.argv[2] == "auto" else int(sys.argv[2])
dtype = resolve_dtype("auto")
policy = apply_thread_policy(threads, dtype)
layer = decode_layer_workload(dtype)
steps = int(sys.argv[1])
with torch.inference_mode():
    for _ in range(30):
        layer()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        for _ in range(30):
            layer()
print(strict_json.dumps({"wall_s": (time.perf_counter() - wall) / steps, "cpu_s": (time.process_time() - cpu) / steps,
                  "threads": policy.threads, "wait_policy_applied": policy.wait_policy_applied,
                  "dtype": str(dtype).replace("torch.", "")}))
"""


def _busy(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def measure(setup: str, steps: int = STEPS) -> dict:
    """One setup in a fresh process: ``{wall_s, cpu_s}`` per step and the team size it ran."""
    torch_first, threads = SETUPS[setup]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")
    }
    order = "torch-first" if torch_first else "rewardbox-first"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps), str(threads), order],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return strict_json.loads(done.stdout.strip().splitlines()[-1])


def paired(loaded: bool, steps: int = STEPS) -> dict[str, dict]:
    """Every setup once, with ``usable_cores()`` busy processes running beside it when ``loaded``."""
    from rewardbox.threads import usable_cores

    busy = []
    if loaded:
        stop_at = time.monotonic() + 3600
        busy = [
            multiprocessing.Process(target=_busy, args=(stop_at,), daemon=True)
            for _ in range(usable_cores())
        ]
        for process in busy:
            process.start()
    try:
        return {setup: measure(setup, steps) for setup in SETUPS}
    finally:
        for process in busy:
            process.terminate()
            process.join()


def run() -> list[dict]:
    """Rows: ms per step of each setup, idle and loaded, against default waits with 2 threads."""
    rows = []
    for loaded in (False, True):
        condition = f"under {'a synthetic load' if loaded else 'no added load'}"
        figures = paired(loaded)
        anchor = figures[ANCHOR]["wall_s"] * 1e3
        for setup, figure in figures.items():
            rows.append(
                row(
                    f"decode-shaped step ({figure['dtype']}), {setup} ({figure['threads']} threads), {condition}",
                    figure["wall_s"] * 1e3,
                    "ms",
                    anchor,
                    f"{ANCHOR}, same condition",
                    detail={
                        "cpu_ms_per_step": figure["cpu_s"] * 1e3,
                        "loaded": loaded,
                        "wait_policy_applied": figure["wait_policy_applied"],
                    },
                )
            )
    return rows


if __name__ == "__main__":
    for r in run():
        print(
            f"{r['row']}: {r['value']:.2f} ms (ratio {r['ratio']:.2f}; "
            f"CPU {r['detail']['cpu_ms_per_step']:.2f} ms/step; load {r['load']})"
        )
