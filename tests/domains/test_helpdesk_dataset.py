"""The helpdesk test lists, task mix and user facts (shared checks: ``test_domain_contract.py``)."""

from __future__ import annotations

import yaml

from rewardbox.tasks.thinkingbox import load_dataset

from .conftest import domain_tasks, domain_under_test, golden_calls

HELPDESK = domain_under_test("helpdesk")
DATASET = HELPDESK.dataset
TASKS = domain_tasks("helpdesk")


def _writes(task: dict) -> list[dict]:
    return [i for i in golden_calls(task) if i["tool"] in HELPDESK.write_tools]


def test_both_test_lists_name_every_task_and_load_strictly():
    uids = [t["uid"] for t in TASKS]
    for name in ("benchmark.yaml", "all.yaml"):
        path = DATASET / "testlists" / name
        assert yaml.safe_load(path.read_text()) == uids
        assert [t.uid for t in load_dataset(DATASET, test_list=path).tasks] == uids
    assert {t["split"] for t in TASKS} == {"benchmark"}
    assert sorted(p.name for p in (DATASET / "testlists").iterdir()) == [
        "all.yaml",
        "benchmark.yaml",
    ]


def test_task_mix_covers_the_difficulty_spectrum():
    assert len(TASKS) >= 45
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [t for t in TASKS if len(_writes(t)) > 1]
    explicit = [
        t
        for t in TASKS
        if t["difficulty"] == "trivial"
        and len(_writes(t)) == 1
        and all(str(v) in t["query"] for v in _writes(t)[0]["parameters"].values())
    ]
    assert len(traps) >= 12 and len(tell) >= 6 and len(multi) >= 5 and len(explicit) >= 8


def test_identity_factors_the_agent_uses_come_from_the_user():
    for t in TASKS:
        for item in golden_calls(t):
            for arg in ("badge_number", "phone_last4"):
                if arg in item["parameters"]:  # a factor the agent uses must come from the user
                    assert item["parameters"][arg] in t["user_context"], (t["uid"], arg)
