"""Glue for the ``grpo_checkpoint`` stage: policy + LoRA + episodes + trainer.

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
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewardbox.episode.executor import LocalExecutor
from rewardbox.episode.progress import Progress, ProgressSink, emit
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.policy.base import Policy
from rewardbox.policy.chat_template import END_OF_TURN, render_prompt
from rewardbox.policy.guided import VocabularyIndex
from rewardbox.tasks.schema import Task
from rewardbox.threads import apply_thread_policy
from rewardbox.training.checkpoint import save_trained, trainable
from rewardbox.training.curriculum import PosteriorTaskSampler
from rewardbox.training.groups import TrialNumbers, task_stream
from rewardbox.training.probe_history import ProbeHistory
from rewardbox.training.trainer import StepMetrics, TokenizeTurn, TrainingSummary, train_grpo

if TYPE_CHECKING:  # the profile composes training's config, so training reads it without importing it
    from rewardbox.config.profile import Profile


EpisodeRunnerFactory = Callable[["Profile", Policy], AbstractAsyncContextManager[Any]]
"""``(profile, policy) -> async context of an EpisodeRunner``: the composition root's ``episode_runner``."""

BudgetCheck = Callable[[Policy, "Profile", Sequence[Task]], None]
"""``(policy, profile, tasks) -> None``, raising when the token budget is below a golden call."""


def chat_tokenizer(tokenizer) -> TokenizeTurn:
    """Render agent turn ``i`` of a rollout as (prompt ids, completion ids) with the chat template.

    The prompt is the conversation before the i-th assistant message (its tools
    included); the completion is that turn's raw text plus the end-of-turn token.
    """

    def tokenize(rollout: EpisodeResult, index: int) -> tuple[list[int], list[int]]:
        positions = [i for i, m in enumerate(rollout.messages) if m.get("role") == "assistant"]
        if index >= len(positions):
            return None, None
        history = [{k: v for k, v in m.items() if k not in ("is_user_llm", "reasoning_content")}
                   for m in rollout.messages[: positions[index]]]
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
    return (f"step {metrics.step}: groups kept/needed={metrics.groups}/{metrics.groups_wanted}{short} "
            f"rounds={metrics.refill_rounds} mean_reward={reward} (scored rollouts {metrics.scored_rollouts}) "
            f"zero_variance={metrics.zero_variance_frac:.2f} "
            f"system_error_groups={metrics.system_error_groups} loss={metrics.loss} "
            f"logprob_gap_max={metrics.logprob_gap_max} clip_frac={metrics.clip_frac} "
            f"truncated={metrics.truncated_completions}/{metrics.completions} "
            f"(rollouts scored as failures {metrics.truncated_failures}) repeated_trials={metrics.repeated_trials} "
            f"bands=[{metrics.band_histogram}] "
            f"samples={metrics.samples} tokens={metrics.policy_tokens} ({metrics.duration_s:.1f}s)")


def _tasks(pool: Sequence[Task], profile: Profile, probe: ProbeHistory):
    """The task stream ``grpo.task_sampling`` asks for (bands cut where task selection cuts them);
    the posterior sampler starts from the probe's ``(c, n)`` of each task."""
    cfg = profile.grpo
    if cfg.task_sampling == "uniform":
        return task_stream(pool, cfg.seed)
    return PosteriorTaskSampler(pool, cfg.seed, prior_counts=probe.counts, boundaries=profile.selection.boundaries)


def run_trials_after_probe(profile: Profile, probe: ProbeHistory) -> TrialNumbers:
    """GRPO's trial numbers: every task starts after its probe trials (``probe.trials`` and the
    highest trial in the probe rows, whichever is later), so step 0 never replays a probe."""
    return TrialNumbers(first_trial=profile.probe.trials, first_by_uid=probe.next_trial)


def _untrained_adapter(base_dir: Path, out_dir: Path, cfg, log) -> tuple[Path, TrainingSummary]:
    from transformers import AutoModelForCausalLM

    emit(log, "the training pool is empty: no GRPO step taken; saving an untrained adapter (merged = base)")
    model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg)
    save_trained(model, out_dir, [], cfg)
    return Path(out_dir), TrainingSummary()


def _trainee(profile: Profile, base_dir: Path, pool: Sequence[Task], check_policy_budget: BudgetCheck):
    """The rollout policy and the model being trained: (policy, model, pad_id, tokenize, guide_index).

    On-policy (``policy.kind == "local"``) they are one model and ``tokenize`` is None (the
    sampler's exact token ids are trained); otherwise the base checkpoint is trained on the
    re-tokenised completions of the profile's policy. On-policy, the token budget has been
    checked against every golden call of the pool (``check_policy_budget``): ``train_local_grpo``
    then scores cut completions as failures (``budget_fits_golden``); off-policy nothing was
    checked and ``grpo.mask_truncated`` decides.
    """
    from rewardbox.policy import build_policy

    cfg = profile.grpo
    if profile.policy.kind != "local":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        apply_thread_policy("auto")  # this process runs the model being trained (LocalPolicy applies it itself)

        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg)
        pad_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        return build_policy(profile.policy), model, pad_id, chat_tokenizer(tokenizer), None
    policy = build_policy(on_policy_config(profile.policy), checkpoint_dir=base_dir)
    check_policy_budget(policy, profile, pool)
    policy.model = trainable(policy.model, cfg)
    guide_index = None
    if policy.guided_tool_calls:
        guide_index = VocabularyIndex(policy.tokenizer, int(policy.model.config.vocab_size))
    return policy, policy.model, policy.pad_token_id, None, guide_index


