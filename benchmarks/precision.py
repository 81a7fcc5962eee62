"""float32 against bfloat16 on the demo's tasks: speed, pass rates, greedy agreement (issue 28).

``policy.dtype: auto`` is bfloat16 where the CPU multiplies bf16 in hardware (``amx_bf16`` or
``avx512_bf16``) and float32 elsewhere (``rewardbox/policy/precision.py``). This benchmark measures
what that choice changes, on the demo profile's tasks (its 12 training candidates and 6 benchmark
tasks, embedded retail, hotel and helpdesk) x ``trials``, with the real SmolLM2-135M weights, the
demo's ``max_batch_size`` and ``episode.concurrency``, in-process MCP servers, the scripted user and
the grading workers:

- **Speed.** The same campaign in float32 and in bfloat16 (two ``LocalPolicy`` objects in this
  process), alternated ``repeats`` times (fp32 first, then bf16 first, ...), each from a cold prefix
  cache. Per run: wall seconds, prefill columns and decode rows per second of model time (forward
  hooks, as in ``benchmarks/episode_kv.py``).
- **Pass rates.** Each (task, trial) episode of the first pair, paired across the two dtypes (same
  seeds, sampled at the demo's temperature): the pass rate in each, and an exact McNemar test on
  the discordant pairs (scipy's ``binomtest`` on ``b`` fp32-only and ``c`` bf16-only passes,
  two-sided; McNemar 1947). Sampling at T > 0 diverges at the first token whose probabilities the
  rounding moves across a draw, so the pairs are two samples of each episode, not replays.
- **Greedy agreement.** Every first-turn prompt the campaign sent, decoded greedily by both
  models: the fraction of completions that are token-identical, and the mean fraction of tokens
  before the first difference.
- **The GRPO update.** ``trainer.optimise_step`` on one group of 4 samples of 1,100 + 40 tokens
  (LoRA r16 on every linear layer; ``benchmarks.floor_model.grpo_seconds_per_sample``) with each
  policy's model, alternated ``repeats`` times: wall seconds per scored sample.

Without bf16 units bf16 is emulated (a few percent of fp32's speed on the development machine), so
the benchmark measures nothing there and returns one row saying so. Sizes:
``REWARDBOX_BENCH_PRECISION="trials,repeats"`` (default ``2,2``). Minutes per run on 2 cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import statistics

from benchmarks.episode_kv import counted_campaign
from benchmarks.rows import alternated, row

TRIALS, REPEATS = (int(x) for x in os.environ.get("REWARDBOX_BENCH_PRECISION", "2,2").split(","))
DTYPES = ("float32", "bfloat16")


def mcnemar_exact(first: list[bool], second: list[bool]) -> dict:
    """Paired pass/fail outcomes compared by the exact McNemar test.

    Args:
        first, second: outcomes of the same episodes (same length, same order) under two setups.

    Returns:
        ``{"n", "first_rate", "second_rate", "only_first", "only_second", "p_value"}``; ``p_value`` is
        the two-sided exact binomial test of ``only_second`` successes in ``only_first + only_second``
        discordant pairs at probability 1/2 (McNemar 1947; ``scipy.stats.binomtest``), 1.0 when no
        pair is discordant.

    Raises:
        ValueError: the lists differ in length or are empty.
    """
    from scipy.stats import binomtest

    if len(first) != len(second) or not first:
        raise ValueError(
            f"paired outcomes must be non-empty and equal in length: {len(first)}, {len(second)}"
        )
    only_first = sum(a and not b for a, b in zip(first, second))
    only_second = sum(b and not a for a, b in zip(first, second))
    discordant = only_first + only_second
    p_value = binomtest(only_second, discordant, 0.5).pvalue if discordant else 1.0
    return {
        "n": len(first),
        "first_rate": sum(first) / len(first),
        "second_rate": sum(second) / len(second),
        "only_first": only_first,
        "only_second": only_second,
        "p_value": float(p_value),
    }


def agreement(first: list[list[int]], second: list[list[int]]) -> dict:
    """Token agreement of paired completions (same prompts, same order).

    Returns:
        ``{"n", "identical", "prefix_fraction"}``: how many pairs are token-identical, and the mean
        over pairs of (tokens before the first difference) / (the longer completion's length), 1.0
        for two empty completions.
    """
    fractions, identical = [], 0
    for a, b in zip(first, second, strict=True):
        identical += a == b
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        fractions.append(common / max(len(a), len(b)) if (a or b) else 1.0)
    return {
        "n": len(fractions),
        "identical": identical,
        "prefix_fraction": statistics.fmean(fractions) if fractions else 1.0,
    }


def _campaign(policy, profile, tasks, trials: int) -> dict:
    """One campaign of ``tasks`` x ``trials`` from a cold prefix cache; figures, outcomes, first turns."""
    with policy.generation_lock:
        policy.prefix_cache.invalidate()
    first_turns = {}

    def record(request, completion):
        if not any(m.get("role") == "assistant" for m in request.messages):
            first_turns[request.sampling_seed] = (request, completion.prompt_token_ids)

    rows, counter, wall_s = counted_campaign(policy, profile, tasks, trials, record)
    outcomes = {
        (uid, trial): bool(passed)
        for uid, trial, passed in rows.select("uid", "trial", "passed").iter_rows()
    }
    return {
        "wall_s": wall_s,
        "prefill_columns_per_s": counter.prefill_columns / max(counter.prefill_s, 1e-9),
        "decode_rows_per_s": counter.decode_rows / max(counter.decode_s, 1e-9),
        "prefill_s": counter.prefill_s,
        "decode_s": counter.decode_s,
        "episodes": rows.height,
        "passed": sum(outcomes.values()),
        "system_errors": int(rows["system_error"].is_not_null().sum()),
        "load": os.getloadavg()[0],
        "outcomes": outcomes,
        "first_turns": first_turns,
    }


def campaign_figures(result: dict) -> dict:
    """A ``_campaign`` result without its per-episode parts (``outcomes``, ``first_turns``)."""
    return {k: v for k, v in result.items() if k not in ("outcomes", "first_turns")}


def campaigns_detail(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Each key's campaigns as ``campaign_figures``, for a row's ``detail``."""
    return {key: [campaign_figures(r) for r in rs] for key, rs in runs.items()}


def alternated_campaigns(
    policies: dict, profile, tasks, trials: int, repeats: int, before_each=None
) -> dict[str, list[dict]]:
    """``repeats`` rounds of one ``_campaign`` per policy (dict order, then reversed, ...), each printed;
    returns each policy key's results in order. ``before_each(key)``, when given, runs before each
    campaign (a setting the campaigns differ in that is not a policy object of its own)."""

    def campaign(key: str) -> dict:
        if before_each is not None:
            before_each(key)
        result = _campaign(policies[key], profile, tasks, trials)
        print(key, campaign_figures(result))
        return result

    return alternated({key: functools.partial(campaign, key) for key in policies}, repeats)


def demo_policy(profile, **settings):
    """A ``LocalPolicy`` of the converted SmolLM2 checkpoint with the demo profile's batch size, seed and
    KV budget, plus ``settings`` (the setting an A/B varies)."""
    from benchmarks.peak_memory import checkpoint
    from rewardbox.policy.local import LocalPolicy

    return LocalPolicy(
        checkpoint(),
        max_batch_size=profile.policy.max_batch_size,
        seed=profile.policy.seed,
        kv_cache_mib=profile.policy.kv_cache_mib,
        **settings,
    )


def identical_row(title: str, agree: dict) -> dict:
    """The row of how many greedy first turns two settings decode token-identically (``agreement``)."""
    return row(
        f"{title}: greedy first turns token-identical ({agree['identical']} of {agree['n']})",
        agree["identical"] / max(agree["n"], 1),
        "",
        None,
        detail={"prefix_fraction": agree["prefix_fraction"]},
    )


def setting_rows(
    runs: dict[str, list[dict]],
    greedy: dict[str, list[list[int]]],
    tasks: int,
    trials: int,
    title: str,
    label: str,
) -> list[dict]:
    """The rows of a campaign A/B of two settings (``runs``' keys: the measured one, then its anchor):
    campaign wall (the median of the paired ratios in the title), decode rows and prefill columns per
    second of model time, and how many greedy first turns are token-identical."""
    ours, anchor = runs.values()
    first, second = greedy.values()

    def median(rs, key):
        return statistics.median(r[key] for r in rs)

    wall = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(ours, anchor))
    agree = agreement(first, second)
    detail = campaigns_detail(runs) | {"greedy": agree, "tasks": tasks, "trials": trials}
    rows = [
        row(
            f"{title}: demo tasks campaign wall (median of paired ratios {wall:.2f})",
            median(ours, "wall_s"),
            "s",
            median(anchor, "wall_s"),
            label,
            detail=detail,
        )
    ]
    for key, unit, what in (
        ("decode_rows_per_s", "rows/s", "decode rows per second of decode time"),
        ("prefill_columns_per_s", "columns/s", "prefill columns per second of prefill time"),
    ):
        rows.append(row(f"{title}: {what}", median(ours, key), unit, median(anchor, key), label))
    rows.append(identical_row(title, agree))
    return rows


