"""Rules and row helpers the helpdesk tools share: the read tools (``tools``) and the write tools
(``tools_write``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.helpdesk.models import (
    AuditEvent,
    Employee,
)

OPEN_REQUEST_STATUSES = ("pending_approval", "approved")


def _audit(db: Session, tool: str, **detail: Any) -> None:
    db.add(AuditEvent.entry(tool, detail))


def _name(db: Session, employee_id: str | None) -> str | None:
    person = db.get(Employee, employee_id) if employee_id else None
    return person.name if person else None


def _rows(db: Session, model: Any, employee_id: str, order: Any) -> list[Any]:
    return list(
        db.scalars(sa.select(model).where(model.employee_id == employee_id).order_by(order))
    )
