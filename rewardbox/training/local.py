"""Local GRPO: policy + LoRA + episodes + trainer, on explicit parts (never the profile).

The runtime floor (``rewardbox.runtime.train``) reads the profile and hands this module
``GRPOConfig`` and a :class:`RolloutParts` bundle (rollout policy config, episode limits, the
composition root's runner factory and budget check, band boundaries, first trial).

With ``policy.kind == "local"`` the rollouts come from the model being trained
(on-policy GRPO, exact token ids). With any other kind (scripted policies in
CI, an endpoint) the rollouts come from that policy and their completions are
re-tokenised with the base checkpoint's chat template (off-policy; the loss
then has no importance correction, which is only meant for tests and
distillation-like use).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.executor import LocalExecutor
from rewardbox.episode.progress import Progress, ProgressSink, emit
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.policy.base import Policy
from rewardbox.policy.chat_template import END_OF_TURN, render_prompt
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.guided import VocabularyIndex
from rewardbox.tasks.schema import Task
from rewardbox.threads import apply_thread_policy
from rewardbox.training.checkpoint import save_trained, trainable
from rewardbox.training.config import GRPOConfig
from rewardbox.training.curriculum import PosteriorTaskSampler
from rewardbox.training.groups import TrialNumbers, task_stream
from rewardbox.training.merged_sampling import SamplingWeights
from rewardbox.training.probe_history import ProbeHistory
from rewardbox.training.trainer import StepMetrics, TokenizeTurn, TrainingSummary, train_grpo

RunnerFactory = Callable[[Policy], AbstractAsyncContextManager[Any]]
"""``policy -> async context of an EpisodeRunner`` (the composition root's ``episode_runner``, bound
to the rollout settings by the runtime floor)."""

BudgetCheck = Callable[[Policy, Sequence[Task]], None]
"""``(policy, tasks) -> None``, raising when the budgets cannot hold a golden call of ``tasks``."""


@dataclass(frozen=True)
class RolloutParts:
    """What GRPO's rollouts run with, wired by ``rewardbox.runtime.train`` from a profile.

    Attributes:
        policy: the rollout policy's config (``local``: on-policy GRPO on the model being trained).
        episode: episode limits; ``concurrency`` bounds open sandboxes, ``max_new_tokens`` is the
            token budget per agent turn when the policy has none of its own.
        runner_factory: ``policy -> async context of an EpisodeRunner`` (:data:`RunnerFactory`).
        check_budget: raises when the budgets cannot hold a golden call (:data:`BudgetCheck`).
        boundaries: the band boundaries task selection cuts at (the posterior sampler's bands).
        first_trial: the first trial number of every task (the probe's ``trials``).
    """

    policy: PolicyConfig
    episode: EpisodeConfig
    runner_factory: RunnerFactory
    check_budget: BudgetCheck
    boundaries: tuple[float, ...]
    first_trial: int


def chat_tokenizer(tokenizer) -> TokenizeTurn:
    """Render agent turn ``i`` of a rollout as (prompt ids, completion ids) with the chat template.

    The prompt is the conversation before the i-th assistant message (its tools
    included); the completion is that turn's raw text plus the end-of-turn token.
    """

    def tokenize(rollout: EpisodeResult, index: int) -> tuple[list[int], list[int]]:
        positions = [i for i, m in enumerate(rollout.messages) if m.get("role") == "assistant"]
        if index >= len(positions):
            return None, None
        history = [
            {k: v for k, v in m.items() if k not in ("is_user_llm", "reasoning_content")}
            for m in rollout.messages[: positions[index]]
        ]
        prompt = render_prompt(history, rollout.tools)
        completion = rollout.agent_turns[index].raw_text + END_OF_TURN
        encode = partial(tokenizer, add_special_tokens=False)
        return list(encode(prompt).input_ids), list(encode(completion).input_ids)

    return tokenize


def step_note(metrics: StepMetrics) -> str:
    """One GRPO step's line: groups kept/needed and refill rounds (``SHORT`` when fewer groups
    than asked were kept), reward, zero-variance share, loss, sampler-trainer gap, truncation
    (cut completions, and cut rollouts scored as failures), repeated trials, bands, seconds."""
    reward = "n/a" if metrics.mean_reward is None else f"{metrics.mean_reward:.3f}"
    short = " SHORT" if metrics.groups < metrics.groups_wanted else ""
    return (
        f"step {metrics.step}: groups kept/needed={metrics.groups}/{metrics.groups_wanted}{short} "
        f"rounds={metrics.refill_rounds} mean_reward={reward} (scored rollouts {metrics.scored_rollouts}) "
        f"zero_variance={metrics.zero_variance_frac:.2f} "
        f"system_error_groups={metrics.system_error_groups} loss={metrics.loss} "
        f"logprob_gap_max={metrics.logprob_gap_max} clip_frac={metrics.clip_frac} "
        f"truncated={metrics.truncated_completions}/{metrics.completions} "
        f"(rollouts scored as failures {metrics.truncated_failures}) repeated_trials={metrics.repeated_trials} "
        f"bands=[{metrics.band_histogram}] "
        f"samples={metrics.samples} tokens={metrics.policy_tokens} ({metrics.duration_s:.1f}s, update {metrics.update_s:.1f}s)"
    )


def _tasks(pool: Sequence[Task], cfg: GRPOConfig, boundaries: Sequence[float], probe: ProbeHistory):
    """The task stream ``grpo.task_sampling`` asks for (bands cut at ``boundaries``, where task
    selection cuts them); the posterior sampler starts from the probe's ``(c, n)`` of each task."""
    if cfg.task_sampling == "uniform":
        return task_stream(pool, cfg.seed)
    return PosteriorTaskSampler(pool, cfg.seed, prior_counts=probe.counts, boundaries=boundaries)


def run_trials_after_probe(first_trial: int, probe: ProbeHistory) -> TrialNumbers:
    """GRPO's trial numbers: every task starts after its probe trials (``first_trial``, the probe's
    ``trials``, and the highest trial in the probe rows, whichever is later), so step 0 never
    replays a probe."""
    return TrialNumbers(first_trial=first_trial, first_by_uid=probe.next_trial)


def _untrained_adapter(
    base_dir: Path, out_dir: Path, cfg, log, init_adapter: Path | None = None
) -> tuple[Path, TrainingSummary]:
    from transformers import AutoModelForCausalLM

    start = "base" if init_adapter is None else "the warm start"
    emit(
        log,
        f"the training pool is empty: no GRPO step taken; saving the adapter untrained (merged = {start})",
    )
    model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg, init_adapter)
    save_trained(model, out_dir, [], cfg)
    return Path(out_dir), TrainingSummary()


