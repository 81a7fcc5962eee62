"""What every domain's ``models.py`` and ``tools.py`` share.

Tables: the ``NUMERIC(10, 2)`` money type and the columns of the ungraded
``audit_events`` bookkeeping table. Tools: two-decimal money text, ids of new
rows (derived from the row's business key, so that call order never changes
them), and primary-key lookups that fail as ``ToolFailure`` (an error the agent
sees, never a system error).
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


def keyed_id(db: Session, column: Any, key: str) -> str:
    """The id of a new row derived from its business key, e.g. ``"RF-ORD-6011-2"`` for item ``ORD-6011-2``.

    Ids derived from content do not depend on the order of the calls that made
    the rows, so two agents that make the same rows in another order, or in
    more calls, reach the same graded state. Only a second row with the same
    key (the same business fact recorded twice) gets a suffix in call order:
    ``key``, then ``key + "-2"``, ``key + "-3"``, ...

    Args:
        db: the episode session.
        column: the id column, e.g. ``Refund.refund_id``.
        key: the id built from the row's business key.

    Returns:
        ``key`` when no row has it yet, else the first free ``key-<n>`` (n >= 2).
    """
    taken = set(db.scalars(sa.select(column).where(sa.or_(column == key, column.like(f"{key}-%")))))
    if key not in taken:
        return key
    n = 2
    while f"{key}-{n}" in taken:
        n += 1
    return f"{key}-{n}"


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
