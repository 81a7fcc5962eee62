"""Multi-turn episodes with and without each episode's own KV kept between turns (issue 28).

The demo's base evaluation, as it runs: the demo profile's benchmark tasks (embedded retail, hotel
and helpdesk) x ``trials``, real SmolLM2-135M fp32 weights, ``LocalPolicy`` with the demo's
``max_batch_size`` 16 and ``episode.concurrency`` 16, in-process MCP servers, the scripted user and
the grading workers. The same campaign runs with the episode KV store on (the default,
``episode_kv_mib`` 512) and off (``0``: every turn prefills all its prompt beyond the domain prefix,
as before), alternated ``repeats`` times in one process, each run from a cold prefix cache. Per run:
wall seconds, prompt columns prefilled (every forward call wider than one column, prefix-cache
computations included; counted by forward hooks) and the seconds those calls took, decode rows and
their seconds, and the episode store's largest size. Rows: the median ratios (on / off) of wall,
prefill columns and prefill seconds, with the load;
the detail says how many turns' completion tokens came out identical in both modes (same seeds).

Sizes: ``REWARDBOX_BENCH_EPISODE_KV="trials,repeats"`` (default ``3,2``: 18 episodes per run,
two runs per mode). Minutes per run on 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from benchmarks.rows import row

TRIALS, REPEATS = (int(x) for x in os.environ.get("REWARDBOX_BENCH_EPISODE_KV", "3,2").split(","))
ON_MIB = 512


class _Counter:
    """Forward calls of the policy's model: prefill columns (calls wider than 1), decode rows, and the
    seconds each kind took (a pre-hook and a post-hook on the model)."""

    def __init__(self) -> None:
        self.prefill_columns = self.decode_rows = self.prefill_calls = 0
        self.prefill_s = self.decode_s = 0.0
        self._started, self._prefill = 0.0, False

    def __call__(self, _module, _args, kwargs) -> None:
        rows, width = kwargs["input_ids"].shape
        self._prefill = width > 1
        if self._prefill:
            self.prefill_columns += rows * width
            self.prefill_calls += 1
        else:
            self.decode_rows += rows
        self._started = time.perf_counter()

    def done(self, _module, _args, _kwargs, _out) -> None:
        elapsed = time.perf_counter() - self._started
        if self._prefill:
            self.prefill_s += elapsed
        else:
            self.decode_s += elapsed


def counted_campaign(policy, profile, tasks, trials: int, on_completion) -> tuple:
    """Run one campaign of ``tasks`` x ``trials`` through ``policy`` with its forward calls counted.

    ``on_completion(request, completion)`` sees every turn. Returns ``(rows, counter, wall_s)``: the
    campaign's trial rows, the ``_Counter`` of its forward calls and its wall seconds.
    """
    from rewardbox.episode.run import run_trials_async
    from rewardbox.runtime.compose import campaign_parts

    counter, complete = _Counter(), policy.complete

    async def recording(request):
        completion = await complete(request)
        on_completion(request, completion)
        return completion

    policy.complete = recording
    hooks = [
        policy.model.register_forward_pre_hook(counter, with_kwargs=True),
        policy.model.register_forward_hook(counter.done, with_kwargs=True),
    ]
    start = time.perf_counter()
    try:
        rows, _ = asyncio.run(
            run_trials_async(
                tasks, trials, policy, campaign_parts(profile), keep_results=False, label="bench"
            )
        )
    finally:
        for hook in hooks:
            hook.remove()
        del policy.complete
    return rows, counter, time.perf_counter() - start


def _campaign(policy, profile, tasks, mib: int, trials: int = TRIALS) -> dict:
    """One campaign with the episode store's budget at ``mib``; its figures and completions."""
    with policy.generation_lock:
        policy.prefix_cache.invalidate()  # cold: both modes compute the domain prefixes once
        policy.prefix_cache.episodes.max_bytes = mib << 20
        policy.prefix_cache.episodes.peak_bytes = policy.prefix_cache.episodes.taken = 0
    completions = {}

    def record(request, completion):
        completions[request.sampling_seed] = completion.completion_token_ids

    rows, counter, wall_s = counted_campaign(policy, profile, tasks, trials, record)
    return {
        "wall_s": wall_s,
        "prefill_columns": counter.prefill_columns,
        "prefill_calls": counter.prefill_calls,
        "prefill_s": counter.prefill_s,
        "decode_s": counter.decode_s,
        "decode_rows": counter.decode_rows,
        "turns": len(completions),
        "episodes": rows.height,
        "passed": int(rows["passed"].fill_null(False).sum()),
        "system_errors": int(rows["system_error"].is_not_null().sum()),
        "input_tokens": int(rows["input_tokens"].sum()),
        "cached_input_tokens": int(rows["cached_input_tokens"].sum()),
        "episode_kv_peak_mib": policy.prefix_cache.episodes.peak_bytes / 2**20,
        "episode_kv_taken": policy.prefix_cache.episodes.taken,
        "load": os.getloadavg()[0],
        "completions": completions,
    }


