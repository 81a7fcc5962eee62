"""Canonical terminal state: a deterministic dump of a database, its hash and a diff.

The reward compares the terminal state of an episode's database with the golden
state (the same database after replaying the task's reference actions). Both are
dumped here into plain JSON-able data so that equal states give equal SHA-256
hashes in any process, and unequal ones give a diff that names every field that
differs (docs/thinkingbox.md, "Server effects and golden state", ``calculate_database_hash`` /
``calculate_deep_diff``).

Canonical form (``dump_database``):

* every table of the ``MetaData``, keyed by table name; tables listed in
  ``ungraded`` (bookkeeping, e.g. an audit log) are left out entirely, and so are
  ``"table.column"`` entries of ``ungraded`` (free-text fields such as a ticket
  description);
* rows sorted by primary key (by all columns when a table has none);
* values normalised by column type: ``Float``/``REAL`` -> ``float`` (10 == 10.0),
  ``Numeric(p, s)`` -> ``Decimal`` quantized to scale ``s`` rendered as a string
  (``10.0`` == ``10.00`` in ``NUMERIC(10, 2)``), dates and datetimes -> ISO
  strings, ``Boolean`` -> ``bool``, ``Integer`` -> ``int``;
* no rounding anywhere except where ``rounding={"table.column": ndigits}`` asks
  for it, so ``59.7`` and ``19.9 * 3`` (``59.699999999999996``) stay different.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from rewardbox import strict_json

State = dict[str, list[dict[str, Any]]]

_MISSING = object()


def primary_keys(metadata: sa.MetaData) -> dict[str, list[str]]:
    """Primary-key column names per table (all columns when a table has no PK).

    Args:
        metadata: the SQLAlchemy ``MetaData`` holding the tables.

    Returns:
        ``{table_name: [column, ...]}``, the row identity ``diff_states`` uses.
    """
    out: dict[str, list[str]] = {}
    for table in metadata.sorted_tables:
        cols = [c.name for c in table.primary_key.columns] or [c.name for c in table.columns]
        out[table.name] = cols
    return out


def normalise_value(column: sa.Column, value: Any, ndigits: int | None = None) -> Any:
    """One column value in canonical form (see the module docstring).

    Accepts both driver values (SQLite returns dates as ISO text and money as
    REAL) and Python values (``date``, ``Decimal``), so that a dump read with or
    without SQLAlchemy's type processing is the same.

    Args:
        column: the column the value came from; its type decides the form.
        value: the value read from the database.
        ndigits: explicit rounding for this column, or None for none.

    Returns:
        A JSON-able value: None, bool, int, float, str, or a list/dict for JSON columns.
    """
    if value is None:
        return None
    col_type = column.type
    if isinstance(col_type, sa.Float):
        out = float(value)
        return round(out, ndigits) if ndigits is not None else out
    if isinstance(col_type, sa.Numeric):
        return _render_decimal(value, col_type.scale, ndigits)
    if isinstance(col_type, sa.Boolean):
        return bool(value)
    if isinstance(col_type, sa.Integer):
        return int(value)
    if isinstance(col_type, (sa.DateTime, sa.Date, sa.Time)):
        return _render_temporal(col_type, value)
    if isinstance(col_type, sa.JSON) and isinstance(value, (str, bytes)):
        return json.loads(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return _render_decimal(value, None, ndigits)
    if isinstance(value, float) and ndigits is not None:
        return round(value, ndigits)
    return value


def _render_temporal(col_type: sa.types.TypeEngine, value: Any) -> str:
    """ISO text of a date/datetime/time, from a Python value or the driver's text."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    text = str(value)
    if isinstance(col_type, sa.DateTime):
        return dt.datetime.fromisoformat(text).isoformat()
    if isinstance(col_type, sa.Date):
        return dt.date.fromisoformat(text[:10]).isoformat()
    return dt.time.fromisoformat(text).isoformat()


def _render_decimal(value: Any, scale: int | None, ndigits: int | None) -> str:
    """Decimal text quantized to ``ndigits`` (if set) else the column scale, else normalised."""
    number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    places = ndigits if ndigits is not None else scale
    if places is None:
        text = format(number.normalize(), "f")
        return "0" if text in ("-0", "") else text
    quantum = decimal.Decimal(1).scaleb(-places)
    return format(number.quantize(quantum, rounding=decimal.ROUND_HALF_EVEN), "f")


