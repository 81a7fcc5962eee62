"""Group-relative advantage estimators (GRPO and Dr. GRPO), registered by name.

A *group* is the G rollouts of one task in one step (``group_size`` = TRL
``num_generations`` = verl ``rollout.n``). Each estimator maps the group's
rewards ``[G]`` to advantages ``[G]``; every token of rollout i later gets
advantage ``A_i``.

* ``"grpo"`` (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300):
  ``A_i = (r_i - mean(r)) / (std(r) + eps)`` with the **sample** standard
  deviation (``ddof = 1``, as ``torch.std`` and verl's ``compute_grpo_outcome_advantage``).
  For ``[0.35] * 7 + [0.95]`` this gives ``-0.3535534`` seven times and
  ``+2.4748737`` (= 7 / sqrt(8)).
* ``"dr_grpo"`` (Liu et al. 2025, "Understanding R1-Zero-Like Training: A
  Critical Perspective", arXiv 2503.20783): ``A_i = r_i - mean(r)``, no
  division by the std, which removes the question-difficulty bias.

**Bound.** With the sample std, ``|A_i| <= (G - 1) / sqrt(G)`` for any group
(equality for one outlier against G - 1 equal rewards); with the population
std (``ddof = 0``) the bound is ``sqrt(G - 1)``. Proof: the other deviations
sum to ``-d_i``, so the squared deviations total at least
``d_i^2 * G / (G - 1)``, i.e. ``d_i^2 <= (G - 1)^2 s^2 / G``. ``eps`` only
shrinks ``|A_i|``.

**Zero variance.** A group whose rewards are all equal teaches nothing. It is
detected from the spread ``max(r) - min(r) <= ZERO_VARIANCE_TOL * max(1, max|r|)``,
never from the variance: ``[0.35] * 7`` in float32 has a computed variance of
about 2e-8, which would turn rounding noise into advantages of order 1. Such a
group gets advantages of exactly 0 and :func:`is_zero_variance` is True (the
trainer replaces it, DAPO-style dynamic sampling, arXiv 2503.14476). A group
of one is zero-variance by definition.

**eps.** Default ``1e-8``, not verl's ``1e-6``: zero variance is handled
above, so ``eps`` is only a guard against division by a tiny spread, and
``1e-6`` would shift the lone-winner advantage above by 1.2e-5.

**System errors.** :func:`group_advantages_masked` takes rewards that may be
None/NaN and a validity mask; invalid entries get advantage 0 (and must carry
no loss weight), and the statistics use the valid entries only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

ZERO_VARIANCE_TOL = 1e-6
"""Relative spread below which a group counts as all-equal (float32 rounding is ~6e-8)."""

DEFAULT_EPS = 1e-8

AdvantageEstimator = Callable[..., list[float]]


def _as_rewards(rewards: Sequence[float]) -> np.ndarray:
    values = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"rewards must be finite, got {values.tolist()}; pass system-error rollouts to "
            "group_advantages_masked with a validity mask instead"
        )
    return values


def is_zero_variance(rewards: Sequence[float], tol: float = ZERO_VARIANCE_TOL) -> bool:
    """True when all rewards are equal (within ``tol`` relative spread) or there is at most one.

    Args:
        rewards: the group's rewards ``[G]``, any float dtype.
        tol: spread tolerance, relative to ``max(1, max|r|)``.

    Raises:
        ValueError: a reward is NaN or infinite.
    """
    values = _as_rewards(rewards)
    if values.size <= 1:
        return True
    spread = float(values.max() - values.min())
    return spread <= tol * max(1.0, float(np.abs(values).max()))


def group_advantages(rewards: Sequence[float], eps: float = DEFAULT_EPS) -> list[float]:
    """GRPO advantages of one group: ``(r_i - mean) / (std + eps)``, sample std (ddof=1).

    Source: Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300), outcome supervision;
    the std is the sample std, as ``torch.std`` and verl's ``compute_grpo_outcome_advantage``.
    Example: ``group_advantages([1.0, 0.0]) == [0.7071..., -0.7071...]`` (eps aside).

    Args:
        rewards: the group's rewards ``[G]`` (all rollouts clean), any float dtype;
            computed in float64.
        eps: added to the std; must be ``>= 0``.

    Returns:
        ``[G]`` advantages; exactly 0.0 for every member of a zero-variance group
        (see :func:`is_zero_variance`), including a group of one. ``|A_i| <= (G-1)/sqrt(G)``.

    Raises:
        ValueError: a non-finite reward or a negative ``eps``; an empty group.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    values = _as_rewards(rewards)
    if values.size == 0:
        raise ValueError("a group needs at least one reward")
    if is_zero_variance(values):
        return [0.0] * int(values.size)
    std = float(values.std(ddof=1))
    return ((values - values.mean()) / (std + eps)).tolist()


