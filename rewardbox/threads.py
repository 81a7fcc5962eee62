"""Thread policy of every process that runs the model: passive OpenMP waits, a measured thread count.

Torch's CPU kernels run on an OpenMP team (``torch.__config__.parallel_info()``:
"ATen parallel backend: OpenMP", GNU libgomp in the pip wheels). By default a
libgomp thread that reaches a barrier first spins for its partner; on a shared
2-core machine the partner is often descheduled, so the spinning thread burns
its core for nothing (issue 28 measured 5.9x the CPU per decoded token with 2
threads against 1 on a loaded machine, tokens identical). Two decisions fix it:

1. **Wait policy** (``WAIT_POLICY_ENV``): ``OMP_WAIT_POLICY=PASSIVE`` (libgomp and
   LLVM/Intel OpenMP: a waiting thread sleeps at once), ``GOMP_SPINCOUNT=0`` and
   ``KMP_BLOCKTIME=0``. OpenMP reads them once, when its library loads (``import
   torch``), so ``rewardbox/__init__.py`` sets them (``setdefault``: a user's own
   value wins) before any rewardbox module imports torch. A process that imported
   torch before rewardbox keeps its runtime's defaults; ``ThreadPolicy.wait_policy_applied``
   says so and a warning is logged.
2. **Thread count** (``apply_thread_policy``): a fixed ``int`` from the config, or
   ``"auto"``: measured at start, the team size among ``1 .. usable cores`` that
   runs a decode step fastest (more threads only when >= 15% faster,
   ``MIN_GAIN``); team sizes 1, 2, 4, ... and the core count (``candidate_team_sizes``),
   about 0.7 s in all on 2 cores, the wide probe included. The decode probe is one layer of a decode step
   (``decode_layer_workload``): SmolLM2-135M's seven matmuls for 8 rows and their
   attention over 1,100 cached keys (1,000 of them a shared prefix, as the policy decodes the
   demo's rows), in the model's dtype. A first probe timed the
   matmuls alone, where a second thread barely pays for its wake-up, and kept one
   thread; but at a 1,100-token context the attention is most of a decode step, and
   it nearly halves on two cores (a bf16 decode step of 8 rows on the idle 2-core
   machine: 97 ms on one thread, 61 ms on two; docs/performance.md, "Threads").
   Under load the probe sees the descheduled partner and keeps one (the same step
   took 100 ms on one thread and 200 ms on two with one busy process beside it).
   Inter-op threads are 1 (the policy runs one model call at a time).
3. **Wide calls** (``wide_team``): a prefill of hundreds of tokens or the training
   update multiplies hundreds of rows, where a second core nearly halves the time
   even when a decode step does not gain enough. ``"auto"`` therefore also times a
   prefill-shaped matmul (``WIDE_ROWS`` rows) and keeps its own team size for those
   calls (``ThreadPolicy.wide_threads``); the policy's prefill calls and the GRPO
   update run inside ``wide_team()``, decode steps with ``threads``.

Grading workers (``rewardbox.grading.testrunner``) are processes of their own
started with ``single_thread_env()`` (1 OpenMP/BLAS thread, passive waits), so
the model's team and the graders never stack more runnable threads than their
work needs, and a model thread waiting on a descheduled partner sleeps instead of
spinning. See docs/performance.md, "Threads".
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

WAIT_POLICY_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0", "KMP_BLOCKTIME": "0"}
"""Environment that makes every OpenMP runtime torch may load wait passively."""

MIN_GAIN = 1.15
"""``"auto"`` takes a larger team only when it runs the probe at least this much faster."""

WIDE_ROWS = 1024
"""Rows of the wide probe matmul (a prefill chunk or an update micro-batch, against 8 for a decode step)."""

_WAIT_POLICY_BEFORE_TORCH: bool | None = None


@dataclass(frozen=True)
class ThreadPolicy:
    """The policy applied to this process.

    Attributes:
        threads: torch intra-op threads (``torch.get_num_threads()`` after applying).
        wait_policy: ``OMP_WAIT_POLICY`` as set in the environment.
        wait_policy_applied: True when the environment was set before torch loaded OpenMP.
        chosen_by: ``"config"`` (a fixed count), ``"measured"`` (``"auto"``), ``"environment"``
            (``"auto"`` with ``OMP_NUM_THREADS`` set: the user's count, torch's reading of it, wins)
            or ``"unchanged"`` (None).
        probe_s: seconds of the decode probe per candidate team size (``"auto"`` only).
        wide_threads: team size for wide calls (prefill, the update; ``wide_team``): measured with
            ``WIDE_ROWS``-row matmuls under ``"auto"``, else ``threads``.
        wide_probe_s: seconds per wide probe per candidate team size (``"auto"`` only).
        probe_dtype: the decode probe's dtype (the model's, as the caller passed it).
        probe_shared: whether the decode probe kept the first ``DECODE_SHAPE["shared"]`` keys as one
            prefix for its rows (the caller's ``policy.shared_prefix``), or a copy per row.
    """

    threads: int
    wait_policy: str
    wait_policy_applied: bool
    chosen_by: str
    probe_s: dict[int, float]
    wide_threads: int = 0
    wide_probe_s: dict[int, float] = field(default_factory=dict)
    probe_dtype: str = "float32"
    probe_shared: bool = True


_APPLIED: ThreadPolicy | None = None


def set_wait_policy_env() -> bool:
    """Put ``WAIT_POLICY_ENV`` into ``os.environ`` (existing values win); True when torch was not loaded yet."""
    global _WAIT_POLICY_BEFORE_TORCH
    for key, value in WAIT_POLICY_ENV.items():
        os.environ.setdefault(key, value)
    if _WAIT_POLICY_BEFORE_TORCH is None:
        _WAIT_POLICY_BEFORE_TORCH = "torch" not in sys.modules
    return _WAIT_POLICY_BEFORE_TORCH


def single_thread_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a worker process that must not compete with the model: 1 thread, passive waits."""
    env = dict(os.environ if base is None else base)
    env.update(WAIT_POLICY_ENV)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    return env


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask), >= 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def candidate_team_sizes(cores: int) -> list[int]:
    """Team sizes ``"auto"`` times: powers of two below ``cores``, then ``cores`` (1, 2, 4, ..., cores), so
    the start-up probe grows with log2(cores), not with the core count (128 cores: 8 probes, not 128)."""
    sizes, n = [], 1
    while n < cores:
        sizes.append(n)
        n *= 2
    return sizes + [max(1, cores)]