def on_policy_config(policy_config):
    """The rollout policy's config for on-policy GRPO: ``dtype: auto`` becomes float32.

    In bf16 the sampler's log-probs and the trainer's differ by up to 0.24 on the real
    SmolLM2 weights (the slow on-policy test, docs/performance.md "Precision") against
    < 1e-3 in fp32, so GRPO rollouts and the update run in fp32 unless a profile asks for
    bf16 explicitly; probes and evaluation keep ``auto``.
    """
    return policy_config.model_copy(update={"dtype": "float32"}) if policy_config.dtype == "auto" else policy_config


def _loss_budget(cfg, policy: Policy, profile: Profile, on_policy: bool):
    """``cfg`` with Dr. GRPO's ``L_max`` set to the policy's token budget per agent turn when unset (on-policy)."""
    if cfg.max_response_tokens is not None or not on_policy:
        return cfg
    budget = getattr(policy, "max_new_tokens", None) or profile.episode.max_new_tokens
    return cfg.model_copy(update={"max_response_tokens": int(budget)})


def rollout_profile(profile: Profile) -> Profile:
    """The profile GRPO rollouts run with: episodes sample at ``grpo.temperature``, the temperature
    the trainer scores at (``episode.temperature`` is for probes, screening and evaluation)."""
    episode = profile.episode.model_copy(update={"temperature": profile.grpo.temperature})
    return profile.model_copy(update={"episode": episode})


def train_local_grpo(
    pool: Sequence[Task],
    base_dir: Path,
    out_dir: Path,
    profile: Profile,
    *,
    episode_runner: EpisodeRunnerFactory,
    check_policy_budget: BudgetCheck,
    log: ProgressSink | None = None,
    probe: ProbeHistory | None = None,
) -> tuple[Path, TrainingSummary]:
    """Train a LoRA adapter on ``pool`` with GRPO.

    Args:
        pool: training tasks (never benchmark tasks; the assets enforce it).
        base_dir, out_dir: HF checkpoint of the base policy; where the adapter and ``training_metrics.json`` go.
        profile: ``grpo`` sets the method and the rollout temperature, ``policy``/``episode``
            the rollouts (:func:`rollout_profile`).
        episode_runner, check_policy_budget: the composition root's runner factory and token-budget check.
        probe: the probe's counts and trials (``ProbeHistory``): the sampler starts from its ``(c, n)``,
            trials start after its trials; None: prior Beta(1/2, 1/2), trials from ``probe.trials``.

    Returns:
        (adapter directory, per-step metrics). With ``grpo.finetune == "full"`` the
        directory holds the whole fine-tuned checkpoint instead of an adapter.

    An empty pool (every candidate outside the kept bands) is not an error: the
    adapter is saved untrained (LoRA's B matrices are zero, so the merged model
    equals the base) with zero steps, and the caller reports it.
    """
    cfg = profile.grpo
    if not pool:
        return _untrained_adapter(base_dir, out_dir, cfg, log)
    profile = rollout_profile(profile)
    policy, model, pad_id, tokenize, guide_index = _trainee(profile, base_dir, pool, check_policy_budget)
    probe, cfg = probe or ProbeHistory(), _loss_budget(cfg, policy, profile, on_policy=tokenize is None)
    progress = Progress(cfg.steps, "grpo_checkpoint", log, unit="steps", every_frac=0, outcomes=False)

    def after_step(metrics: StepMetrics) -> None:
        if tokenize is None:
            policy.weights_changed()  # on-policy: the cached prefix KV was computed with the old weights
        progress.update(note=step_note(metrics))  # one line per step as it ends

    # the rollouts of a step (B x G, plus refills) wait for a free slot: at most episode.concurrency
    # sandboxes are open at once, whatever B x G is
    executor = LocalExecutor(profile.episode.concurrency)

    async def main() -> TrainingSummary:
        try:
            async with executor.session(partial(episode_runner, profile), policy) as session:
                return await train_grpo(model, pad_id, _tasks(pool, profile, probe), session.run_one, cfg,
                                        on_step=after_step, tokenize=tokenize, guide_index=guide_index,
                                        trials=run_trials_after_probe(profile, probe), budget_fits_golden=tokenize is None)
        finally:
            await policy.aclose()
            progress.close()

    summary = asyncio.run(main())
    save_trained(model, out_dir, [m.as_dict() for m in summary.steps], cfg)
    return Path(out_dir), summary
