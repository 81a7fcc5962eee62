"""On-policy scoring: the trainer's log-probs equal the sampler's (real SmolLM2 weights, slow) and
per-row seeded sampling that does not depend on the batch (fast pieces + real model)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rewardbox.policy.base import ChatRequest
from rewardbox.policy.sampling import PerRowSampler
from rewardbox.sandbox.base import ToolSpec
from rewardbox.training.logprobs import Sample, completion_logprobs, guide_masks


def test_per_row_sampler_draws_depend_only_on_the_row_seed():
    torch.manual_seed(1)
    scores = torch.randn(3, 50)
    alone = PerRowSampler([7])
    mixed = PerRowSampler([3, 7, 11])
    picks_alone = [int(alone(None, scores[1:2]).argmax()) for _ in range(20)]
    picks_mixed = [int(mixed(None, scores).argmax(dim=-1)[1]) for _ in range(20)]
    assert picks_alone == picks_mixed
    assert len(set(picks_alone)) > 1  # it does sample, not argmax
    expected = torch.log_softmax(scores[1], -1)[picks_alone].tolist()
    assert alone.logprobs[0] == pytest.approx(expected, abs=1e-6)


def test_per_row_sampler_output_is_one_hot():
    out = PerRowSampler([0, 1])(None, torch.randn(2, 9))
    assert ((out == 0).sum(dim=-1) == 1).all() and torch.isinf(out).sum() == 2 * 8


def test_turn_seeds_differ_by_task_trial_and_turn():
    from rewardbox.episode.seeds import turn_seed

    seeds = {
        turn_seed(0, uid, trial, turn)
        for uid in ("a", "b")
        for trial in range(3)
        for turn in range(3)
    }
    assert len(seeds) == 18 and all(0 <= s < 2**63 for s in seeds)
    assert turn_seed(0, "a", 1, 2) == turn_seed(0, "a", 1, 2) != turn_seed(1, "a", 1, 2)


class _PieceTokenizer:
    """Token i decodes to PIECES[i] (the guide reads the decoded text)."""

    PIECES = ["<tool_call>", '{"name": "', "get", "_order", '"', "cancel", "x", ", ", "zz"]

    def __len__(self):
        return len(self.PIECES)

    def batch_decode(self, ids):
        return [self.PIECES[i[0]] for i in ids]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.PIECES[int(i)] for i in ids)


def test_guide_masks_follow_the_guide_and_scoring_applies_them():
    from transformers import LlamaConfig, LlamaForCausalLM

    from rewardbox.policy.guided import VocabularyIndex

    index = VocabularyIndex(_PieceTokenizer(), vocab_size=9)
    signatures = {"get_order": ("order_id",), "cancel_order": ("order_id",)}
    masks = guide_masks(index, signatures, [0, 1, 2, 3, 4, 7])
    # inside the name string (after '{"name": "' and after 'get') the guide restricts; elsewhere not
    assert [t for t, _ in masks] == [2, 3, 4]
    allowed = {t: [i for i in range(9) if keep[i]] for t, keep in masks}
    assert allowed[2] == [2, 5] and allowed[3] == [3]
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=9,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    ).eval()
    sample = Sample([8, 8], [0, 1, 2, 3, 4, 7], 1.0, guide_masks=masks)
    with torch.no_grad():
        scored, _ = completion_logprobs(model, [sample], pad_id=8, temperature=0.5)
        logits = model(input_ids=torch.tensor([[8, 8, 0, 1, 2, 3, 4]])).logits[0, 1:] / 0.5
    assert scored[0, 3].item() == pytest.approx(0.0, abs=1e-6)  # only one token allowed at t = 3
    expected_t2 = torch.log_softmax(logits[2][[2, 5]], -1)[0].item()
    assert scored[0, 2].item() == pytest.approx(expected_t2, abs=1e-5)
    assert scored[0, 0].item() == pytest.approx(
        torch.log_softmax(logits[0], -1)[0].item(), abs=1e-5
    )


# --- slow: real SmolLM2 weights -------------------------------------------------------------------------


def _tools() -> list[ToolSpec]:
    s = {"type": "string"}
    return [
        ToolSpec(
            "cancel_order",
            "Cancel an order.",
            {
                "type": "object",
                "properties": {"order_id": s, "reason": s},
                "required": ["order_id", "reason"],
            },
        ),
        ToolSpec(
            "get_order_details",
            "Look up an order.",
            {"type": "object", "properties": {"order_id": s}, "required": ["order_id"]},
        ),
    ]


def _requests(asks: list[str], seeds: list[int]) -> list[ChatRequest]:
    return [
        ChatRequest(
            messages=[
                {"role": "system", "content": "You are a retail support agent."},
                {"role": "user", "content": ask},
            ],
            tools=_tools(),
            max_new_tokens=40,
            temperature=0.7,
            sampling_seed=seed,
        )
        for ask, seed in zip(asks, seeds)
    ]


ASKS = [
    "Please cancel my order #W6021, I ordered by mistake.",
    "What is the status of order #W1137?",
    "Cancel order #W7788 please, no longer needed.",
    "Can you look up order #W5555 for me?",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "dtype",
    [
        "float32",
        pytest.param(
            "bfloat16",
            marks=pytest.mark.xfail(
                strict=False,
                reason="bf16 sampler vs trainer gap measured 0.24 (prefix-cache; no-cache unmeasured): "
                "on bf16 weights GRPO divides by the trainer's own log-probs and weighs tokens by "
                "the truncated sampler ratio (grpo.old_logprobs, docs/performance.md)",
            ),
        ),
    ],
)
@pytest.mark.parametrize(
    "prefix_cache_min_tokens", [64, 1_000_000], ids=["prefix-cache", "no-cache"]
)
def test_trainer_logprobs_equal_sampler_logprobs(
    smollm2_checkpoint, prefix_cache_min_tokens, dtype
):
    from rewardbox.policy.local import LocalPolicy

    policy = LocalPolicy(
        smollm2_checkpoint,
        max_batch_size=4,
        prefix_cache_min_tokens=prefix_cache_min_tokens,
        dtype=dtype,
    )
    try:
        assert next(policy.model.parameters()).dtype == getattr(torch, dtype)
        gap = _sampler_trainer_gap(policy)
        used_cache = policy.prefix_cache.hits + policy.prefix_cache.misses > 0
        assert used_cache == (prefix_cache_min_tokens == 64)
        assert gap < 1e-3, f"sampler and trainer log-probs differ by up to {gap}"
    finally:
        asyncio.run(policy.aclose())


def _sampler_trainer_gap(policy, before_scoring=lambda: None) -> float:
    """Largest |sampler log-prob - trainer log-prob| over ``ASKS`` sampled by ``policy`` (guide on),
    the trainer scoring with ``policy.model`` after ``before_scoring()``."""
    from rewardbox.policy.chat_template import render_prompt
    from rewardbox.policy.guided import VocabularyIndex, tool_signatures

    requests = _requests(ASKS, [11, 12, 13, 14])
    prompts = [
        policy.tokenizer(render_prompt(r.messages, r.tools), add_special_tokens=False).input_ids
        for r in requests
    ]
    completions = policy.generate_batch(requests, prompts)
    before_scoring()
    index = VocabularyIndex(policy.tokenizer, int(policy.model.config.vocab_size))
    samples = [
        Sample(
            c.prompt_token_ids,
            c.completion_token_ids,
            1.0,
            c.completion_logprobs,
            guide_masks(index, tool_signatures(_tools()), c.completion_token_ids),
        )
        for c in completions
    ]
    assert sum(len(s.guide_masks) for s in samples) > 0, (
        "the guide never acted: the test would not cover it"
    )
    with torch.no_grad():
        scored, mask = completion_logprobs(
            policy.model, samples, policy.pad_token_id, temperature=0.7
        )
    old = torch.zeros_like(scored)
    for i, s in enumerate(samples):
        assert len(s.old_logprobs) == len(s.completion_ids)
        old[i, : len(s.old_logprobs)] = torch.tensor(s.old_logprobs)
    return ((scored - old).abs() * mask).max().item()


@pytest.mark.slow
def test_merged_lora_sampler_logprobs_equal_the_unmerged_trainers(smollm2_checkpoint):
    """GRPO's rollouts sample from the adapter merged into the weights (``grpo.sample_merged``); the
    trainer scores them with it unmerged: the gap stays under 1e-3 on the real weights."""
    from rewardbox.policy.local import LocalPolicy
    from rewardbox.training.checkpoint import trainable
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.merged_sampling import SamplingWeights

    policy = LocalPolicy(smollm2_checkpoint, max_batch_size=4, dtype="float32")
    try:
        policy.model = trainable(policy.model, GRPOConfig())
        torch.manual_seed(0)
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:  # a trained adapter: merged weights differ from the base
                param.data.normal_(0, 1e-2)
        weights = SamplingWeights(policy.model, policy, merge=True)
        weights.for_rollouts()
        gap = _sampler_trainer_gap(policy, before_scoring=weights.for_update)
        assert weights.switches == 2 and not weights.merged
        assert gap < 1e-3, f"merged sampler and unmerged trainer log-probs differ by up to {gap}"
    finally:
        asyncio.run(policy.aclose())


@pytest.mark.slow
def test_same_seed_same_tokens_whatever_shares_the_batch(smollm2_checkpoint):
    from rewardbox.policy.chat_template import render_prompt
    from rewardbox.policy.local import LocalPolicy

    # float32 whatever the host's "auto" picks: the same seed gives the same tokens whatever shares the
    # batch in float32; in bf16 the batch changes the rounding (docs/grpo_training.md)
    policy = LocalPolicy(
        smollm2_checkpoint, max_batch_size=4, prefix_cache_min_tokens=1_000_000, dtype="float32"
    )
    try:

        def run(requests):
            prompts = [
                policy.tokenizer(
                    render_prompt(r.messages, r.tools), add_special_tokens=False
                ).input_ids
                for r in requests
            ]
            return [c.completion_token_ids for c in policy.generate_batch(requests, prompts)]

        alone = run(_requests(ASKS[:1], [42]))[0]
        with_others = run(_requests([ASKS[2], ASKS[0], ASKS[3]], [7, 42, 9]))[1]
        again_other_company = run(_requests([ASKS[1], ASKS[0]], [5, 42]))[1]
        other_seed = run(_requests(ASKS[:1], [43]))[0]
        assert alone == with_others == again_other_company
        assert other_seed != alone
    finally:
        asyncio.run(policy.aclose())
