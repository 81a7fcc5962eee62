"""Per-row seeded sampling inside ``generate``, recording each sampled token's log-probability.

``transformers``' ``generate`` draws every row of a batch from one global RNG,
so a row's tokens depend on which other requests shared its batch. The
sampler here is the last logits processor of the batch: for each row it
draws the next token from the row's *processed* distribution (after the
tool-call guide and the temperature) with the row's own ``torch.Generator``
and returns a one-hot score row (0 at the drawn token, ``-inf`` elsewhere),
so ``generate``'s own multinomial can only pick that token. It also records
the drawn token's log-probability under that processed distribution: the
sampler's log-prob, which the GRPO trainer uses as ``old_logprobs``
(PPO's behaviour policy, Schulman et al. 2017, arXiv 1707.06347).

A row's generator is seeded from its request's ``seed`` (the episode runner
derives one per task uid, trial and agent turn, ``episode.seeds``); a row
without a seed draws from a generator seeded by ``fallback_seed``.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor


class PerRowSampler(LogitsProcessor):
    """Draw row i's next token with its own generator; keep its log-prob.

    Args:
        seeds: per row, the generator seed (non-negative int < 2**64).
        device: where the scores live (generators are created there).

    Attributes:
        logprobs: per row, the log-probability (natural log, float) of each drawn
            token under the processed distribution, in generation order. Rows that
            already stopped keep receiving entries; callers cut them to the
            completion's length.
    """

    def __init__(self, seeds: list[int], device: torch.device | str = "cpu"):
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.logprobs: list[list[float]] = [[] for _ in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logp = torch.log_softmax(scores.float(), dim=-1)  # [B, V], one batched op
        probs = logp.exp()
        top_p, top_token = probs.max(dim=-1)
        # a row whose processed distribution is one-hot (greedy) needs no draw; the others draw
        # with their own generator, so a row's tokens never depend on the rest of the batch
        tokens = [top_token[row : row + 1] if top_p[row] >= 1.0 else torch.multinomial(probs[row], 1, generator=gen)
                  for row, gen in enumerate(self.generators)]
        chosen = torch.stack(tokens)  # [B, 1]
        for row, value in enumerate(logp.gather(1, chosen).squeeze(1).tolist()):
            self.logprobs[row].append(value)
        return torch.full_like(scores, float("-inf")).scatter_(1, chosen, 0.0)