def _greedy(policy, first_turns: dict) -> list[list[int]]:
    """Greedy completions of the recorded first-turn prompts, in seed order."""
    seeds = sorted(first_turns)
    requests = [dataclasses.replace(first_turns[s][0], temperature=0.0, seed=None) for s in seeds]
    prompts = [list(first_turns[s][1]) for s in seeds]
    width = policy.max_batch_size
    out = []
    for i in range(0, len(requests), width):
        done = policy.generate_batch(requests[i : i + width], prompts[i : i + width])
        out += [list(c.completion_token_ids) for c in done]
    return out


def run() -> list[dict]:
    from rewardbox.config.profile import load_profile
    from rewardbox.policy.precision import has_bf16_units
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    if not has_bf16_units():
        return [
            row(
                "bf16 vs fp32 on the demo's tasks: not measured (no amx_bf16/avx512_bf16: bf16 emulated)",
                0.0,
                "",
                None,
            )
        ]
    profile = load_profile("demo")
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    policies = {dtype: demo_policy(profile, dtype=dtype) for dtype in DTYPES}
    try:
        runs = alternated_campaigns(policies, profile, tasks, TRIALS, REPEATS)
        first_turns = runs["float32"][0]["first_turns"]
        greedy = {d: _greedy(policies[d], first_turns) for d in DTYPES}
        update = _grpo_update(policies)
    finally:
        for policy in policies.values():
            asyncio.run(policy.aclose())
    return _rows(runs, greedy, len(tasks)) + [_update_row(update)]


