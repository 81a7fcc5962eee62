"""A process's own peak memory and wall time, and handing freed heap memory back to the system.

Every Dagster step runs in its own process (``pipelines.definitions``: the multiprocess
executor), so the process's ``ru_maxrss`` at the end of a stage is that stage's peak resident
set; ``stage_usage`` reports it with the stage's wall time, and ``python -m pipelines.where``
prints both per stage at the end of ``make demo`` (docs/performance.md, "Memory").

glibc keeps freed blocks below its mmap threshold (which rises to 32 MiB as large blocks are
freed) in the heap, so a process's resident set stays at its peak after a large temporary
(issue 28 measured a GRPO update's process at 4.4 GiB after the update, 0.48 GiB after
``malloc_trim``); ``release_freed_memory`` returns them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
import time
from functools import cache
from typing import Any


def peak_rss_mib() -> float:
    """This process's peak resident set so far, MiB (``getrusage(RUSAGE_SELF).ru_maxrss``; KiB on Linux,
    bytes on macOS)."""
    return _mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def children_peak_rss_mib() -> float:
    """The largest peak resident set of this process's waited-for children (sandbox servers), MiB.

    An upper bound: Linux keeps the high-water mark of the address space an ``exec`` replaces in the
    new program's ``ru_maxrss``, so a child started by this process (``subprocess`` forks or vforks,
    then execs) reports at least this process's resident set at that moment.
    """
    return _mib(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def _mib(maxrss: int) -> float:
    return round(maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def stage_usage(started_s: float) -> dict[str, Any]:
    """A stage's metadata: ``wall_s`` since ``started_s`` (a ``time.perf_counter()``), ``peak_rss_mib`` of
    its process and ``children_peak_rss_mib`` (the largest child's, 0 when none was waited for); where
    this process ran a model, ``thread_teams``: the thread policy it applied (``rewardbox.threads``),
    e.g. ``"decode 2, wide 2 (measured, bfloat16 probe)"`` (``auto`` decides per start) or
    ``"decode 1, wide 1 (config)"``."""
    from rewardbox.threads import current_thread_policy

    usage = {
        "wall_s": round(time.perf_counter() - started_s, 1),
        "peak_rss_mib": peak_rss_mib(),
        "children_peak_rss_mib": children_peak_rss_mib(),
    }
    policy = current_thread_policy()
    if policy is not None:
        how = (
            f"measured, {policy.probe_dtype} probe"
            if policy.chosen_by == "measured"
            else policy.chosen_by
        )
        usage["thread_teams"] = f"decode {policy.threads}, wide {policy.wide_threads} ({how})"
    return usage


@cache
def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def release_freed_memory() -> bool:
    """Return the heap's free blocks to the system (glibc ``malloc_trim(0)``); False where there is none
    (musl, macOS). Costs milliseconds; call it after a large temporary (a GRPO update, a decode batch)."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim(0)
    return True


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def map_large_blocks(threshold_bytes: int = 1 << 20) -> bool:
    """Allocate every block of ``threshold_bytes`` or more with its own mmap, so freeing it returns it to
    the system at once (glibc ``mallopt(M_MMAP_THRESHOLD)``, as ``MALLOC_MMAP_THRESHOLD_`` would; it
    also stops the threshold rising to 32 MiB as large blocks are freed). False where there is no
    glibc. The model process calls it at start: its KV buffers and activations (MiBs per layer,
    every size) otherwise stay in the heap once freed; issue 28's probe campaign peaked at 6.3 GiB
    that way, 3.3 GiB with the threshold at 1 MiB (docs/performance.md)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)))
