"""What every domain's ``models.py`` and ``tools.py`` share.

Tables: the ``NUMERIC(10, 2)`` money type and the columns of the ungraded
``audit_events`` bookkeeping table. Tools: two-decimal money text, deterministic
ids of new rows, and primary-key lookups that fail as ``ToolFailure`` (an error
the agent sees, never a system error).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

from rewardbox import strict_json
from rewardbox.domains.base import ToolFailure

Money = sa.Numeric(10, 2)
"""The money column type of every domain (compared as two-decimal strings in the canonical state)."""

Row = TypeVar("Row")


class AuditEventColumns:
    """Bookkeeping: one row per write tool call. Ungraded.

    Mix into a domain's declarative base: ``class AuditEvent(AuditEventColumns, Base)``.
    """

    __tablename__ = "audit_events"
    seq: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    tool: Mapped[str] = mapped_column(sa.String(40))
    detail: Mapped[str] = mapped_column(sa.Text)

    @classmethod
    def entry(cls, tool: str, detail: Mapping[str, Any]) -> Any:
        """A new row for one call of ``tool``; ``detail`` is stored as sorted-key JSON (``str`` for odd values)."""
        return cls(tool=tool, detail=strict_json.dumps(dict(detail), sort_keys=True, default=str))


def money(value: Decimal | str | int) -> str:
    """Two-decimal text of an amount, e.g. ``"59.70"`` (rounded half-even to cents)."""
    return format(Decimal(value).quantize(Decimal("0.01")), "f")


def next_id(db: Session, column: Any, prefix: str, width: int = 4) -> str:
    """The next id ``prefix + number`` after the largest existing one (deterministic).

    Args:
        db: the episode session.
        column: the id column, e.g. ``Refund.refund_id``.
        prefix: e.g. ``"RF-"``; ids of the column without it, or not numeric after it, are ignored.
        width: zero padding of the number.

    Returns:
        e.g. ``"RF-0003"`` after ``"RF-0002"``; ``prefix + "0001"`` when there is none.
    """
    numbers = [int(v[len(prefix):]) for v in db.scalars(sa.select(column))
               if v.startswith(prefix) and v[len(prefix):].isdigit()]
    return f"{prefix}{(max(numbers) + 1 if numbers else 1):0{width}d}"


def get_row(db: Session, model: type[Row], key: str, what: str, *, upper: bool = True) -> Row:
    """The row of ``model`` with primary key ``key`` (stripped; upper-cased unless ``upper=False``).

    Raises:
        ToolFailure: ``"<what> '<key>' not found"`` (shown to the agent; nothing is written).
    """
    key_text = key.strip().upper() if upper else key.strip()
    row = db.get(model, key_text)
    if row is None:
        raise ToolFailure(f"{what} {key!r} not found")
    return row