def _grpo_update(policies: dict) -> dict[str, list[float]]:
    """Seconds per scored sample of one GRPO optimiser step with each policy's model, alternated."""
    from benchmarks.floor_model import group_samples_like_grpo, grpo_seconds_per_sample

    vocab = policies["float32"].model.config.vocab_size
    samples = group_samples_like_grpo(1, 4, 1100, 40, vocab)
    seconds: dict[str, list[float]] = {d: [] for d in DTYPES}
    for repeat in range(REPEATS):
        for dtype in DTYPES if repeat % 2 == 0 else DTYPES[::-1]:
            per_sample, _ = grpo_seconds_per_sample(policies[dtype].model, samples)
            seconds[dtype].append(per_sample)
            print(dtype, "GRPO update s/sample", round(per_sample, 2))
    return seconds


def _update_row(seconds: dict[str, list[float]]) -> dict:
    ratio = statistics.median(b / f for b, f in zip(seconds["bfloat16"], seconds["float32"]))
    return row(
        f"bf16 vs fp32: GRPO update s per scored sample, 1x4, 1100+40, LoRA r16 (bf16/fp32 median {ratio:.2f})",
        statistics.median(seconds["bfloat16"]),
        "s",
        statistics.median(seconds["float32"]),
        "float32, alternated in this process",
        detail=seconds,
    )


def _rows(
    runs: dict[str, list[dict]], greedy: dict[str, list[list[int]]], tasks: int
) -> list[dict]:
    fp32, bf16 = runs["float32"], runs["bfloat16"]
    keys = sorted(fp32[0]["outcomes"])
    passes = mcnemar_exact(
        [fp32[0]["outcomes"][k] for k in keys], [bf16[0]["outcomes"].get(k, False) for k in keys]
    )
    agree = agreement(greedy["float32"], greedy["bfloat16"])

    def median(rs, key):
        return statistics.median(r[key] for r in rs)

    wall = statistics.median(b["wall_s"] / f["wall_s"] for b, f in zip(bf16, fp32))
    detail = campaigns_detail(runs)
    detail |= {"pass_rates": passes, "greedy": agree, "tasks": tasks, "trials": TRIALS}
    label = "float32, alternated in this process"
    return [
        row(
            f"bf16 vs fp32: demo tasks campaign wall (bf16/fp32 median {wall:.2f})",
            median(bf16, "wall_s"),
            "s",
            median(fp32, "wall_s"),
            label,
            detail=detail,
        ),
        row(
            "bf16 vs fp32: decode rows per second of decode time",
            median(bf16, "decode_rows_per_s"),
            "rows/s",
            median(fp32, "decode_rows_per_s"),
            label,
        ),
        row(
            "bf16 vs fp32: prefill columns per second of prefill time",
            median(bf16, "prefill_columns_per_s"),
            "columns/s",
            median(fp32, "prefill_columns_per_s"),
            label,
        ),
        row(
            f"bf16 vs fp32: pass rate, {passes['n']} paired episodes "
            f"(only fp32 {passes['only_first']}, only bf16 {passes['only_second']}, "
            f"exact McNemar p={passes['p_value']:.3f})",
            passes["second_rate"],
            "",
            passes["first_rate"],
            "float32 pass rate, same episodes",
        ),
        identical_row("bf16 vs fp32", agree),
    ]
