"""Per-row seeded sampling for batched decoding, recording each sampled token's log-probability.

``transformers``' ``generate`` draws every row of a batch from one global RNG,
so a row's tokens would depend on which other requests shared its batch. Here
each row has its own ``torch.Generator``: ``PerRowSampler.draw`` takes the
step's scores (after the tool-call guide), applies the row's temperature
(0 = greedy: the argmax, whose processed distribution is one-hot, so its
log-prob is exactly 0) and draws the row's token with the row's generator. It
records the drawn token's log-probability under that processed distribution:
the sampler's log-prob, which the GRPO trainer uses as ``old_logprobs``
(PPO's behaviour policy, Schulman et al. 2017, arXiv 1707.06347). A row whose
processed distribution is one-hot (greedy, or a guide that allows one token)
takes that token without a draw, so its generator's stream is not consumed.

A row's generator is seeded from its request's ``seed`` (the episode runner
derives one per task uid, trial and agent turn, ``episode.seeds``); a row
without a seed draws from a generator seeded by ``fallback_seed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor


class PerRowSampler(LogitsProcessor):
    """Choose row i's next token with its own generator and temperature; keep its log-prob.

    Args:
        seeds: per row, the generator seed (non-negative int < 2**64).
        device: where the scores live (generators are created there).
        temperatures: per row, the sampling temperature (0 or less: greedy);
            default 1.0 for every row.

    Attributes:
        logprobs: per row, the log-probability (natural log, float) of each chosen
            token under the processed distribution, in generation order.

    Raises:
        ValueError: ``temperatures`` and ``seeds`` differ in length.
    """

    def __init__(
        self,
        seeds: list[int],
        device: torch.device | str = "cpu",
        temperatures: Sequence[float] | None = None,
    ):
        self.device = device
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.temperatures = (
            [1.0] * len(seeds) if temperatures is None else [float(t) for t in temperatures]
        )
        if len(self.temperatures) != len(seeds):
            raise ValueError(f"{len(self.temperatures)} temperatures for {len(seeds)} rows")
        self.logprobs: list[list[float]] = [[] for _ in seeds]

    def add_row(self, seed: int, temperature: float) -> int:
        """A new row (a request joining a running batch); returns its index."""
        self.generators.append(torch.Generator(device=self.device).manual_seed(int(seed)))
        self.temperatures.append(float(temperature))
        self.logprobs.append([])
        return len(self.generators) - 1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """``LogitsProcessor`` form over every row: one-hot scores (0 at the chosen token, ``-inf`` elsewhere)."""
        chosen = self.draw(scores, range(len(self.generators)))
        return torch.full_like(scores, float("-inf")).scatter_(1, chosen[:, None], 0.0)

    def draw(self, scores: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
        """Choose one token per row and record its log-prob.

        Args:
            scores: ``[len(rows), V]`` float logits of this step (guides applied).
            rows: the batch rows these scores belong to (their generators, temperatures, logs).

        Returns:
            ``[len(rows)]`` long tensor of chosen token ids.
        """
        rows = list(rows)
        chosen = scores.argmax(dim=-1)
        values = [0.0] * len(rows)
        sampled = [i for i, row in enumerate(rows) if self.temperatures[row] > 0]
        if sampled:
            index = torch.tensor(sampled, device=scores.device)
            scaled = scores[index].float()
            temperatures = [self.temperatures[rows[i]] for i in sampled]
            if any(t != 1.0 for t in temperatures):
                scaled = (
                    scaled
                    / torch.tensor(temperatures, dtype=scaled.dtype, device=scaled.device)[:, None]
                )
            logp = torch.log_softmax(scaled, dim=-1)  # [S, V], one batched op
            probs = logp.exp()
            top_p, top_token = probs.max(dim=-1)
            picks = [
                top_token[j : j + 1]
                if top_p[j] >= 1.0
                else torch.multinomial(probs[j], 1, generator=self.generators[rows[i]])
                for j, i in enumerate(sampled)
            ]
            picked = torch.cat(picks)
            chosen[index] = picked
            for i, value in zip(sampled, logp.gather(1, picked[:, None]).squeeze(1).tolist()):
                values[i] = value
        for row, value in zip(rows, values):
            self.logprobs[row].append(value)
        return chosen
