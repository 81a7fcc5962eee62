"""Hotel golden trajectories beyond the shared oracle checks (``test_domain_oracles.py``)."""

from __future__ import annotations

from .conftest import domain_tasks, golden_calls


def test_golden_trajectories_identify_the_traveller_first():
    for task in domain_tasks("hotel"):
        assert golden_calls(task)[0]["tool"] == "find_traveller", task[
            "uid"
        ]  # identify the traveller first (policy)
