"""Grading does not depend on incidental order: every valid order and split of a golden's writes
reaches the golden state (issue cases: helpdesk access_multi_01, retail multi_action_02, hotel
multi_action_01, retail return_multi_item_01)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from rewardbox.domains.base import Domain, ToolRunner
from rewardbox.domains.dataset_writer import DatasetRecipe, GenerationError
from rewardbox.domains.golden import build_golden_state
from rewardbox.domains.toolkit import keyed_id
from rewardbox.domains.variants import order_divergences, replay_variants, write_variants
from rewardbox.grading.canonical import state_hash

from .conftest import DOMAIN_NAMES, domain_tasks, domain_under_test, golden_calls


def _task(name: str, family: str, number: int) -> dict[str, Any]:
    return next(
        t
        for t in domain_tasks(name)
        if t["family"] == family and t["name"].endswith(f"_{number:02d}")
    )


def _hash_of(name: str, task: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    runner = ToolRunner(domain_under_test(name).domain)
    (config,) = task["world_state"].values()
    state, error = build_golden_state(runner, config["data_patch"], calls)
    assert error is None, error
    return state_hash(state)


def _writes(name: str, task: dict[str, Any]) -> list[dict[str, Any]]:
    readonly = domain_under_test(name).domain.readonly_tools
    return [c for c in golden_calls(task) if c["tool"] not in readonly]


@pytest.mark.parametrize("name", DOMAIN_NAMES)
def test_every_valid_order_and_split_of_every_golden_reaches_the_golden_state(name):
    runner = ToolRunner(domain_under_test(name).domain)
    bad, reordered = {}, 0
    for task in domain_tasks(name):
        (config,) = task["world_state"].values()
        report = replay_variants(runner, config["data_patch"], golden_calls(task), seed=task["uid"])
        if report.divergences:
            bad[task["uid"]] = report.divergences[:2]
        reordered += (
            len(_writes(name, task)) >= 2 and report.replayed >= 2
        )  # a real second order was replayed
        assert report.replayed >= 1, task["uid"]  # the golden's own order at least
    assert bad == {}
    assert reordered >= 8


@pytest.mark.parametrize(
    ("name", "family", "number"),
    [("helpdesk", "access_multi", 1), ("retail", "multi_action", 2), ("hotel", "multi_action", 1)],
)
def test_issue_cases_two_writes_swapped_reach_the_golden_hash(name, family, number):
    task = _task(name, family, number)
    writes = _writes(name, task)
    assert len(writes) == 2
    assert _hash_of(name, task, writes[::-1]) == _hash_of(name, task, golden_calls(task))


def test_issue_case_return_multi_item_one_call_per_item_reaches_the_golden_hash():
    task = _task("retail", "return_multi_item", 1)
    (ret,) = [c for c in _writes("retail", task) if c["tool"] == "return_items"]
    items = ret["parameters"]["item_ids"]
    assert len(items) == 2
    split = [
        {"tool": "return_items", "parameters": {**ret["parameters"], "item_ids": [i]}}
        for i in items
    ]
    golden = _hash_of("retail", task, golden_calls(task))
    assert _hash_of("retail", task, split) == golden
    assert _hash_of("retail", task, split[::-1]) == golden


def test_variants_cover_every_order_and_the_split():
    domain = domain_under_test("retail").domain
    calls = [
        {"tool": "find_customer", "parameters": {"email": "a@b"}},
        {"tool": "return_items", "parameters": {"order_id": "O", "item_ids": ["O-1", "O-2"]}},
        {"tool": "cancel_order", "parameters": {"order_id": "P"}},
    ]
    variants = dict(write_variants(domain, calls))
    assert sorted(variants) == ["order 0,1", "order 0,1 split", "order 1,0", "order 1,0 split"]
    assert [c["tool"] for c in variants["order 1,0 split"]] == [
        "cancel_order",
        "return_items",
        "return_items",
    ]


# -- a domain whose ids count calls is rejected at generation -------------------------------


class _Base(DeclarativeBase):
    metadata = sa.MetaData()


class _Note(_Base):
    __tablename__ = "notes"
    note_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    text: Mapped[str] = mapped_column(sa.String(40))


def add_note_counted(db: Session, text: str) -> dict[str, Any]:
    """Add a note; the id is the next number (depends on call order)."""
    note_id = f"N-{db.scalar(sa.select(sa.func.count()).select_from(_Note)) + 1}"
    db.add(_Note(note_id=note_id, text=text))
    return {"note_id": note_id}


def add_note_keyed(db: Session, text: str) -> dict[str, Any]:
    """Add a note; the id derives from its text."""
    note_id = keyed_id(db, _Note.note_id, f"N-{text}")
    db.add(_Note(note_id=note_id, text=text))
    return {"note_id": note_id}


def _notes_domain(tool: Any) -> Domain:
    return Domain(
        name="notes",
        server_name="rewardbox_notes",
        metadata=_Base.metadata,
        tools=(tool,),
        seed_rows=dict,
        policy_text="",
    )


def _two_notes(tool: str) -> list[dict[str, Any]]:
    return [
        {"tool": tool, "parameters": {"text": "a"}},
        {"tool": tool, "parameters": {"text": "b"}},
    ]


def test_counted_ids_diverge_and_keyed_ids_do_not():
    counted = order_divergences(
        ToolRunner(_notes_domain(add_note_counted)), None, _two_notes("add_note_counted")
    )
    keyed = order_divergences(
        ToolRunner(_notes_domain(add_note_keyed)), None, _two_notes("add_note_keyed")
    )
    assert len(counted) == 1 and counted[0].startswith("order 1,0: notes[N-1].text")
    assert keyed == []


def test_generation_refuses_a_task_whose_swapped_writes_grade_differently():
    recipe = DatasetRecipe(
        domain=_notes_domain(add_note_counted),
        families=(),
        new_builder=None,
        default_seed=0,
        agent="a",
        user="b",
    )
    task = {
        "uid": "notes.py:test_two",
        "init": {
            "rewardbox_notes": {
                "data_patch": {},
                "golden_test_case": {"tool_interactions": _two_notes("add_note_counted")},
            }
        },
    }
    with pytest.raises(GenerationError, match="notes.py:test_two: order 1,0"):
        recipe.check_order_independence([task])


def test_keyed_id_suffixes_only_a_repeated_business_key():
    engine = sa.create_engine("sqlite://")
    _Base.metadata.create_all(engine)
    with Session(engine) as db:
        ids = []
        for text in ("a", "a", "b", "a"):
            ids.append(add_note_keyed(db, text)["note_id"])
            db.flush()
    assert ids == ["N-a", "N-a-2", "N-b", "N-a-3"]
