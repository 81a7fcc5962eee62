"""A stage's peak memory and wall time (rewardbox.process_memory), as its asset metadata records them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rewardbox.process_memory import (
    children_peak_rss_mib,
    peak_rss_mib,
    release_freed_memory,
    stage_usage,
)


def test_stage_usage_reports_wall_time_and_this_processs_peak(monkeypatch):
    from rewardbox import threads
    from rewardbox.threads import ThreadPolicy

    monkeypatch.setattr(threads, "_APPLIED", None)
    started = time.perf_counter() - 2.0
    usage = stage_usage(started)
    assert set(usage) == {"wall_s", "peak_rss_mib", "children_peak_rss_mib"}
    # a process that ran a model records the thread teams auto chose at its start
    policy = ThreadPolicy(2, "PASSIVE", True, "measured", {1: 0.02, 2: 0.012}, 2, {}, "bfloat16")
    monkeypatch.setattr(threads, "_APPLIED", policy)
    assert stage_usage(started)["thread_teams"] == "decode 2, wide 2 (measured, bfloat16 probe)"
    fixed = ThreadPolicy(1, "PASSIVE", True, "config", {}, 1)  # nothing was probed: no dtype shown
    monkeypatch.setattr(threads, "_APPLIED", fixed)
    assert stage_usage(started)["thread_teams"] == "decode 1, wide 1 (config)"
    assert 2.0 <= usage["wall_s"] < 60
    assert usage["peak_rss_mib"] >= peak_rss_mib() - 1 > 10  # a Python process with torch around


def test_peak_rss_sees_a_large_temporary_and_trimming_returns_freed_memory():
    code = (
        "from rewardbox.process_memory import peak_rss_mib, release_freed_memory\n"
        "before = peak_rss_mib()\n"
        'blocks = [b"x" * (1 << 20) for _ in range(300)]\n'  # 300 MiB, every page written
        "del blocks\n"
        "print(peak_rss_mib() - before, release_freed_memory())\n"
    )
    # Through an intermediate interpreter: a child exec'd by this (large) pytest process inherits its
    # high-water mark in ``ru_maxrss`` (see ``children_peak_rss_mib``), which would hide the 300 MiB.
    hop = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}], check=True)"
    out = subprocess.run([sys.executable, "-c", hop], capture_output=True, text=True, check=True)
    grew, trimmed = out.stdout.split()
    assert float(grew) >= 250
    assert trimmed == "True" or sys.platform != "linux"
    assert children_peak_rss_mib() >= 250  # the children were waited for


def test_a_child_exec_d_by_a_large_process_inherits_its_high_water_mark():
    """Why ``children_peak_rss_mib`` is an upper bound (docs/performance.md, "Memory")."""
    block = bytearray(400 << 20)
    block[:: 1 << 12] = b"x" * len(block[:: 1 << 12])  # every page written
    code = "from rewardbox.process_memory import peak_rss_mib; print(peak_rss_mib())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    del block
    if sys.platform == "linux":
        assert float(out.stdout) >= 400
    assert release_freed_memory() in (True, False)


_FRAGMENTS = (
    "import sys, psutil, torch\n"
    "from rewardbox.process_memory import map_large_blocks\n"
    "if sys.argv[1] == '1':\n"
    "    assert map_large_blocks()\n"
    "rss = lambda: psutil.Process().memory_info().rss / 2**20\n"
    "big = torch.ones(4 << 20); del big\n"  # a freed 16 MiB block: glibc's threshold rises
    "before = rss()\n"
    "blocks, pins = [], []\n"
    "for i in range(300):\n"
    "    blocks.append(torch.ones(256 * 1024 + i))\n"  # ~1 MiB each, like a KV layer buffer
    "    pins.append(torch.ones(2048))\n"  # small live blocks between them
    "held = rss()\n"
    "del blocks\n"
    "print(held - before, rss() - before)\n"
)


@pytest.mark.parametrize("mapped", [False, True])
def test_large_blocks_mapped_on_their_own_go_back_to_the_system_when_freed(mapped):
    """``map_large_blocks`` (the local policy calls it at start): 300 freed ~1 MiB tensors between
    small live ones stay resident without it (glibc's heap) and go back with it."""
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTS, "1" if mapped else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    held, after = (float(x) for x in out.stdout.split())
    assert held > 250
    assert (after < 50) if mapped else (after > 250)