DECODE_SHAPE = {
    "rows": 8,
    "hidden": 576,
    "intermediate": 1536,
    "heads": 9,
    "kv_heads": 3,
    "head_dim": 64,
    "keys": 1100,
    "shared": 1000,
}
"""The decode probe's sizes: SmolLM2-135M (the embedded default) decoding 8 rows at a 1,100-token
context, the mean prompt of the demo's episodes (issue 28 measured 1,124 tokens), of which the first
``shared`` are a prefix the rows share (their domain's), kept once (``policy.attention``)."""


def decode_layer_workload(dtype=None, shape: dict[str, int] | None = None):
    """A callable running one transformer layer of a decode step on random tensors (no model needed).

    Per call: the q/k/v/o projections and the gated MLP's three matmuls for ``rows`` rows
    (``F.linear``, ``[rows, hidden]``), and attention of those rows over ``keys`` cached positions as
    the local policy runs it: the first ``shared`` of them a prefix kept once for the rows
    (``policy.attention.shared_prefix_attention``), the rest each row's own, with a boolean mask;
    with ``shared: 0``, ``F.scaled_dot_product_attention`` over all of them, the query heads grouped
    by key/value head (``[rows, kv_heads, heads / kv_heads, head_dim]`` queries against ``[rows,
    kv_heads, keys, head_dim]`` keys and values: how transformers runs a one-position step of a
    grouped-query model). Args: ``dtype`` (None: float32), ``shape`` (None: ``DECODE_SHAPE``).
    """
    import torch
    import torch.nn.functional as F

    dtype = dtype or torch.float32
    d = {**DECODE_SHAPE, **(shape or {})}
    rows, hidden, inter = d["rows"], d["hidden"], d["intermediate"]
    kv, group, hd = d["kv_heads"], d["heads"] // d["kv_heads"], d["head_dim"]
    shared, own = d["shared"], d["keys"] - d["shared"]
    gen = torch.Generator().manual_seed(0)

    def randn(*size):
        return torch.randn(*size, generator=gen).to(dtype)

    x, mlp_in = randn(rows, hidden), randn(rows, inter)
    shapes = [(d["heads"] * hd, hidden), (kv * hd, hidden), (kv * hd, hidden), (hidden, hidden)]
    projections = [randn(*s) for s in shapes]
    gate, up, down = randn(inter, hidden), randn(inter, hidden), randn(hidden, inter)
    query = randn(rows, kv, group, hd)
    key, value = randn(rows, kv, own, hd), randn(rows, kv, own, hd)
    mask = torch.ones(rows, 1, 1, own, dtype=torch.bool)
    if shared:
        from types import SimpleNamespace

        from rewardbox.policy.attention import SharedPrefix, shared_prefix_attention

        layer0 = SimpleNamespace(keys=randn(1, kv, shared, hd), values=randn(1, kv, shared, hd))
        prefix = [SharedPrefix(tuple(range(shared)), SimpleNamespace(layers=[layer0]))]
        module, grouped = SimpleNamespace(layer_idx=0), query.reshape(rows, kv * group, 1, hd)

        def attend() -> None:
            shared_prefix_attention(module, grouped, key, value, mask, None, prefix)

    else:

        def attend() -> None:
            F.scaled_dot_product_attention(query, key, value, attn_mask=mask)

    def layer() -> None:
        for weight in projections:
            F.linear(x, weight)
        attend()
        F.linear(x, gate), F.linear(x, up), F.linear(mlp_in, down)

    return layer