def _trainee(
    cfg: GRPOConfig,
    policy_config: PolicyConfig,
    base_dir: Path,
    pool: Sequence[Task],
    check_budget: BudgetCheck,
    init_adapter: Path | None = None,
):
    """The rollout policy and the model being trained: (policy, model, pad_id, tokenize, guide_index).

    With ``init_adapter`` (the warm start's LoRA adapter) the model continues that adapter instead of
    a fresh one (``checkpoint.trainable``), so on-policy rollouts sample from the warm-started policy.

    On-policy (``policy.kind == "local"``) they are one model and ``tokenize`` is None (the
    sampler's exact token ids are trained); otherwise the base checkpoint is trained on the
    re-tokenised completions of ``policy_config``'s policy. On-policy, the token budget has been
    checked against every golden call of the pool (``check_budget``): ``train_local_grpo``
    then scores cut completions as failures (``budget_fits_golden``); off-policy nothing was
    checked and ``grpo.mask_truncated`` decides.
    """
    from rewardbox.policy import build_policy

    if policy_config.kind != "local":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        apply_thread_policy(
            "auto"
        )  # this process runs the model being trained (LocalPolicy applies it itself)

        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg, init_adapter)
        pad_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        return build_policy(policy_config), model, pad_id, chat_tokenizer(tokenizer), None
    # one dtype for probes, evaluation and GRPO (``policy.dtype``): bf16 where the CPU has the units
    # for it. There the adapter is merged for rollouts with an exact restore (``sampling_weights``)
    # and the trainer's own log-probs are the PPO "old" ones (``grpo.old_logprobs: auto``);
    # docs/performance.md, "Precision"
    policy = build_policy(policy_config, checkpoint_dir=base_dir)
    check_budget(policy, pool)
    policy.model = trainable(policy.model, cfg, init_adapter)
    guide_index = None
    if policy.guided_tool_calls:
        guide_index = VocabularyIndex(policy.tokenizer, int(policy.model.config.vocab_size))
    return policy, policy.model, policy.pad_token_id, None, guide_index


def sampling_weights(cfg: GRPOConfig, policy, model, *, on_policy: bool) -> SamplingWeights:
    """On-policy LoRA with ``grpo.sample_merged``: rollouts from weights with the adapter merged in
    (``merged_sampling``); otherwise the adapter stays unmerged (off-policy rollouts do not sample
    from ``model``). On fp32 base weights the unmerge subtracts ``B A``; on bf16/fp16 ones it
    restores a saved copy of the base weights, so no merge/unmerge cycle moves them."""
    merge = on_policy and cfg.finetune == "lora" and cfg.sample_merged
    return SamplingWeights(model, policy if on_policy else None, merge=merge)


