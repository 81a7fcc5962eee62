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
from functools import partial
from pathlib import Path

from rewardbox.config.profile import Profile
from rewardbox.episode.attempt import run_attempt
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.evaluation.services import check_policy_budget, episode_runner
from rewardbox.policy.chat_template import render_prompt
from rewardbox.tasks.schema import Task
from rewardbox.policy.guided import VocabularyIndex
from rewardbox.training.checkpoint import save_trained, trainable
from rewardbox.training.curriculum import PosteriorTaskSampler
from rewardbox.training.groups import task_stream
from rewardbox.training.trainer import StepMetrics, TokenizeTurn, TrainingSummary, train_grpo

END_OF_TURN = "<|im_end|>"


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


def _step_logger(log: Callable[[str], None] | None) -> Callable[[StepMetrics], None]:
    def report(metrics: StepMetrics) -> None:
        if log:
            log(f"step {metrics.step}: mean_reward={metrics.mean_reward:.3f} "
                f"zero_variance={metrics.zero_variance_frac:.2f} loss={metrics.loss} "
                f"logprob_gap_max={metrics.logprob_gap_max} clip_frac={metrics.clip_frac} "
                f"truncated={metrics.truncated_completions}/{metrics.completions} bands=[{metrics.band_histogram}] "
                f"samples={metrics.samples} tokens={metrics.policy_tokens} ({metrics.seconds:.0f}s)")

    return report


def _tasks(pool: Sequence[Task], profile: Profile):
    """The task stream ``grpo.task_sampling`` asks for (bands cut where task selection cuts them)."""
    cfg = profile.grpo
    if cfg.task_sampling == "uniform":
        return task_stream(pool, cfg.seed)
    return PosteriorTaskSampler(pool, cfg.seed, boundaries=profile.selection.boundaries)


def _untrained_adapter(base_dir: Path, out_dir: Path, cfg, log) -> tuple[Path, TrainingSummary]:
    from transformers import AutoModelForCausalLM

    if log:
        log("the training pool is empty: no GRPO step taken; saving an untrained adapter (merged = base)")
    model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg)
    save_trained(model, out_dir, [], cfg)
    return Path(out_dir), TrainingSummary()


def train_local_grpo(
    pool: Sequence[Task],
    base_dir: Path,
    out_dir: Path,
    profile: Profile,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[Path, TrainingSummary]:
    """Train a LoRA adapter on ``pool`` with GRPO.

    Args:
        pool: training tasks (never benchmark tasks; the assets enforce it).
        base_dir: HF checkpoint directory of the base policy.
        out_dir: where the adapter and ``training_metrics.json`` go.
        profile: ``grpo`` sets the method, ``policy``/``episode`` the rollouts.

    Returns:
        (adapter directory, per-step metrics). With ``grpo.finetune == "full"`` the
        directory holds the whole fine-tuned checkpoint instead of an adapter.

    An empty pool (every candidate outside the kept bands) is not an error: the
    adapter is saved untrained (LoRA's B matrices are zero, so the merged model
    equals the base) with zero steps, and the caller reports it.
    """
    from rewardbox.policy import build_policy

    cfg = profile.grpo
    if not pool:
        return _untrained_adapter(base_dir, out_dir, cfg, log)
    episode = profile.episode.model_copy(update={"temperature": cfg.temperature})
    profile = profile.model_copy(update={"episode": episode})
    on_policy = profile.policy.kind == "local"
    guide_index = None
    if on_policy:
        policy = build_policy(profile.policy, checkpoint_dir=base_dir)
        check_policy_budget(policy, profile, pool)
        policy.model = trainable(policy.model, cfg)
        model, pad_id, tokenize = policy.model, policy.pad_token_id, None
        if policy.guided_tool_calls:
            guide_index = VocabularyIndex(policy.tokenizer, int(model.config.vocab_size))
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        policy = build_policy(profile.policy)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = trainable(AutoModelForCausalLM.from_pretrained(base_dir), cfg)
        pad_id, tokenize = tokenizer.convert_tokens_to_ids(END_OF_TURN), chat_tokenizer(tokenizer)

    report = _step_logger(log)

    def after_step(metrics: StepMetrics) -> None:
        if on_policy:
            policy.weights_changed()  # the cached prefix KV was computed with the old weights
        report(metrics)

    async def main() -> TrainingSummary:
        try:
            async with episode_runner(profile, policy) as runner:
                return await train_grpo(model, pad_id, _tasks(pool, profile), partial(run_attempt, runner),
                                        cfg, on_step=after_step, tokenize=tokenize, guide_index=guide_index)
        finally:
            await policy.aclose()

    summary = asyncio.run(main())
    save_trained(model, out_dir, [m.as_dict() for m in summary.steps], cfg)
    return Path(out_dir), summary
