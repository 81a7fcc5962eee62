"""verl's V1 replay buffer, plus each step's share of zero-variance groups in verl's step line.

**Why a replay buffer.** verl 0.9.1's V1 trainer (``trainer.use_v1``, the default) logs one
console line per step, ``step:N - key:value ...`` (``verl.utils.logger.aggregate_logger``), from
one metrics dict that ``PPOTrainer.fit`` / ``step`` / ``_step_once`` fill
(``verl/trainer/ppo/v1/trainer_base.py``). ``compute_data_metrics`` fills it from the batch
that is *trained on*, after the filter: with ``algorithm.filter_groups`` on, every
zero-variance group has already been evicted there, so it cannot measure the share. An agent
loop cannot add a key either: its ``extra_fields`` / ``reward_extra_info`` go to the
TransferQueue and the V1 trainer averages none of them into the step's metrics. What does
reach the line is the second value of ``ReplayBuffer.sample(...)``, the sampler's own metrics
(``_step_once``: ``metrics.update(off_policy_metrics)``, then ``MetricsAggregator``). verl lets
a run swap the replay buffer (``trainer.v1.sampler.custom_sampler.{path,name}``), so this is a
supported path and verl's trainer is not patched.

``ZeroVarianceReplayBuffer`` is verl's sync ``ReplayBuffer`` unchanged, with two additions
(:class:`ZeroVarianceCounter`). It records every finished group verl's DAPO filter judges
while it samples a step, initial and refill groups alike, before any is evicted
(``_dapo_filtered_keys``). It adds to the sampler's metrics:

- ``rewardbox/zero_variance_frac``: the share (0-1) of those groups whose rewards were all equal;
- ``rewardbox/sampled_groups``: how many groups that was.

A group counts the way verl's filter counts it: status ``finished`` (every rollout returned a
trajectory), more than one reward, standard deviation 0. A group with a rollout that raised a
system error (status ``failure``) is judged by neither. The figures appear only while
``algorithm.filter_groups.enable`` is true, the case ``verl_config.verl_overrides`` writes.

**Truncation.** The same hook reports how many of the step's trained trajectories had an agent
turn cut by a token or context limit (``finish_reason == "length"``, see
``rewardbox.training.verl.tokens``): it reads the sampled trajectories' ``extra_fields`` from
TransferQueue (``kv_batch_get(..., select_fields=["extra_fields"])``, as verl's trainer reads its
speculative-decoding stats) and adds :func:`truncation_metrics`: ``rewardbox/truncated_frac``
(share 0-1 of trajectories) and ``rewardbox/truncated_turns_frac`` (share 0-1 of agent turns).
verl's ``response_length/clip_ratio`` counts only responses that filled ``response_length``.

**A bound on replacement.** verl's V1 buffer ignores ``filter_groups.max_num_gen_batches`` (it
logs so) and evicts and refills zero-variance groups until a batch has none: a step whose
prompts all give equal rewards (a policy that solves nothing) would sample forever. This buffer
evicts at most ``(max_num_gen_batches - 1) * train_batch_size`` zero-variance groups per step,
``grpo.max_refill_rounds`` rounds of a whole batch, as the local trainer allows
(``rewardbox.training.groups.collect_groups``); past that it keeps the rest. A kept group has
advantage 0 in GRPO, so it adds no gradient; its tokens still count in a token-mean
denominator. ``rewardbox/kept_zero_variance_groups`` counts them per step. ``max_num_gen_batches``
<= 0 means no bound, as in verl's legacy trainer.

**Settings.** verl passes a custom sampler only ``sampler_kwargs``, not the filter settings it
gives its own buffer (``PPOTrainer._build_replay_buffer``). :func:`sampler_overrides`
therefore writes them as interpolations of the live config (``${algorithm.filter_groups.enable}``,
...), which verl resolves when the run starts (``OmegaConf.resolve`` in ``TaskRunnerV1.run``),
and :func:`replay_buffer_settings` turns them into the arguments verl's own branch computes.
Only ``trainer.v1.trainer_mode=sync`` (verl's default) is supported.

verl (with TransferQueue) is imported only when the class is first asked for (module
``__getattr__``): this module imports in our environment, and in verl's without loading its trainer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

ZERO_VARIANCE_KEY = "rewardbox/zero_variance_frac"
SAMPLED_GROUPS_KEY = "rewardbox/sampled_groups"
KEPT_GROUPS_KEY = "rewardbox/kept_zero_variance_groups"
TRUNCATED_KEY = "rewardbox/truncated_frac"
TRUNCATED_TURNS_KEY = "rewardbox/truncated_turns_frac"
_VERL_BUFFER_MODULE = "verl.trainer.ppo.v1.replay_buffer"
SAMPLER_NAME = "ZeroVarianceReplayBuffer"
SAMPLER_PATH = f"pkg://{__name__}"
SETTINGS = {
    "filter_groups_enable": "${algorithm.filter_groups.enable}",
    "filter_groups_metric": "${algorithm.filter_groups.metric}",
    "max_inflight_gen_batches": "${algorithm.filter_groups.max_inflight_gen_batches}",
    "train_batch_size": "${data.train_batch_size}",
    "gen_batch_size": "${oc.select:data.gen_batch_size,null}",
    "sync_refill_failed_groups": "${trainer.v1.sampler.sync_refill_failed_groups}",
    "max_num_gen_batches": "${algorithm.filter_groups.max_num_gen_batches}",
}
"""``sampler_kwargs``: the live settings verl's own replay buffer is built from, as interpolations."""