def _setup(split: str = "benchmark"):
    from rewardbox.config.profile import load_profile
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    profile = load_profile("demo")
    load = load_benchmark if split == "benchmark" else load_candidates
    tasks = load(profile.tasks).tasks
    from benchmarks.precision import demo_policy  # precision imports this module at load

    policy = demo_policy(profile, episode_kv_mib=ON_MIB)
    return profile, tasks, policy


def run() -> list[dict]:
    profile, tasks, policy = _setup()
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    try:
        for repeat in range(REPEATS):
            for mode in ("off", "on") if repeat % 2 == 0 else ("on", "off"):
                runs[mode].append(_campaign(policy, profile, tasks, ON_MIB if mode == "on" else 0))
                print(mode, {k: v for k, v in runs[mode][-1].items() if k != "completions"})
    finally:
        asyncio.run(policy.aclose())
    same = sum(
        runs["on"][i]["completions"].get(seed) == tokens
        for i in range(REPEATS)
        for seed, tokens in runs["off"][i]["completions"].items()
    )
    total = sum(len(r["completions"]) for r in runs["off"])
    wall = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(runs["on"], runs["off"]))
    columns = statistics.median(
        a["prefill_columns"] / b["prefill_columns"] for a, b in zip(runs["on"], runs["off"])
    )
    detail = {
        mode: [{k: v for k, v in r.items() if k != "completions"} for r in rs]
        for mode, rs in runs.items()
    }
    detail |= {"turns_identical": same, "turns": total, "tasks": len(tasks), "trials": TRIALS}
    seconds = statistics.median(
        a["prefill_s"] / b["prefill_s"] for a, b in zip(runs["on"], runs["off"])
    )
    on_wall = statistics.median(r["wall_s"] for r in runs["on"])
    off_wall = statistics.median(r["wall_s"] for r in runs["off"])
    on_cols = statistics.median(r["prefill_columns"] for r in runs["on"])
    off_cols = statistics.median(r["prefill_columns"] for r in runs["off"])
    return [
        row(
            f"episode KV kept between turns: demo evaluation wall (on/off median {wall:.2f})",
            on_wall,
            "s",
            off_wall,
            "without episode KV, alternated in this process",
            detail=detail,
        ),
        row(
            f"episode KV kept between turns: prefill columns (on/off median {columns:.2f})",
            on_cols,
            "columns",
            off_cols,
            "without episode KV, alternated in this process",
        ),
        row(
            f"episode KV kept between turns: prefill seconds (on/off median {seconds:.2f})",
            statistics.median(r["prefill_s"] for r in runs["on"]),
            "s",
            statistics.median(r["prefill_s"] for r in runs["off"]),
            "without episode KV, alternated in this process",
        ),
    ]


def probe_child(mib: int) -> None:
    """The demo's probe campaign (every candidate x ``probe.trials``) in this process with the episode
    store at ``mib`` MiB; prints one JSON line: wall, prefill columns, ``peak_rss_mib`` (``ru_maxrss``)."""
    from rewardbox import strict_json
    from rewardbox.process_memory import peak_rss_mib

    profile, tasks, policy = _setup("candidates")
    try:
        result = _campaign(policy, profile, tasks, mib, profile.probe.trials)
    finally:
        asyncio.run(policy.aclose())
    result.pop("completions")
    print(strict_json.dumps(result | {"mib": mib, "peak_rss_mib": peak_rss_mib()}))


def probe_memory(modes: tuple[int, ...] = (ON_MIB, 0)) -> None:
    """``probe_child`` for each budget in ``modes``, each in a fresh process (the probe stage's own
    process in ``make demo``): ``python -c "from benchmarks.episode_kv import probe_memory as p; p()"``."""
    import subprocess
    import sys

    for mib in modes:
        code = f"from benchmarks.episode_kv import probe_child; probe_child({mib})"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        print(out.stdout.strip().splitlines()[-1] if out.returncode == 0 else out.stderr[-2000:])