def dr_grpo_advantages(rewards: Sequence[float], eps: float = DEFAULT_EPS) -> list[float]:
    """Dr. GRPO advantages of one group: ``r_i - mean`` (no std normalisation, arXiv 2503.20783).

    Args:
        rewards: the group's rewards ``[G]``.
        eps: unused; accepted so every registered estimator has one signature.

    Returns:
        ``[G]`` advantages; exactly 0.0 for a zero-variance group. ``|A_i| <= max(r) - min(r)``.

    Raises:
        ValueError: a non-finite reward; an empty group.
    """
    del eps
    values = _as_rewards(rewards)
    if values.size == 0:
        raise ValueError("a group needs at least one reward")
    if is_zero_variance(values):
        return [0.0] * int(values.size)
    return (values - values.mean()).tolist()


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": group_advantages,
    "dr_grpo": dr_grpo_advantages,
}
"""Estimator name -> function ``(rewards [G], eps) -> advantages [G]``."""


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """Look up an estimator by name; ``ValueError`` lists the known names."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; choose from {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None


def group_advantages_masked(
    rewards: Sequence[float | None],
    valid_mask: Sequence[bool],
    estimator: str = "grpo",
    eps: float = DEFAULT_EPS,
) -> list[float]:
    """Advantages of a group that may hold system-error rollouts.

    Args:
        rewards: ``[G]`` rewards; entries where ``valid_mask`` is False may be
            None or NaN (a system error has no reward).
        valid_mask: ``[G]`` booleans, True for a clean, scored rollout.
        estimator: a name in ``ADVANTAGE_ESTIMATORS``.
        eps: passed to the estimator.

    Returns:
        ``[G]`` advantages: the estimator's values over the valid entries, 0.0 at
        invalid ones (which must also carry no loss weight). Never NaN. Fewer
        than two valid entries give all zeros.

    Raises:
        ValueError: lengths differ, a valid entry is None/NaN/inf, or an unknown estimator.
    """
    if len(rewards) != len(valid_mask):
        raise ValueError(f"rewards has {len(rewards)} entries but valid_mask has {len(valid_mask)}")
    fn = get_advantage_estimator(estimator)
    valid_idx = [i for i, ok in enumerate(valid_mask) if bool(ok)]
    for i in valid_idx:
        r = rewards[i]
        if r is None or not math.isfinite(float(r)):
            raise ValueError(
                f"reward {i} is marked valid but is {r!r}; mark system errors invalid in valid_mask"
            )
    out = [0.0] * len(rewards)
    if not valid_idx:
        return out
    for i, adv in zip(valid_idx, fn([float(rewards[i]) for i in valid_idx], eps=eps)):
        out[i] = adv
    return out


def max_abs_advantage(group_size: int, ddof: int = 1) -> float:
    """The bound on ``|A_i|`` for a group of ``group_size``: (G-1)/sqrt(G) (ddof=1) or sqrt(G-1) (ddof=0)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if ddof == 1:
        return (group_size - 1) / math.sqrt(group_size)
    if ddof == 0:
        return math.sqrt(group_size - 1)
    raise ValueError(f"ddof must be 0 or 1, got {ddof}")