def _loss_budget(
    cfg: GRPOConfig, policy: Policy, max_new_tokens: int, on_policy: bool
) -> GRPOConfig:
    """``cfg`` with Dr. GRPO's ``L_max`` set to the policy's token budget per agent turn when unset
    (on-policy); ``max_new_tokens`` (the episode's) when the policy has no budget of its own."""
    if cfg.max_response_tokens is not None or not on_policy:
        return cfg
    budget = getattr(policy, "max_new_tokens", None) or max_new_tokens
    return cfg.model_copy(update={"max_response_tokens": int(budget)})


def train_local_grpo(
    pool: Sequence[Task],
    base_dir: Path,
    out_dir: Path,
    cfg: GRPOConfig,
    rollouts: RolloutParts,
    *,
    log: ProgressSink | None = None,
    probe: ProbeHistory | None = None,
    init_adapter: Path | None = None,
) -> tuple[Path, TrainingSummary]:
    """Train a LoRA adapter on ``pool`` with GRPO.

    Args:
        pool: training tasks (never benchmark tasks; the assets enforce it).
        base_dir, out_dir: HF checkpoint of the base policy; where the adapter and ``training_metrics.json`` go.
        cfg: the method (``GRPOConfig``); rollouts: the rollouts' parts (:class:`RolloutParts`),
            their episodes sampling at ``cfg.temperature`` (``rewardbox.runtime.train`` binds it).
        probe: the probe's counts and trials (``ProbeHistory``): the sampler starts from its ``(c, n)``,
            trials start after its trials; None: prior Beta(1/2, 1/2), trials from ``rollouts.first_trial``.
        init_adapter: a LoRA adapter to continue (the warm start's, ``rft_checkpoint``); None: a fresh one.

    Returns:
        (adapter directory, per-step metrics); with ``grpo.finetune == "full"`` the directory holds
        the whole fine-tuned checkpoint. An empty pool is not an error: the adapter is saved untrained
        (LoRA's B matrices are zero: merged equals base) with zero steps, and the caller reports it.

    Raises:
        TokenBudgetError, TurnBudgetError: on-policy, the budgets cannot hold a golden call (config error).
    """
    if not pool:
        return _untrained_adapter(base_dir, out_dir, cfg, log, init_adapter)
    trainee = _trainee(cfg, rollouts.policy, base_dir, pool, rollouts.check_budget, init_adapter)
    policy, model, tokenize = trainee[0], trainee[1], trainee[3]
    cfg = _loss_budget(cfg, policy, rollouts.episode.max_new_tokens, on_policy=tokenize is None)
    summary = asyncio.run(_run(pool, cfg, rollouts, probe or ProbeHistory(), trainee, log))
    save_trained(model, out_dir, [m.as_dict() for m in summary.steps], cfg)
    return Path(out_dir), summary


async def _run(
    pool: Sequence[Task],
    cfg: GRPOConfig,
    rollouts: RolloutParts,
    probe: ProbeHistory,
    trainee: tuple,
    log: ProgressSink | None,
) -> TrainingSummary:
    """GRPO's steps in one executor session (the trainee of :func:`_trainee`, closed after): the
    rollouts of a step (B x G, plus refills) wait for a free slot, so at most
    ``episode.concurrency`` sandboxes are open at once, whatever B x G is."""
    policy, model, pad_id, tokenize, guide_index = trainee
    progress = Progress(
        cfg.steps, "grpo_checkpoint", log, unit="steps", every_frac=0, outcomes=False
    )

    def after_step(metrics: StepMetrics) -> None:
        if tokenize is None:
            policy.weights_changed()  # on-policy: the cached prefix KV was computed with the old weights
        progress.update(note=step_note(metrics))  # one line per step as it ends

    executor = LocalExecutor(rollouts.episode.concurrency)
    try:
        async with executor.session(rollouts.runner_factory, policy) as session:
            return await train_grpo(
                model,
                pad_id,
                _tasks(pool, cfg, rollouts.boundaries, probe),
                session.run_one,
                cfg,
                on_step=after_step,
                tokenize=tokenize,
                guide_index=guide_index,
                trials=run_trials_after_probe(rollouts.first_trial, probe),
                budget_fits_golden=tokenize is None,
                weights=sampling_weights(cfg, policy, model, on_policy=tokenize is None),
            )
    finally:
        await policy.aclose()
        progress.close()
