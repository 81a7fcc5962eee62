"""Retail oracle checks beyond the shared ones (``test_domain_oracles.py``)."""

from __future__ import annotations

from .conftest import oracle_runs


def test_write_tasks_add_no_orders():
    """Golden writes change the task's own orders only; none creates an order (tasks are independent)."""
    for run in oracle_runs("retail"):
        initial = {o["order_id"] for o in run.replayed["initial_db_state"]["orders"]}
        added = {o["order_id"] for o in run.replayed["golden_db_state"]["orders"]} - initial
        assert added == set(), run.task["uid"]
