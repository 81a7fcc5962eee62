"""Guided tool-call names and keys: the state parser, the vocabulary masks, the logits processor, the real model."""

from __future__ import annotations

import asyncio
import re

import pytest

torch = pytest.importorskip("torch")

from rewardbox.errors import InfrastructureError  # noqa: E402
from rewardbox.policy.base import ChatRequest, Completion, Interpretation  # noqa: E402
from rewardbox.policy.guided import (  # noqa: E402
    ConstraintEvent,
    GuidedDecodingError,
    ToolCallGuide,
    VocabularyIndex,
    open_string,
    record_forced_close,
    tool_signatures,
)
from rewardbox.sandbox.base import ToolSpec  # noqa: E402

SIGNATURES = {"cancel_order": ("order_id",), "cancel_all": (), "get_order": ("order_id", "verbose")}


def test_open_string_finds_the_name_or_key_being_written():
    names = tuple(SIGNATURES)
    assert open_string('<tool_call>{"name": "can', SIGNATURES) == (names, "can")
    assert open_string('Sure.\n<tool_call>{"name":"', SIGNATURES) == (names, "")
    # a key of a known tool's arguments, first or after a finished pair
    assert open_string('<tool_call>{"name": "get_order", "arguments": {"', SIGNATURES) == (
        ("order_id", "verbose"),
        "",
    )
    assert open_string(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "7", "ver', SIGNATURES
    ) == (("order_id", "verbose"), "ver")
    # values, closed names, unknown tools, tools without parameters and plain text stay free
    assert (
        open_string('<tool_call>{"name": "get_order", "arguments": {"order_id": "OR', SIGNATURES)
        is None
    )
    assert open_string('<tool_call>{"name": "get_order"', SIGNATURES) is None
    assert open_string('<tool_call>{"name": "nope", "arguments": {"', SIGNATURES) is None
    assert open_string('<tool_call>{"name": "cancel_all", "arguments": {"', SIGNATURES) is None
    assert open_string('I will say "name": "x', SIGNATURES) is None
    # a second call is guided like the first
    first = '<tool_call>{"name": "get_order", "arguments": {"order_id": "1"}}</tool_call>\n'
    assert open_string(first + '<tool_call>{"name": "cancel_o', SIGNATURES) == (names, "cancel_o")


def test_tool_signatures_from_specs_and_openai_dicts():
    spec = ToolSpec(
        "cancel_order",
        "Cancel.",
        {"type": "object", "properties": {"order_id": {"type": "string"}}},
    )
    openai = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}
    assert tool_signatures([spec, openai]) == {"cancel_order": ("order_id",), "ping": ()}


class _PieceTokenizer:
    """A tokenizer whose token i decodes to PIECES[i] (unit tests only)."""

    PIECES = [
        "cancel",
        "_order",
        "_ord",
        "er",
        "_all",
        '"',
        '",',
        '"}',
        "x",
        " cancel",
        "get",
        "_",
        "order_id",
        "<",
    ]

    def __len__(self):
        return len(self.PIECES)

    def batch_decode(self, rows):
        return ["".join(self.PIECES[i] for i in row) for row in rows]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.PIECES[int(i)] for i in ids)


def _allowed(index, allowed, partial):
    mask = index.mask(allowed, partial)
    return None if mask is None else {index.pieces[i] for i in range(len(index.pieces)) if mask[i]}


def test_vocabulary_mask_keeps_prefixes_and_closing_tokens():
    index = VocabularyIndex(
        _PieceTokenizer(), vocab_size=16
    )  # the model's vocabulary may be wider than the tokenizer's
    names = tuple(SIGNATURES)
    assert _allowed(index, names, "") == {"cancel", "get"}  # no leading space, no other text
    assert _allowed(index, names, "cancel") == {"_order", "_ord", "_all", "_"}
    assert _allowed(index, names, "cancel_ord") == {"er"}
    # at a whole name: only its closing quote, alone or with what follows it
    assert _allowed(index, names, "cancel_order") == {'"', '",', '"}'}
    # nothing fits (the model went elsewhere first): not forced
    assert index.mask(names, "cancel_x") is None
    assert index.mask(names, "cancel") is index.mask(names, "cancel")  # cached


def test_guide_masks_only_rows_inside_a_name():
    tok = _PieceTokenizer()
    index = VocabularyIndex(tok, vocab_size=16)
    prompt_len = 1
    # row 0 wrote '<' then nothing useful; row 1 is inside a name; the guide reads only the generated part
    guide = ToolCallGuide(index, [SIGNATURES, SIGNATURES, {}], prompt_len)
    index.tokenizer = _TextTokenizer(
        ["x", '<tool_call>{"name": "cancel', '<tool_call>{"name": "cancel']
    )
    scores = torch.zeros((3, 16))
    out = guide(torch.tensor([[0, 1], [0, 2], [0, 3]]), scores)
    assert torch.equal(out[0], scores[0]) and torch.equal(
        out[2], scores[2]
    )  # no call / unguided row
    kept = {tok.PIECES[i] for i in range(len(tok.PIECES)) if out[1, i] == 0}
    assert kept == {"_order", "_ord", "_all", "_"}
    assert torch.isinf(
        out[1, len(tok.PIECES) :]
    ).all()  # ids past the tokenizer are never allowed inside a name


