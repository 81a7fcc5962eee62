"""LocalPolicy: completion assembly (fast) and the real embedded model (slow); decoding: test_decode.py."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from rewardbox.policy.base import ChatRequest  # noqa: E402
from rewardbox.policy.local import LocalPolicy  # noqa: E402


class _Tok:
    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"t{i}" for i in ids)


def test_completion_cut_at_stop_token_or_budget(retail_tools):
    policy = LocalPolicy.__new__(LocalPolicy)
    policy.stop_token_ids, policy.tokenizer = [2, 0], _Tok()
    request = ChatRequest(messages=[], tools=retail_tools)
    stopped = policy._completion(request, [1, 5], [7, 8, 2, 2, 2], 1.0, 2)
    assert (stopped.completion_token_ids, stopped.finish_reason, stopped.raw_text) == (
        [7, 8, 2],
        "stop",
        "t7 t8",
    )
    assert (stopped.input_tokens, stopped.output_tokens, stopped.prompt_token_ids) == (2, 3, [1, 5])
    cut = policy._completion(request, [1], [7, 8, 9], 1.0, 2)
    assert (cut.completion_token_ids, cut.finish_reason, cut.output_tokens) == (
        [7, 8, 9],
        "length",
        3,
    )


class _PieceTok:
    PIECES = [
        "<|im_start|>",
        "assistant\n",
        "<think>\n",
        "Still weighing ORD-12 or",
        "user\nType <think><|im_end|>\n",
        "<|im_end|>",
    ]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.PIECES[i] for i in ids)


def test_issue12_item1_local_policy_reads_the_reasoning_state_of_its_prompt(retail_tools):
    policy = LocalPolicy.__new__(LocalPolicy)
    policy.stop_token_ids, policy.tokenizer = [5], _PieceTok()
    request = ChatRequest(messages=[], tools=retail_tools)
    opened = policy._completion(
        request, [0, 1, 2], [3], 1.0, 1
    )  # prompt ends "<|im_start|>assistant\n<think>\n"
    assert opened.finish_reason == "length"
    assert (opened.interpretation.reasoning, opened.interpretation.content) == (
        "Still weighing ORD-12 or",
        "",
    )
    assert opened.interpretation.events == ("truncated_reasoning",)
    # own case: the user typed <think> earlier; the generation prompt opened nothing, so the text is content
    plain = policy._completion(request, [0, 4, 0, 1], [3], 1.0, 1)
    assert (plain.interpretation.reasoning, plain.interpretation.content) == (
        "",
        "Still weighing ORD-12 or",
    )


# --- slow: the real embedded SmolLM2 ---------------------------------------------------------------------


@pytest.mark.slow
def test_embedded_model_batched_completion(smollm2_checkpoint, retail_tools):
    from transformers import AutoTokenizer

    from rewardbox.policy.chat_template import render_prompt
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors, read_marker

    marker = read_marker(smollm2_checkpoint)
    assert marker and marker["source"].endswith(".gguf")
    assert convert_gguf_to_safetensors(smollm2_checkpoint) == smollm2_checkpoint  # idempotent
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is ORD-9?"},
    ]
    tokenizer = AutoTokenizer.from_pretrained(smollm2_checkpoint)
    tool_dicts = [t.to_openai() for t in retail_tools]
    assert tokenizer.apply_chat_template(
        messages, tools=tool_dicts, tokenize=False, add_generation_prompt=True
    ) == render_prompt(messages, retail_tools)

    async def run():
        policy = LocalPolicy(smollm2_checkpoint, max_batch_size=2, batch_wait_ms=500, seed=0)
        try:
            # requests sharing a prompt prefix are batched (and reuse its cached KV); the other joins when a row leaves
            requests = [
                ChatRequest(
                    messages=messages, tools=retail_tools, max_new_tokens=16, temperature=0.0
                ),
                ChatRequest(messages=messages[1:], tools=[], max_new_tokens=16, temperature=1.0),
                ChatRequest(
                    messages=messages, tools=retail_tools, max_new_tokens=8, temperature=1.0
                ),
            ]
            return policy, await asyncio.gather(*(policy.complete(r) for r in requests))
        finally:
            await policy.aclose()

    policy, completions = asyncio.run(run())
    stop_ids = set(policy.stop_token_ids)
    sizes = [c.extra["batch_size"] for c in completions]  # the most rows each decoded with
    assert sizes[0] == sizes[2] == 2 and sizes[1] in (
        1,
        2,
    )  # the third joins the batch when a row leaves
    assert completions[0].cached_input_tokens > 300 and completions[1].cached_input_tokens == 0
    for completion, with_tools, budget in zip(completions, (True, False, True), (16, 16, 8)):
        ids = completion.completion_token_ids
        assert 1 <= len(ids) <= budget and completion.output_tokens == len(ids)
        assert completion.input_tokens == len(completion.prompt_token_ids)
        if completion.finish_reason == "stop":
            assert ids[-1] in stop_ids and not stop_ids & set(ids[:-1])
        else:
            assert (
                completion.finish_reason == "length"
                and len(ids) == budget
                and not stop_ids & set(ids)
            )
        text_ids = ids[:-1] if completion.finish_reason == "stop" else ids
        assert completion.raw_text == policy.tokenizer.decode(text_ids)
        prompt = render_prompt(
            messages if with_tools else messages[1:], retail_tools if with_tools else []
        )
        assert (
            completion.prompt_token_ids
            == policy.tokenizer(prompt, add_special_tokens=False).input_ids
        )
    assert completions[0].prompt_token_ids != completions[1].prompt_token_ids


@pytest.mark.slow
def test_peft_adapter_is_merged_on_load(smollm2_checkpoint, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(smollm2_checkpoint)
    before = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    # both dtypes whatever the host's "auto" picks (a CPU with bf16 units resolves auto to bf16)
    bf16 = LocalPolicy(smollm2_checkpoint, adapter_dir=tmp_path / "adapter", dtype="bfloat16")
    try:
        merged_bf16 = bf16.model.model.layers[0].self_attn.q_proj.weight
        assert merged_bf16.dtype == torch.bfloat16 and not hasattr(bf16.model, "peft_config")
        assert not torch.equal(merged_bf16, before.to(torch.bfloat16))
    finally:
        asyncio.run(bf16.aclose())
    policy = LocalPolicy(smollm2_checkpoint, adapter_dir=tmp_path / "adapter", dtype="float32")
    try:
        merged = policy.model.model.layers[0].self_attn.q_proj.weight
        assert merged.dtype == torch.float32
        assert not hasattr(policy.model, "peft_config")
        assert not torch.allclose(merged, before)
        ids = policy.tokenizer(
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
        ).input_ids
        out = policy.generate_batch(
            [ChatRequest(messages=[], tools=[], max_new_tokens=4, temperature=0.0)], [ids]
        )
        assert 1 <= len(out[0].completion_token_ids) <= 4
    finally:
        asyncio.run(policy.aclose())


@pytest.mark.slow
def test_embedded_model_staggered_requests_join_the_running_batch_with_their_own_tokens(
    smollm2_checkpoint, retail_tools
):
    """Continuous batching on the real weights: turns arriving 0.3 s apart share decode steps (a joiner's
    shared prefix comes from the prefix cache), and each gets the tokens it gets decoded alone."""
    system = {
        "role": "system",
        "content": "You are a support agent for an online shop. Use the tools.",
    }
    asks = [
        "Where is order 6021?",
        "Please cancel order 7001.",
        "Change the zip of order 12 to 10115.",
        "What stores do you have?",
    ]
    requests = [
        ChatRequest(
            messages=[system, {"role": "user", "content": ask}],
            tools=retail_tools,
            max_new_tokens=24,
            temperature=(0.0, 0.7)[i % 2],
            seed=10 + i,
        )
        for i, ask in enumerate(asks)
    ]
    # float32: a joined row equals the row alone to 1e-4 only there; in bf16 what shares a decode
    # step changes the rounding (docs/performance.md, "Precision")
    policy = LocalPolicy(smollm2_checkpoint, max_batch_size=8, seed=0, dtype="float32")

    async def staggered():
        async def one(i):
            await asyncio.sleep(0.3 * i)
            return await policy.complete(requests[i])

        return await asyncio.gather(*(one(i) for i in range(len(requests))))

    try:
        joined = asyncio.run(staggered())
        alone = [
            policy.generate_batch([r], [c.prompt_token_ids])[0] for r, c in zip(requests, joined)
        ]
    finally:
        asyncio.run(policy.aclose())
    assert max(c.extra["batch_size"] for c in joined) >= 2, [c.extra["batch_size"] for c in joined]
    assert all(
        c.cached_input_tokens > 200 for c in joined[1:]
    )  # joiners reused the cached shared prefix
    assert [c.completion_token_ids for c in joined] == [c.completion_token_ids for c in alone]
    assert [c.completion_logprobs for c in joined] == [
        pytest.approx(c.completion_logprobs, abs=1e-4) for c in alone
    ]