def _scalar_key(value: Any) -> tuple:
    """A total order over canonical values of mixed types (None < numbers < text < other)."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, (bool, int, float)):
        return (1, value, "")
    if isinstance(value, str):
        return (2, 0, value)
    return (3, 0, strict_json.dumps(value, sort_keys=True, default=str))


def dump_table(
    conn: sa.Connection,
    table: sa.Table,
    *,
    skip_columns: frozenset[str] = frozenset(),
    rounding: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """All rows of one table in canonical form, sorted by primary key.

    The rows are read with plain driver SQL and normalised here by column type
    (an SQLAlchemy ``select`` would be compiled afresh for every new engine).

    Args:
        conn: an open connection.
        table: the table to read.
        skip_columns: column names to leave out (ungraded fields).
        rounding: ``{"table.column": ndigits}``; only these columns are rounded.

    Returns:
        A list of ``{column: value}`` dicts.
    """
    rounding = rounding or {}
    columns = [c for c in table.columns if c.name not in skip_columns]
    key_cols = [c.name for c in table.primary_key.columns if c.name not in skip_columns]
    quote = conn.dialect.identifier_preparer.quote
    sql = f"SELECT {', '.join(quote(c.name) for c in columns)} FROM {quote(table.name)}"
    digits = [rounding.get(f"{table.name}.{c.name}") for c in columns]
    rows: list[dict[str, Any]] = []
    for raw in conn.exec_driver_sql(sql):  # driver values: no per-engine statement compilation
        rows.append({c.name: normalise_value(c, v, n) for c, v, n in zip(columns, raw, digits)})
    order = key_cols or [c.name for c in columns]
    rows.sort(key=lambda r: tuple(_scalar_key(r[k]) for k in order))
    return rows


def dump_database(
    engine: sa.Engine,
    metadata: sa.MetaData,
    *,
    ungraded: Iterable[str] = frozenset(),
    rounding: Mapping[str, int] | None = None,
) -> State:
    """Canonical dump of every graded table: the terminal (or golden) state.

    Args:
        engine: the episode's database engine.
        metadata: the tables to dump (all of them, seed data included).
        ungraded: table names, or ``"table.column"`` names, that must never
            affect the hash or the diff (bookkeeping tables, free-text fields).
        rounding: ``{"table.column": ndigits}``: the only columns that are rounded.

    Returns:
        ``{table_name: [row, ...]}`` with rows sorted by primary key; JSON-able.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read (a system
            error for the caller to wrap).
    """
    ungraded = set(ungraded)
    state: State = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name in ungraded:
                continue
            skip = frozenset(c.name for c in table.columns if f"{table.name}.{c.name}" in ungraded)
            state[table.name] = dump_table(conn, table, skip_columns=skip, rounding=rounding)
    return dict(sorted(state.items()))


def state_hash(state: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of ``strict_json.dumps(state, sort_keys=True, separators=(",", ":"))``.

    The same digest in every process: the dump holds only dicts, lists and
    scalars (no sets), and keys are sorted, so ``PYTHONHASHSEED`` cannot leak in.
    """
    text = strict_json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _row_label(row: Mapping[str, Any], keys: list[str] | None, index: int) -> str:
    if not keys or any(k not in row for k in keys):
        return str(index)
    return ",".join(str(row[k]) for k in keys)


def _index_rows(rows: list[dict[str, Any]], keys: list[str] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows):
        label = _row_label(row, keys, i)
        if label in out:  # duplicate identity: fall back to the position
            label = f"{label}#{i}"
        out[label] = row
    return out


def _infer_keys(result: list[dict[str, Any]], golden: list[dict[str, Any]]) -> list[str] | None:
    """Row identity without metadata: ``id``, else the first column (where dumps put the
    primary key) when its values are unique and non-null in both lists; else None (position)."""
    rows = golden or result
    if not rows:
        return None
    for candidate in ("id", next(iter(rows[0]))):
        for side in (result, golden):
            values = [r.get(candidate) for r in side]
            if None in values or len(set(map(repr, values))) != len(values):
                break
        else:
            return [candidate]
    return None


