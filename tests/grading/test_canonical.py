"""Canonical terminal state: hash invariances and differences (issue #5 item 4)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa

from rewardbox.grading.canonical import diff_states, dump_database, primary_keys, state_hash

ROOT = Path(__file__).resolve().parents[2]


def _schema() -> tuple[sa.MetaData, sa.Table, sa.Table, sa.Table]:
    md = sa.MetaData()
    items = sa.Table(
        "items",
        md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String),
        sa.Column("weight", sa.Float),
        sa.Column("price", sa.Numeric(10, 2)),
        sa.Column("seen_at", sa.DateTime),
    )
    orders = sa.Table(
        "orders",
        md,
        sa.Column("order_id", sa.String, primary_key=True),
        sa.Column("status", sa.String),
        sa.Column("amount", sa.REAL),
    )
    log = sa.Table(
        "log", md, sa.Column("seq", sa.Integer, primary_key=True), sa.Column("text", sa.String)
    )
    return md, items, orders, log


def _db(rows: dict[str, list[dict]]) -> tuple[sa.Engine, sa.MetaData]:
    md, *_ = _schema()
    engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    md.create_all(engine)
    with engine.begin() as conn:
        for table, table_rows in rows.items():
            for row in table_rows:  # one by one: insertion order is what the caller gave
                conn.execute(md.tables[table].insert(), row)
    return engine, md


def _hash(rows: dict[str, list[dict]], **kw) -> tuple[str, dict]:
    engine, md = _db(rows)
    state = dump_database(engine, md, **kw)
    return state_hash(state), state


def test_insertion_order_does_not_change_the_hash():
    a = [
        {"order_id": "ORD-1", "status": "pending", "amount": 5.0},
        {"order_id": "ORD-2", "status": "shipped", "amount": 7.5},
        {"order_id": "ORD-10", "status": "delivered", "amount": 1.0},
    ]
    h1, s1 = _hash({"orders": a})
    h2, s2 = _hash({"orders": list(reversed(a))})
    assert h1 == h2
    assert [r["order_id"] for r in s1["orders"]] == ["ORD-1", "ORD-10", "ORD-2"]


def test_real_column_10_equals_10_point_0():
    h1, s1 = _hash({"orders": [{"order_id": "A", "status": "x", "amount": 10}]})
    h2, _ = _hash({"orders": [{"order_id": "A", "status": "x", "amount": 10.0}]})
    assert h1 == h2
    assert s1["orders"][0]["amount"] == 10.0 and isinstance(s1["orders"][0]["amount"], float)


def test_numeric_10_2_decimal_10_0_equals_10_00():
    h1, s1 = _hash({"items": [{"id": 1, "name": "a", "price": Decimal("10.0")}]})
    h2, _ = _hash({"items": [{"id": 1, "name": "a", "price": Decimal("10.00")}]})
    assert h1 == h2
    assert s1["items"][0]["price"] == "10.00"


def test_59_7_differs_from_19_9_times_3_and_the_diff_names_that_field():
    assert 19.9 * 3 == 59.699999999999996
    base = {"order_id": "ORD-7", "status": "paid"}
    h1, s1 = _hash(
        {"orders": [{**base, "amount": 59.7}, {"order_id": "ORD-8", "status": "x", "amount": 1.0}]}
    )
    h2, s2 = _hash(
        {
            "orders": [
                {**base, "amount": 19.9 * 3},
                {"order_id": "ORD-8", "status": "x", "amount": 1.0},
            ]
        }
    )
    assert h1 != h2
    diff = diff_states(s2, s1)
    assert diff == [
        {
            "path": "orders[ORD-7].amount",
            "type": "value mismatch",
            "result": 59.699999999999996,
            "golden": 59.7,
        }
    ]


def test_ungraded_table_and_column_never_affect_hash_or_diff():
    common = {"orders": [{"order_id": "A", "status": "x", "amount": 1.0}]}
    engine1, md = _db(
        {
            **common,
            "log": [{"seq": 1, "text": "called cancel"}],
            "items": [{"id": 1, "name": "kettle", "weight": 1.5}],
        }
    )
    engine2, _ = _db(
        {
            **common,
            "log": [{"seq": 1, "text": "other"}, {"seq": 2, "text": "more"}],
            "items": [{"id": 1, "name": "KETTLE", "weight": 1.5}],
        }
    )
    s1 = dump_database(engine1, md, ungraded={"log", "items.name"})
    s2 = dump_database(engine2, md, ungraded={"log", "items.name"})
    assert "log" not in s1 and "name" not in s1["items"][0]
    assert state_hash(s1) == state_hash(s2)
    assert diff_states(s1, s2) == []
    # without the ungraded set the same databases differ
    assert state_hash(dump_database(engine1, md)) != state_hash(dump_database(engine2, md))


_SUBPROCESS = r"""
import sys, json
import sqlalchemy as sa
sys.path.insert(0, sys.argv[1])
from rewardbox.grading.canonical import dump_database, state_hash
md = sa.MetaData()
t = sa.Table("t", md, sa.Column("k", sa.String, primary_key=True), sa.Column("v", sa.Float))
e = sa.create_engine("sqlite://")
md.create_all(e)
names = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
with e.begin() as c:
    for i, n in enumerate(names):          # set order depends on PYTHONHASHSEED
        c.execute(t.insert(), {"k": n, "v": len(n) / 3})
