"""How report cells print: percentages, intervals, USD (strings; ``n/a`` for no value)."""

from __future__ import annotations

NA = "n/a"


def fmt_pct(value: float | None) -> str:
    """A fraction as a percentage with two decimals; None -> ``n/a``."""
    return NA if value is None else f"{100 * value:.2f}%"


def fmt_interval(value: float | None, interval: tuple[float, float]) -> str:
    """``51.70% [50.73, 52.67]`` (interval ends in percent)."""
    if value is None:
        return NA
    return f"{fmt_pct(value)} [{100 * interval[0]:.2f}, {100 * interval[1]:.2f}]"


def fmt_usd(value: float | None) -> str:
    """USD with 2 decimals from $1 up, 4 below; None -> ``n/a``."""
    if value is None:
        return NA
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"