def _diff_value(path: str, result: Any, golden: Any, out: list[dict[str, Any]]) -> None:
    if result == golden and type(result) is type(golden):
        return
    if isinstance(result, dict) and isinstance(golden, dict):
        for key in sorted(set(result) | set(golden), key=str):
            _diff_field(f"{path}.{key}", result.get(key, _MISSING), golden.get(key, _MISSING), out)
        return
    if isinstance(result, list) and isinstance(golden, list) and len(result) != len(golden):
        out.append(
            {"path": path, "type": "length mismatch", "result": len(result), "golden": len(golden)}
        )
        return
    if isinstance(result, list) and isinstance(golden, list):
        for i, (a, b) in enumerate(zip(result, golden)):
            _diff_value(f"{path}[{i}]", a, b, out)
        return
    numbers = (int, float)
    same_kind = type(result) is type(golden) or (
        isinstance(result, numbers)
        and isinstance(golden, numbers)
        and not isinstance(result, bool)
        and not isinstance(golden, bool)
    )
    if result is None or golden is None:
        kind = "none in result" if result is None else "none in golden"
    else:
        kind = "value mismatch" if same_kind else "type mismatch"
    if result != golden or type(result) is not type(golden):
        out.append({"path": path, "type": kind, "result": result, "golden": golden})


def _diff_field(path: str, result: Any, golden: Any, out: list[dict[str, Any]]) -> None:
    if result is _MISSING:
        out.append({"path": path, "type": "missing in result", "golden": golden})
    elif golden is _MISSING:
        out.append({"path": path, "type": "present in result", "result": result})
    else:
        _diff_value(path, result, golden, out)


def _diff_table(
    name: str,
    result: list[dict],
    golden: list[dict],
    keys: list[str] | None,
    out: list[dict[str, Any]],
) -> None:
    keys = keys if keys is not None else _infer_keys(result, golden)
    if len(result) != len(golden):
        out.append(
            {"path": name, "type": "length mismatch", "result": len(result), "golden": len(golden)}
        )
    res_rows, gold_rows = _index_rows(result, keys), _index_rows(golden, keys)
    labels = list(gold_rows) + [k for k in res_rows if k not in gold_rows]
    for label in labels:
        path = f"{name}[{label}]"
        if label not in res_rows:
            out.append({"path": path, "type": "missing in result", "golden": gold_rows[label]})
        elif label not in gold_rows:
            out.append({"path": path, "type": "present in result", "result": res_rows[label]})
        else:
            _diff_value(path, res_rows[label], gold_rows[label], out)


def diff_states(
    result: Mapping[str, list[dict[str, Any]]],
    golden: Mapping[str, list[dict[str, Any]]],
    *,
    keys: Mapping[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Every difference between a terminal state and the golden state.

    Rows are matched by primary key (``keys`` from ``primary_keys(metadata)``;
    without it, by an ``id`` column, else by the first column when its values are
    unique in both states, else by position).

    Args:
        result: the terminal state (``dump_database`` output).
        golden: the golden state.
        keys: ``{table: [pk column, ...]}``.

    Returns:
        A list of ``{path, type, result?, golden?}``, e.g.
        ``{"path": "orders[ORD-7].status", "type": "value mismatch",
        "result": "pending", "golden": "cancelled"}``. Types: ``value mismatch``,
        ``type mismatch``, ``length mismatch`` (row counts of a table),
        ``missing in result``, ``present in result``, ``none in result``,
        ``none in golden``. Empty when the states are equal.
    """
    out: list[dict[str, Any]] = []
    keys = keys or {}
    for name in sorted(set(result) | set(golden)):
        if name not in result:
            out.append({"path": name, "type": "missing in result", "golden": golden[name]})
        elif name not in golden:
            out.append({"path": name, "type": "present in result", "result": result[name]})
        else:
            _diff_table(name, list(result[name]), list(golden[name]), keys.get(name), out)
    return out


def format_diff(diff: list[dict[str, Any]], limit: int = 20) -> str:
    """A short human-readable rendering of a diff, one line per entry (for test messages)."""
    lines = []
    for item in diff[:limit]:
        parts = [f"{item['path']}: {item['type']}"]
        if "result" in item:
            parts.append(f"result={strict_json.dumps(item['result'], default=str)[:200]}")
        if "golden" in item:
            parts.append(f"golden={strict_json.dumps(item['golden'], default=str)[:200]}")
        lines.append(" ".join(parts))
    if len(diff) > limit:
        lines.append(f"... {len(diff) - limit} more")
    return "\n".join(lines)
