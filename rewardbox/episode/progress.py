"""Progress of a long stage: done / total, ETA, running pass rate and system errors.

Every stage that runs many episodes (probes, screening, evaluation campaigns) or many steps (GRPO)
reports through one :class:`Progress`. It writes a plain text line to a *sink* at a steady cadence
(whenever another ``every_frac`` of the work is done, or ``every_s`` seconds have passed since the
last line, and always at the start and at the end), and draws a ``tqdm`` bar when standard error is
a terminal. The sink is whatever the caller passes: a ``logging.Logger`` (the Dagster assets pass
``context.log``, so the lines land in the run's event log) or any ``str -> None`` callable. The
engine never imports Dagster.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Where progress lines go: a logger (``.info`` is called) or a callable taking one line.
ProgressSink = Callable[[str], None] | logging.Logger


def emit(sink: ProgressSink | None, line: str) -> None:
    """Write one line to ``sink`` (``None`` drops it)."""
    if sink is None:
        return
    if isinstance(sink, logging.Logger) or hasattr(sink, "info"):
        sink.info(line)
    else:
        sink(line)


def format_seconds(seconds: float) -> str:
    """``75.2`` -> ``"1m15s"``; under a minute ``"42s"``; ``3725`` -> ``"1h02m"``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


@dataclass
class ProgressCounts:
    """Running counts of one stage.

    Attributes:
        done: units finished (episodes or steps), system errors included.
        total: units planned.
        passed: finished episodes that passed (reward 1 under the grader).
        graded: finished episodes that were graded (not system errors); the pass rate's denominator.
        system_errors: finished episodes that ended in a system error (infrastructure, not the policy).
        elapsed_s: seconds since the stage started.
        in_flight: units that run at once (a campaign's concurrency; 1 for GRPO steps).
    """

    done: int = 0
    total: int = 0
    passed: int = 0
    graded: int = 0
    system_errors: int = 0
    elapsed_s: float = 0.0
    in_flight: int = 1

    @property
    def eta_s(self) -> float | None:
        """Remaining seconds at the mean rate so far; ``None`` until the first wave has finished.

        With ``in_flight`` units started together, the first finishes after about one unit's time
        while the others are nearly done, so done / elapsed only measures the throughput once
        ``min(in_flight, total)`` have finished (before that the mean rate predicts up to
        ``in_flight`` times too long: a new user saw "1/18 episodes, ETA 1h26m" for a 10-minute
        stage with 16 in flight)."""
        if self.done == 0 or self.done < min(self.in_flight, self.total):
            return None
        return self.elapsed_s / self.done * max(0, self.total - self.done)

    @property
    def pass_rate(self) -> float | None:
        """passed / graded over finished, graded episodes; ``None`` while none is graded."""
        return self.passed / self.graded if self.graded else None