def _probe_seconds(
    threads: int, repeats: int = 6, rows: int = 8, dtype=None, shared: bool = True
) -> float:
    """Best wall time, over ``repeats``, of a probe with ``threads``: for ``rows <= 8`` eight decode
    layers of ``rows`` rows (``decode_layer_workload`` in ``dtype``: about 20-30 ms for 8 rows on one
    core in bf16), else
    ``rows`` x 576 -> 1536 matmuls (SmolLM2-135M's MLP) for 2,048 rows in all, about 50 ms on one
    core (shorter wide probes flipped between 1 and 2 threads from one start to the next on a
    loaded machine). ``shared`` False times the decode layers with every key in each row's own
    columns (``policy.shared_prefix: false``)."""
    import torch

    torch.set_num_threads(threads)
    with torch.inference_mode():
        if rows <= 8:
            shape = {"rows": rows, "shared": DECODE_SHAPE["shared"] if shared else 0}
            layer, calls = decode_layer_workload(dtype, shape), 8
        else:
            x, w = torch.randn(rows, 576), torch.randn(576, 1536)
            calls = max(1, 2048 // rows)

            def layer() -> None:
                torch.mm(x, w)

        layer()  # first call: oneDNN primitive creation, not the team
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                layer()
            best = min(best, time.perf_counter() - t0)
    return best


def _fastest(probe: dict[int, float]) -> int:
    """The team size ``"auto"`` takes: a larger one only when ``MIN_GAIN`` times faster."""
    best = min(probe)
    for threads in sorted(probe):
        if probe[threads] * MIN_GAIN <= probe[best]:
            best = threads
    return best


@contextmanager
def wide_team() -> Iterator[None]:
    """Run the body (a prefill call, the training update) with the applied policy's ``wide_threads``,
    then restore the team size; a no-op when no policy was applied or the sizes are equal."""
    import torch

    size = _APPLIED.wide_threads if _APPLIED is not None else 0
    before = torch.get_num_threads()
    if not size or size == before:
        yield
        return
    torch.set_num_threads(size)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def apply_thread_policy(
    num_threads: int | str | None = "auto", dtype=None, shared_prefix: bool = True
) -> ThreadPolicy:
    """Apply the thread policy to this process and return it (also kept for ``current_thread_policy``).

    Args:
        num_threads: a team size >= 1, ``"auto"`` (measured, see the module doc; ``OMP_NUM_THREADS``
            set: that count), or None (torch's count; the wait policy still applies to children).
        dtype, shared_prefix: the model's dtype (None: float32) and ``policy.shared_prefix``, for the
            decode probe's kernels and layout (each changes what a second thread gains).

    Raises:
        ValueError: a count < 1 or an unknown string.
    """
    global _APPLIED
    import torch

    applied = set_wait_policy_env()
    if not applied:
        log.warning(
            "torch was imported before rewardbox: OpenMP keeps its default (spinning) wait policy "
            "in this process; import rewardbox first or set OMP_WAIT_POLICY=PASSIVE"
        )
    probe: dict[int, float] = {}
    wide_probe: dict[int, float] = {}
    if num_threads == "auto" and os.environ.get("OMP_NUM_THREADS", "").strip():
        # the user's OMP_NUM_THREADS (read by torch at load) is an explicit choice; "auto" is only the default
        count, chosen_by = torch.get_num_threads(), "environment"
    elif (
        num_threads == "auto"
    ):  # the probes are best-of-6 timings; MIN_GAIN keeps noise from flipping the choice
        for threads in candidate_team_sizes(usable_cores()):
            probe[threads] = _probe_seconds(threads, dtype=dtype, shared=shared_prefix)
            wide_probe[threads] = _probe_seconds(threads, rows=WIDE_ROWS)
        count, chosen_by = _fastest(probe), "measured"
    elif num_threads is None:
        count, chosen_by = torch.get_num_threads(), "unchanged"
    elif isinstance(num_threads, int) and num_threads >= 1:
        count, chosen_by = num_threads, "config"
    else:
        raise ValueError(f"num_threads must be an int >= 1, 'auto' or None, got {num_threads!r}")
    torch.set_num_threads(count)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or inter-op work already ran: keep it
        pass
    _APPLIED = ThreadPolicy(
        torch.get_num_threads(),
        os.environ.get("OMP_WAIT_POLICY", ""),
        applied,
        chosen_by,
        probe,
        _fastest(wide_probe) if wide_probe else torch.get_num_threads(),
        wide_probe,
        str(dtype or torch.float32).replace("torch.", ""),
        shared_prefix,
    )
    log.info("thread policy: %s", _APPLIED)
    return _APPLIED


def restore_thread_policy(policy: ThreadPolicy) -> None:
    """Make ``policy`` this process's applied policy again (its decode team on the calling thread, its
    wide team for ``wide_team``), e.g. after a ``LocalPolicy`` built later measured its own."""
    global _APPLIED
    import torch

    torch.set_num_threads(policy.threads)
    _APPLIED = policy


def current_thread_policy() -> ThreadPolicy | None:
    """The policy last applied in this process (None: never applied)."""
    return _APPLIED
