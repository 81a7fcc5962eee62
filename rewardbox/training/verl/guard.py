"""Overrides of verl that would lift our bound on zero-variance refills, refused before anything runs.

Our bound on replacement (``grpo.max_refill_rounds``, see ``verl_sampler``) reaches verl as
``algorithm.filter_groups.max_num_gen_batches = max_refill_rounds + 1`` and is enforced by
rewardbox's replay buffer (``trainer.v1.sampler.custom_sampler``), which reads it through
``trainer.v1.sampler.sampler_kwargs``. verl's own V1 buffer ignores ``max_num_gen_batches`` and
refills until a batch has no zero-variance group, and ``max_num_gen_batches <= 0`` means "no
limit" to verl: a step whose groups all have equal rewards would then sample forever.

So ``verl.extra_overrides`` may not touch these keys (or a parent node holding them), except to
repeat the value we write:

- ``algorithm.filter_groups.max_num_gen_batches``: set by ``grpo.max_refill_rounds`` only;
- ``trainer.v1.sampler.custom_sampler`` (``path``, ``name``): our buffer, the one that bounds;
- ``trainer.v1.sampler.sampler_kwargs``: the settings our buffer reads its bound from.

Keys are compared after Hydra's ``+`` / ``++`` prefixes are removed and dict values are spread
into dotted keys (``{"algorithm.filter_groups": {"max_num_gen_batches": 0}}`` is the same
override as ``{"algorithm.filter_groups.max_num_gen_batches": 0}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardbox.training.verl.sampler import sampler_overrides

REFILL_KEY = "algorithm.filter_groups.max_num_gen_batches"
GUARDED = (REFILL_KEY, "trainer.v1.sampler.custom_sampler", "trainer.v1.sampler.sampler_kwargs")
"""Nodes of verl's config that carry our refill bound."""


def flat_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{dotted key: leaf value}``: Hydra's ``+``/``++`` dropped, non-empty dict values spread into dotted keys."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        key = str(key).lstrip("+")
        if isinstance(value, Mapping) and value:
            flat.update({f"{key}.{sub}": leaf for sub, leaf in flat_overrides(value).items()})
        else:
            flat[key] = value
    return flat


def bound_overrides(max_refill_rounds: int) -> dict[str, Any]:
    """The guarded keys as we write them (flat): the bound and our replay buffer's settings."""
    return flat_overrides({REFILL_KEY: max_refill_rounds + 1, **sampler_overrides()})


def refill_bound_problems(extra_overrides: Mapping[str, Any], max_refill_rounds: int) -> list[str]:
    """One line per override in ``extra_overrides`` that changes or removes the refill bound.

    Args:
        extra_overrides: verl overrides that win over ours (``verl.extra_overrides``), dotted keys.
        max_refill_rounds: ``grpo.max_refill_rounds`` (the bound: that many refill rounds per step).

    Returns:
        Empty when every guarded key is untouched or set to exactly the value we write.
    """
    ours = bound_overrides(max_refill_rounds)
    problems = []
    for key, value in flat_overrides(extra_overrides).items():
        guarded = [
            g for g in GUARDED if key == g or key.startswith(g + ".") or g.startswith(key + ".")
        ]
        if not guarded or (key in ours and _same(value, ours[key])):
            continue
        if key == REFILL_KEY:
            problems.append(
                f"verl.extra_overrides sets {REFILL_KEY}={value!r}: the refill bound is "
                f"grpo.max_refill_rounds + 1 = {max_refill_rounds + 1} "
                f"({'<= 0 is no bound at all in verl; ' if _unbounded(value) else ''}"
                "set grpo.max_refill_rounds instead, and remove this override)"
            )
        else:
            problems.append(
                f"verl.extra_overrides sets {key}={value!r}, which replaces {guarded[0]}: "
                "rewardbox's replay buffer is what bounds zero-variance refills (verl's own "
                "refills until no group has equal rewards); remove this override"
            )
    return problems


def check_refill_bound(extra_overrides: Mapping[str, Any], max_refill_rounds: int) -> None:
    """Raise unless ``extra_overrides`` keeps the refill bound (see :func:`refill_bound_problems`).

    Raises:
        ValueError: every offending override, one per line.
    """
    problems = refill_bound_problems(extra_overrides, max_refill_rounds)
    if problems:
        raise ValueError("\n".join(problems))


def _same(value: Any, ours: Any) -> bool:
    return (
        type(value) is type(ours) and value == ours
    )  # True == 1 in Python; a bool is no count of batches


def _unbounded(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value <= 0