class Progress:
    """Counts a stage's units and reports them at a steady cadence.

    Args:
        total: units planned (episodes or steps); 0 is allowed (one start and one end line).
        label: what runs, e.g. ``"probe_results"`` or ``"screen (golden)"``; starts every line.
        sink: where lines go (see :data:`ProgressSink`); ``None`` keeps only the terminal bar.
        unit: the unit's plural name in the lines (``"episodes"``, ``"steps"``).
        every_s: at most this many seconds between two lines while work finishes.
        every_frac: a line each time another this share of ``total`` is done (0.05 = every 5%);
            0 writes a line for every unit.
        bar: draw a ``tqdm`` bar on standard error; ``None`` draws one only when standard error is
            a terminal and ``tqdm`` is installed (inside Dagster's captured logs it is not).
        outcomes: show the pass rate and system errors (off for units without a verdict).
        clock: seconds source (tests pass a fake clock).
    """

    def __init__(
        self,
        total: int,
        label: str,
        sink: ProgressSink | None = None,
        *,
        unit: str = "episodes",
        every_s: float = 30.0,
        every_frac: float = 0.05,
        bar: bool | None = None,
        outcomes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total < 0:
            raise ValueError(f"Progress total must be >= 0, got {total}")
        self.label, self.sink, self.unit, self.outcomes = label, sink, unit, outcomes
        self.every_s, self.every_frac, self.clock = every_s, every_frac, clock
        self.counts = ProgressCounts(total=total)
        self.lines: list[str] = []
        self._start = clock()
        self._last_line_at = self._start
        self._next_mark = 1  # the next line is due at done / total >= _next_mark * every_frac
        self._bar = (
            _make_bar(total, label, unit) if (bar if bar is not None else _terminal()) else None
        )
        self._write(f"{label}: {total} {unit} to run")

    def update(
        self, *, passed: bool | None = None, system_error: bool = False, note: str = ""
    ) -> None:
        """Count one finished unit and write a line if the cadence says so.

        Args:
            passed: the episode's verdict; ``None`` for units without one (GRPO steps).
            system_error: the unit ended in a system error (not counted as graded).
            note: appended to this unit's line when one is written (e.g. a GRPO step's metrics).
        """
        c = self.counts
        c.done += 1
        c.elapsed_s = self.clock() - self._start
        if system_error:
            c.system_errors += 1
        elif passed is not None:
            c.graded += 1
            c.passed += int(bool(passed))
        if self._bar is not None:
            self._bar.update(1)
            if self.outcomes:
                self._bar.set_postfix_str(self._postfix(), refresh=False)
        if self._due():
            self._write(self.line(note))

    def running(self, in_flight: int) -> None:
        """How many units run at once (the ETA waits for that many to finish; ``ProgressCounts.eta_s``)."""
        self.counts.in_flight = max(1, int(in_flight))

    def episode(self, result: Any) -> None:
        """Count one finished episode (an ``EpisodeResult``: ``passed`` and ``system_error``)."""
        self.update(passed=bool(result.passed), system_error=result.system_error is not None)

    def line(self, note: str = "") -> str:
        """The current progress line, e.g.
        ``probe_results: 40/96 episodes (42%), pass rate 0.325 (13/40), system errors 0, 1m01s elapsed, ETA 1m25s``.
        """
        c = self.counts
        share = f" ({100 * c.done / c.total:.0f}%)" if c.total else ""
        eta = f", ETA {format_seconds(c.eta_s)}" if c.eta_s is not None and c.done < c.total else ""
        outcomes = f", {self._postfix()}" if self.outcomes else ""
        text = f"{self.label}: {c.done}/{c.total} {self.unit}{share}{outcomes}, {format_seconds(c.elapsed_s)} elapsed{eta}"
        return f"{text} | {note}" if note else text

    def close(self) -> None:
        """Close the bar; write a final line unless the last unit already wrote one."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._written_done != self.counts.done or len(self.lines) == 1:
            self.counts.elapsed_s = self.clock() - self._start
            self._write(self.line())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _postfix(self) -> str:
        c = self.counts
        rate = (
            f"pass rate {c.pass_rate:.3f} ({c.passed}/{c.graded})"
            if c.pass_rate is not None
            else "pass rate n/a"
        )
        return f"{rate}, system errors {c.system_errors}"

    def _due(self) -> bool:
        c = self.counts
        if c.done >= c.total or self.every_frac <= 0:
            return True
        if self.clock() - self._last_line_at >= self.every_s:
            return True
        return c.done / c.total >= self._next_mark * self.every_frac - 1e-9

    def _write(self, line: str) -> None:
        c = self.counts
        if c.total and self.every_frac > 0:
            while self._next_mark * self.every_frac - 1e-9 <= c.done / c.total:
                self._next_mark += 1
        self._last_line_at = self.clock()
        self._written_done = c.done
        self.lines.append(line)
        emit(self.sink, line)


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def _make_bar(total: int, label: str, unit: str):
    try:
        from tqdm import tqdm
    except ImportError:  # optional: the lines carry the same numbers
        return None
    return tqdm(
        total=total, desc=label, unit=unit.rstrip("s") or unit, leave=False, dynamic_ncols=True
    )