print(json.dumps([list(names), state_hash(dump_database(e, md))]))
"""


def test_hash_is_identical_across_pythonhashseed():
    out = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS, str(ROOT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        out.append(json.loads(proc.stdout))
    assert out[0][0] != out[1][0], "the two seeds should iterate the set differently"
    assert out[0][1] == out[1][1]


def test_rows_are_matched_by_primary_key_not_position():
    golden = {
        "orders": [
            {"order_id": k, "status": "pending", "amount": 1.0} for k in ("A", "B", "C", "D")
        ]
    }
    result = {"orders": [r for r in golden["orders"] if r["order_id"] != "B"]}
    keys = {"orders": ["order_id"]}
    diff = diff_states(result, golden, keys=keys)
    assert diff == [
        {"path": "orders", "type": "length mismatch", "result": 3, "golden": 4},
        {"path": "orders[B]", "type": "missing in result", "golden": golden["orders"][1]},
    ]
    extra = {"orders": golden["orders"] + [{"order_id": "E", "status": "new", "amount": 2.0}]}
    assert [d["type"] for d in diff_states(extra, golden, keys=keys)] == [
        "length mismatch",
        "present in result",
    ]


def test_rounding_only_where_configured_and_datetimes_as_iso():
    when = dt.datetime(2025, 6, 15, 9, 30)
    rows1 = {
        "orders": [{"order_id": "A", "status": "x", "amount": 59.7}],
        "items": [{"id": 1, "name": "a", "weight": 0.1 + 0.2, "seen_at": when}],
    }
    rows2 = {
        "orders": [{"order_id": "A", "status": "x", "amount": 19.9 * 3}],
        "items": [{"id": 1, "name": "a", "weight": 0.3, "seen_at": when}],
    }
    rounding = {"orders.amount": 2}
    h1, s1 = _hash(rows1, rounding=rounding)
    h2, s2 = _hash(rows2, rounding=rounding)
    assert s1["items"][0]["seen_at"] == "2025-06-15T09:30:00"
    assert s1["orders"] == s2["orders"]  # rounded: equal
    # items.weight is not configured: 0.1 + 0.2 != 0.3 still shows
    assert h1 != h2
    assert diff_states(s1, s2) == [
        {
            "path": "items[1].weight",
            "type": "value mismatch",
            "result": 0.30000000000000004,
            "golden": 0.3,
        }
    ]


def test_primary_keys_and_missing_table():
    md, *_ = _schema()
    assert primary_keys(md) == {"items": ["id"], "log": ["seq"], "orders": ["order_id"]}
    diff = diff_states({"orders": []}, {"orders": [], "log": []})
    assert diff == [{"path": "log", "type": "missing in result", "golden": []}]
