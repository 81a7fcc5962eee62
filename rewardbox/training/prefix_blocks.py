"""Which shared prompt prefixes one optimiser step encodes: blocks over the trie of its prompts.

``shared_prefix.scored_micro_batches`` encodes each block's prefix once per step and scores the
block's rows on top of it; this module only plans (docs/performance.md, "The GRPO update").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from rewardbox.policy.prefix_cache import common_prefix_len
from rewardbox.training import logprobs as _logprobs
from rewardbox.training.logprobs import Sample


@dataclass
class Block:
    """Samples scored against one shared prompt prefix of ``prefix_len`` tokens (0: none).

    Attributes:
        samples: the rows scored directly after the prefix (each keeps >= 1 own prompt token).
        prefix_len: the prompt prefix every sample of the block and of its children starts with.
        children: blocks whose longer prefixes extend this one; each encodes only its extension,
            on top of this block's key/value states (a later turn's prompt extends its first turn's).
    """

    samples: list[Sample]
    prefix_len: int
    children: list[Block] = field(default_factory=list)

    def all_samples(self) -> list[Sample]:
        """The block's own rows and, after them, its children's, depth first."""
        return [s for block in self.walk() for s in block.samples]

    def walk(self) -> list[Block]:
        """This block and every block nested in it, depth first (parents before children)."""
        out, stack = [], [self]
        while stack:
            block = stack.pop()
            out.append(block)
            stack.extend(reversed(block.children))
        return out


def tokens_run(blocks: Sequence[Block], encoded: int = 0) -> int:
    """Tokens the decoder runs for ``blocks`` under an already encoded prefix of ``encoded`` tokens:
    each block's prefix extension once, and every row's tokens after its block's prefix."""
    total, stack = 0, [(block, encoded) for block in blocks]
    while stack:
        block, below = stack.pop()
        base = max(below, block.prefix_len)
        total += base - below
        total += sum(len(s.prompt_ids) + len(s.completion_ids) - base for s in block.samples)
        stack.extend((child, base) for child in block.children)
    return total


class _Trie:
    """The dynamic programme of ``plan_blocks`` over samples sorted by prompt (see there)."""

    def __init__(self, samples: list[Sample], min_shared: int):
        self.samples, self.min_shared = samples, min_shared
        self.lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
        self.adjacent = [
            common_prefix_len([samples[i].prompt_ids, samples[i + 1].prompt_ids])
            for i in range(len(samples) - 1)
        ]
        self.memo: dict[tuple[int, int, int], tuple[int, list]] = {}

    def runs(self, i: int, j: int, depth: int) -> list[tuple[int, int]]:
        """``samples[i:j]`` cut where adjacent prompts share no more than ``depth`` tokens."""
        cuts = [k + 1 for k in range(i, j - 1) if self.adjacent[k] <= depth]
        return list(zip([i, *cuts], [*cuts, j]))

    def solve(self, i: int, j: int, base: int) -> tuple[int, list]:
        """Fewest tokens for ``samples[i:j]`` over an encoded ``base``-token prefix, and the plan:
        a list of sample indices (rows) and ``(depth, plan)`` pairs (encoded prefixes)."""
        key = (i, j, base)
        if key not in self.memo:
            self.memo[key] = self._solve(i, j, base)
        return self.memo[key]

    def _solve(self, i: int, j: int, base: int) -> tuple[int, list]:
        if j - i == 1:
            return self.lengths[i] - base, [i]
        prompts = (len(self.samples[k].prompt_ids) for k in range(i, j))
        depth = min(min(self.adjacent[i : j - 1]), min(prompts) - 1)
        parts = self.runs(i, j, depth)

        def planned(part: tuple[int, int], b: int) -> tuple[int, list]:
            if part == (i, j):  # capped below what the run shares: its samples are rows
                return sum(self.lengths[k] - b for k in range(i, j)), list(range(i, j))
            return self.solve(*part, b)

        on_base = [planned(part, base) for part in parts]
        shares = depth - base >= self.min_shared
        on_depth = [planned(part, depth) for part in parts] if shares else []
        best: list[tuple[int, list]] = [(0, [])]  # best[k]: the first k parts
        for k in range(1, len(parts) + 1):
            cost, plan = best[k - 1]
            choice = (cost + on_base[k - 1][0], plan + on_base[k - 1][1])
            shared_cost = 0
            for m in range(k - 1, -1, -1) if on_depth else ():  # parts[m:k] share the depth
                shared_cost += on_depth[m][0]
                cost = best[m][0] + depth - base + shared_cost
                if cost < choice[0]:
                    group = [item for part in on_depth[m:k] for item in part[1]]
                    choice = (cost, best[m][1] + [(depth, group)])
            best.append(choice)
        return best[-1]


def plan_blocks(samples: Sequence[Sample], min_shared: int | None = None) -> list[Block]:
    """Arrange samples (sorted by prompt) into blocks of shared prefixes that run the fewest tokens.

    The sorted prompts form a trie: a run of samples whose adjacent prompts share at least ``d``
    tokens shares a ``d``-token prefix (``d`` capped one short of the shortest prompt, so every row
    keeps an own token), and the run splits into sub-runs where its neighbours share exactly ``d``.
    A dynamic programme over the trie chooses which prefixes to encode: over an encoded prefix of
    ``b`` tokens, consecutive sub-runs either stay on ``b`` (each planned on its own) or share one
    encoded ``d``-token prefix, costing its extension ``d - b`` once and each sub-run planned on top
    of it; a lone sample costs its tokens after ``b``. A prefix is encoded only when it extends the one
    below by at least ``min_shared`` tokens (None: ``logprobs.MIN_SHARED_PREFIX_TOKENS``), which keeps a
    few shared tokens from costing a decoder call of their own. Every flat plan (each block's prefix
    encoded from the first token) is one of its choices, so it never runs more tokens than the best
    flat plan. Time: O(n^2) per trie level at worst; recursion one level per nested prefix.

    Returns:
        Top-level blocks in sample order (consecutive unshared samples in one block with
        ``prefix_len`` 0); their ``all_samples()`` cover every sample exactly once (a block's own rows
        before its children's, so not always in sample order).
    """
    min_shared = _logprobs.MIN_SHARED_PREFIX_TOKENS if min_shared is None else min_shared
    samples = list(samples)
    if not samples:
        return []
    with _recursion_room(4 * len(samples) + 1000):
        plan = _Trie(samples, min_shared).solve(0, len(samples), 0)[1]
        top: list[Block] = []
        for item in plan:
            if isinstance(item, int):
                if top and top[-1].prefix_len == 0:
                    top[-1].samples.append(samples[item])
                else:
                    top.append(Block([samples[item]], 0))
            else:
                top.append(_block(samples, item))
    return top


def _block(samples: list[Sample], item: tuple[int, list]) -> Block:
    """The block of one encoded prefix of a plan, ``(prefix_len, items)``, its nested ones inside."""
    depth, plan = item
    rows = [samples[x] for x in plan if isinstance(x, int)]
    return Block(rows, depth, [_block(samples, x) for x in plan if not isinstance(x, int)])


@contextmanager
def _recursion_room(frames: int) -> Iterator[None]:
    """At least ``frames`` of Python recursion while planning: one or two frames per nested prefix,
    and a rollout of many turns nests that deep."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)
