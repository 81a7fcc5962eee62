"""Per-task pass@k and pass^k estimators from n trials with c successes.

Two different questions about one task:

* **pass@k** ("at least one of k"): the probability that k trials drawn
  without replacement from the n recorded trials contain at least one
  success. Unbiased estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021,
  "Evaluating Large Language Models Trained on Code", arXiv 2107.03374).
* **pass^k** ("all k"): the probability that all k drawn trials succeed.
  Unbiased estimator ``C(c, k) / C(n, k)`` (Yao et al. 2024, tau-bench,
  arXiv 2406.12045). At ``k == n`` it is 1 for a task that passed n/n and 0
  otherwise, so its mean over tasks is the observed n/n share.

The plug-in ``(c/n)^k`` is biased (it is not zero for a task that passed
2 of 3 trials at k = 3, although no 3 trials all succeeded); it is offered
only as :func:`pass_hat_k_plugin` and reports must label it as plug-in.

All functions use exact integer binomials (``math.comb``) and one correctly
rounded integer division, so they are exact to float precision for any n.
"""

from __future__ import annotations

import math
import operator


def _check_counts(n: int, c: int, k: int) -> tuple[int, int, int]:
    """Return ``(n, c, k)`` as Python ints; ``ValueError`` unless ``0 <= c <= n``, ``1 <= k <= n``.

    numpy integers are accepted (``operator.index``); floats and bools are not.
    """
    out = []
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool):
            raise ValueError(f"{name} must be an integer count, got {value!r}")
        try:
            out.append(operator.index(value))
        except TypeError:
            raise ValueError(f"{name} must be an integer count, got {value!r}") from None
    n, c, k = out
    if n < 0 or c < 0:
        raise ValueError(f"n and c must be >= 0, got n={n}, c={c}")
    if c > n:
        raise ValueError(f"c (successes) = {c} exceeds n (trials) = {n}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k}")
    if k > n:
        raise ValueError(f"k = {k} exceeds n = {n} trials; the estimator is undefined")
    return n, c, k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: probability that at least one of k trials passes.

    Formula ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021, arXiv 2107.03374): the
    chance that a k-subset of the n recorded trials holds at least one success.

    Args:
        n: clean trials of the task (system errors already removed), ``n >= 1``.
        c: successes among them, ``0 <= c <= n``.
        k: subset size, ``1 <= k <= n``.

    Returns:
        A probability in [0, 1]. ``k = 1`` gives ``c / n``.

    Raises:
        ValueError: ``k > n``, ``k < 1``, ``c > n`` or negative/non-int counts.
    """
    n, c, k = _check_counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one task: probability that all k trials pass.

    Formula ``C(c, k) / C(n, k)`` (tau-bench, Yao et al. 2024, arXiv 2406.12045):
    the chance that a k-subset of the n recorded trials holds only successes.
    ``C(c, k) = 0`` when ``c < k``. At ``k = n`` it is 1 iff the task passed n/n.

    Args:
        n: clean trials of the task (system errors already removed), ``n >= 1``.
        c: successes among them, ``0 <= c <= n``.
        k: subset size, ``1 <= k <= n``.

    Returns:
        A probability in [0, 1]. ``k = 1`` gives ``c / n``.

    Raises:
        ValueError: ``k > n``, ``k < 1``, ``c > n`` or negative/non-int counts.
    """
    n, c, k = _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_hat_k_plugin(n: int, c: int, k: int) -> float:
    """PLUG-IN (biased) pass^k: ``(c / n) ** k``.

    This is what ``tb agg`` reports as pass^k. It treats the observed rate as
    the true rate and overstates reliability for small n (for [1, 1, 0] at
    k = 3 it gives 0.296 where no three trials all passed; the unbiased
    :func:`pass_hat_k` gives 0). Report it only labelled "plug-in".

    Args:
        n: clean trials, ``n >= 1``.
        c: successes, ``0 <= c <= n``.
        k: exponent, ``1 <= k <= n`` (same domain as the unbiased estimator
            so the two can be shown side by side).

    Raises:
        ValueError: as :func:`pass_hat_k`.
    """
    n, c, k = _check_counts(n, c, k)
    return (c / n) ** k