def sampler_overrides() -> dict[str, Any]:
    """verl's overrides that make the V1 trainer sample with ``ZeroVarianceReplayBuffer``.

    ``++`` adds ``sampler_kwargs``' keys to verl's empty default (Hydra's force-add).
    """
    sampler = "trainer.v1.sampler"
    return {
        f"{sampler}.custom_sampler.path": SAMPLER_PATH,
        f"{sampler}.custom_sampler.name": SAMPLER_NAME,
        f"++{sampler}.sampler_kwargs": dict(SETTINGS),
    }


def eviction_bound(sampler_kwargs: Mapping[str, Any]) -> int | None:
    """Zero-variance groups one step may evict: ``(max_num_gen_batches - 1) * train_batch_size``.

    None (no bound) when ``max_num_gen_batches`` <= 0, verl's "no limit".
    """
    batches = int(sampler_kwargs["max_num_gen_batches"])
    return None if batches <= 0 else (batches - 1) * int(sampler_kwargs["train_batch_size"])


def replay_buffer_settings(sampler_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments verl's ``PPOTrainer._build_replay_buffer`` gives its own sync buffer.

    Args:
        sampler_kwargs: :data:`SETTINGS` as verl resolved them.

    Returns:
        ``filter_groups_metric`` (None when filtering is off), ``sync_refill_failed_groups``,
        ``train_batch_size``, ``gen_batch_size`` (1 when filtering or refilling, as verl sets it)
        and ``max_inflight_gen_batches``.

    Raises:
        ValueError: a setting is missing (the overrides were not :func:`sampler_overrides`), or
            filtering is on without a metric (verl's own error).
    """
    missing = sorted(set(SETTINGS) - set(sampler_kwargs))
    if missing:
        raise ValueError(
            f"{SAMPLER_NAME} needs trainer.v1.sampler.sampler_kwargs {missing}: "
            "build the overrides with rewardbox.training.verl.sampler.sampler_overrides()"
        )
    metric = (
        sampler_kwargs["filter_groups_metric"] if sampler_kwargs["filter_groups_enable"] else None
    )
    if sampler_kwargs["filter_groups_enable"] and not metric:
        raise ValueError(
            "algorithm.filter_groups.metric must be set when group filtering is enabled"
        )
    refill = bool(sampler_kwargs["sync_refill_failed_groups"])
    batch = int(sampler_kwargs["train_batch_size"])
    return {
        "filter_groups_metric": None if metric is None else str(metric),
        "sync_refill_failed_groups": refill,
        "train_batch_size": batch,
        "gen_batch_size": 1
        if metric is not None or refill
        else int(sampler_kwargs["gen_batch_size"] or batch),
        "max_inflight_gen_batches": int(sampler_kwargs["max_inflight_gen_batches"])
        if metric
        else 1,
    }


def zero_variance_metrics(zero_variance_groups: int, sampled_groups: int) -> dict[str, float]:
    """The step's figures: ``{ZERO_VARIANCE_KEY: share 0-1, SAMPLED_GROUPS_KEY: count}``.

    Empty when no group was judged (nothing to divide by; the step line then has no share).

    Raises:
        ValueError: more zero-variance groups than groups.
    """
    if zero_variance_groups > sampled_groups:
        raise ValueError(f"{zero_variance_groups} zero-variance groups out of {sampled_groups}")
    if sampled_groups == 0:
        return {}
    return {
        ZERO_VARIANCE_KEY: zero_variance_groups / sampled_groups,
        SAMPLED_GROUPS_KEY: float(sampled_groups),
    }


def truncation_metrics(extra_fields: list[Any]) -> dict[str, float]:
    """``{TRUNCATED_KEY, TRUNCATED_TURNS_KEY}`` over trajectories' ``extra_fields`` (``verl_agent_loop.output_fields``).

    Trajectories without ``rewardbox_truncated_turns`` (another agent loop) are not counted; empty when none has it.
    """
    rows = [f for f in extra_fields if isinstance(f, Mapping) and "rewardbox_truncated_turns" in f]
    if not rows:
        return {}
    turns = sum(int(f.get("rewardbox_agent_turns") or 0) for f in rows)
    cut = [int(f["rewardbox_truncated_turns"]) for f in rows]
    return {
        TRUNCATED_KEY: sum(c > 0 for c in cut) / len(rows),
        TRUNCATED_TURNS_KEY: sum(cut) / turns if turns else 0.0,
    }


def _sampled_extra_fields(batch: Any) -> list[Any]:
    """The ``extra_fields`` of a sampled batch's trajectories, read from the TransferQueue verl's buffer uses."""
    import importlib

    store = importlib.import_module(_VERL_BUFFER_MODULE).tq
    if not getattr(batch, "keys", None):
        return []
    got = store.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
    )
    values = got["extra_fields"]
    return values.tolist() if hasattr(values, "tolist") else list(values)


class ZeroVarianceCounter:
    """The part of :class:`ZeroVarianceReplayBuffer` that is ours, over verl's sync ``ReplayBuffer``.

    Args:
        trainer_mode: verl's ``trainer.v1.trainer_mode``; only ``"sync"``.
        sampler_kwargs: :data:`SETTINGS`, resolved.
        **kwargs: the rest of what verl passes a custom sampler (``refill_fn``, ...).

    Raises:
        ValueError: another trainer mode, or settings :func:`replay_buffer_settings` refuses.
    """

    def __init__(
        self, trainer_mode: str, *, sampler_kwargs: Mapping[str, Any], **kwargs: Any
    ) -> None:
        if trainer_mode != "sync":
            raise ValueError(
                f"{SAMPLER_NAME} supports trainer.v1.trainer_mode=sync, not {trainer_mode!r}"
            )
        super().__init__(
            trainer_mode=trainer_mode,
            sampler_kwargs=sampler_kwargs,
            **kwargs,
            **replay_buffer_settings(sampler_kwargs),
        )
        self.eviction_bound = eviction_bound(sampler_kwargs)
        self._judged: set[str] = set()
        self._zero_variance: set[str] = set()
        self._kept: set[str] = set()
        self._evictions_left = self.eviction_bound

    def _dapo_filtered_keys(self, partition_id: str):
        """verl's DAPO classification of the finished groups, recorded, and cut to this step's eviction bound.

        Returns verl's ``(uids to evict, {reward: count})`` less the groups kept once the bound is spent
        (the lowest uids are evicted first, so the choice is reproducible).
        """
        filtered, counts = super()._dapo_filtered_keys(partition_id)
        if partition_id == "val" or self.filter_groups_metric is None:
            return filtered, counts
        self._judged |= set(
            self.finished_keys[partition_id]
        )  # every finished group, classified just now
        self._zero_variance |= filtered
        evict = filtered - self._kept
        if self._evictions_left is not None:
            if len(evict) > self._evictions_left:
                chosen = set(sorted(evict)[: self._evictions_left])
                self._kept |= evict - chosen
                evict = chosen
            self._evictions_left -= len(evict)
        if evict != filtered:
            cache = self._dapo_classification_cache[partition_id]
            counts = Counter(cache[uid] for uid in evict)
        return evict, counts

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        """verl's ``sample``; its metrics gain :func:`zero_variance_metrics` of the groups judged meanwhile,
        the count of zero-variance groups kept past the eviction bound and :func:`truncation_metrics`."""
        self._judged, self._zero_variance, self._kept = set(), set(), set()
        self._evictions_left = self.eviction_bound
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id != "val":
            metrics.update(zero_variance_metrics(len(self._zero_variance), len(self._judged)))
            metrics.update(truncation_metrics(_sampled_extra_fields(batch)))
            if self.filter_groups_metric is not None:
                metrics[KEPT_GROUPS_KEY] = float(len(self._kept))
        return batch, metrics


def __getattr__(name: str):
    """``ZeroVarianceReplayBuffer``, built on first access (verl's ``load_extern_object`` asks by name).

    Built lazily so that importing this module (``verl_config`` does) never imports verl's trainer.

    Raises:
        ImportError: verl's V1 trainer or TransferQueue is not installed here.
        AttributeError: any other name.
    """
    if name != SAMPLER_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    except ImportError as exc:
        raise ImportError(
            f"{SAMPLER_NAME} needs verl's V1 trainer and TransferQueue (make verl-env): {exc}"
        ) from exc
    cls = type(
        SAMPLER_NAME,
        (ZeroVarianceCounter, ReplayBuffer),
        {
            "__module__": __name__,
            "__doc__": "verl's sync ``ReplayBuffer`` with :class:`ZeroVarianceCounter`.",
        },
    )
    globals()[SAMPLER_NAME] = cls
    return cls