class _TextTokenizer:
    """Decodes row r's generated ids to a fixed text (the guide decodes per row; unit tests only)."""

    def __init__(self, texts):
        self.texts = texts

    def decode(self, ids, skip_special_tokens=False):
        row = {1: 0, 2: 1, 3: 2}[int(ids[0])]
        return self.texts[row]


# --- slow: the real embedded SmolLM2 ---------------------------------------------------------------------


@pytest.mark.slow
def test_guided_model_names_only_real_tools(smollm2_checkpoint, retail_tools):
    from rewardbox.policy.local import LocalPolicy

    names = {t.name for t in retail_tools}
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Hi, please cancel my order 6021."},
    ]

    async def run(guided):
        policy = LocalPolicy(
            smollm2_checkpoint, max_batch_size=8, batch_wait_ms=200, guided_tool_calls=guided
        )
        try:
            requests = [
                ChatRequest(
                    messages=messages,
                    tools=retail_tools,
                    max_new_tokens=40,
                    temperature=0.7,
                    seed=100 + i,
                )
                for i in range(8)
            ]
            return await asyncio.gather(*(policy.complete(r) for r in requests))
        finally:
            await policy.aclose()

    guided = asyncio.run(run(True))
    written = [
        m
        for c in guided
        for m in re.findall(r'<tool_call>\s*\{\s*"name"\s*:\s*"([^"]*)"', c.raw_text)
    ]
    assert written, "the model opened no call at all"
    assert set(written) <= names, written


# --- issue #12 item 7: nothing allowed never releases the constraint -------------------------------------


class _NoContinuationTokenizer(_PieceTokenizer):
    """No piece continues 'cancel_ord' ('er', 'e', 'r' missing); quotes exist."""

    PIECES = [
        "cancel",
        "_ord",
        "_all",
        '"',
        '",',
        '"}',
        "x",
        "get",
        "_order",
        "order_id",
        "_id",
        "<",
    ]


def _kept(out_row, pieces):
    return {pieces[i] for i in range(len(pieces)) if out_row[i] == 0}


def test_issue12_item7_name_no_token_continues_forces_the_closing_quote():
    tok = _NoContinuationTokenizer()
    index = VocabularyIndex(tok, vocab_size=14)
    assert (
        index.mask(tuple(SIGNATURES), "cancel_ord") is None
    )  # nothing keeps the name a real prefix
    guide = ToolCallGuide(index, [SIGNATURES, SIGNATURES], prompt_len=1)
    index.tokenizer = _TextTokenizer(['<tool_call>{"name": "cancel_ord', "plain text"])
    scores = torch.zeros((2, 14))
    out = guide(torch.tensor([[0, 1], [0, 2]]), scores)
    assert _kept(out[0], tok.PIECES) == {'"', '",', '"}'}  # forced closed, not released
    assert torch.isinf(out[0, len(tok.PIECES) :]).all()
    assert torch.equal(out[1], scores[1])
    assert guide.events == [ConstraintEvent(row=0, partial="cancel_ord", allowed=tuple(SIGNATURES))]


def test_issue12_item7_own_case_argument_key_off_every_prefix_is_forced_closed():
    tok = _PieceTokenizer()
    index = VocabularyIndex(tok, vocab_size=16)
    guide = ToolCallGuide(index, [SIGNATURES], prompt_len=1)
    index.tokenizer = _TextTokenizer(['<tool_call>{"name": "get_order", "arguments": {"order_x'])
    out = guide(torch.tensor([[0, 1]]), torch.zeros((1, 16)))
    assert _kept(out[0], tok.PIECES) == {'"', '",', '"}'}
    assert guide.events == [ConstraintEvent(0, "order_x", ("order_id", "verbose"))]


def test_issue12_item7_vocabulary_that_cannot_close_a_string_is_a_system_error():
    class NoQuotes(_PieceTokenizer):
        PIECES = ["cancel", "_ord", "x"]

    index = VocabularyIndex(NoQuotes(), vocab_size=3)
    with pytest.raises(GuidedDecodingError, match="no vocabulary token starts with"):
        index.closing_mask()
    assert issubclass(GuidedDecodingError, InfrastructureError)


def test_issue12_item7_forced_close_is_recorded_on_the_completion():
    completion = Completion(raw_text="", interpretation=Interpretation(events=("unclosed_call",)))
    record_forced_close(completion, ConstraintEvent(0, "cancel_ord", ("cancel_order",)))
    record_forced_close(completion, ConstraintEvent(0, "get_x", ("get_order",)))
    assert completion.interpretation.events == ("unclosed_call", "guided_string_forced_closed")
    assert completion.extra["guided_forced_close"] == ["cancel_ord", "get_x"]
