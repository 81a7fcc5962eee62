"""The domain contract: tables, tools, seed rows, one database per episode, golden state.

A ``Domain`` bundles what every embedded domain defines. ``EpisodeDatabase`` is
one episode's private SQLite database (in-memory, ``StaticPool``), seeded and
patched. ``ToolRunner`` validates arguments exactly as the MCP server does (the
SDK's own ``func_metadata``) and runs a tool in one transaction, so the agent's
calls and the golden replay go through the same code. ``compute_effects``
builds the ``__reserved__geteffects`` payload (THINKINGBOX_FORMAT.md §3).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata
from pydantic import ValidationError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from rewardbox.grading.canonical import State, diff_states, dump_database, primary_keys, state_hash


class ToolFailure(Exception):
    """A tool's own error (not found, invalid state). Shown to the agent as ``{"error": ...}``."""


class DataPatchError(ValueError):
    """A ``data_patch`` names an unknown table or column, or a row is invalid."""


@dataclass(frozen=True, eq=False)
class Domain:
    """Everything one embedded domain defines.

    Attributes:
        name: dataset name, e.g. ``"retail"``.
        server_name: MCP server / world_state key, e.g. ``"rewardbox_retail"``.
        metadata: the SQLAlchemy ``MetaData`` of every table.
        tools: plain functions ``fn(db: Session, **args) -> dict | list``; the
            docstring is the description the model reads.
        seed_rows: zero-argument callable returning ``{table: [row, ...]}``.
        policy_text: the policy (scenario ``bot_instructions``).
        ungraded: table names or ``"table.column"`` names left out of the state.
        rounding: ``{"table.column": ndigits}`` for ``dump_database``.
        readonly_tools: names of tools that never write.
    """

    name: str
    server_name: str
    metadata: sa.MetaData
    tools: tuple[Callable[..., Any], ...]
    seed_rows: Callable[[], dict[str, list[dict[str, Any]]]]
    policy_text: str
    ungraded: frozenset[str] = frozenset()
    rounding: Mapping[str, int] = field(default_factory=dict)
    readonly_tools: frozenset[str] = frozenset()

    def dump(self, engine: sa.Engine) -> State:
        """The canonical state of an engine of this domain."""
        return dump_database(engine, self.metadata, ungraded=self.ungraded, rounding=self.rounding)


# -- values and data patches ----------------------------------------------------------


def coerce_value(column: sa.Column, value: Any, where: str) -> Any:
    """A JSON/YAML value converted to what the column stores.

    Raises:
        DataPatchError: the value does not fit the column type (message names ``where``).
    """
    if value is None:
        return None
    col_type = column.type
    try:
        if isinstance(col_type, sa.DateTime):
            return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
        if isinstance(col_type, sa.Date):
            if isinstance(value, dt.datetime):
                return value.date()
            return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
        if isinstance(value, bool) and not isinstance(col_type, (sa.Boolean, sa.JSON)):
            raise TypeError("booleans are only allowed in boolean columns")
        if isinstance(col_type, sa.Float):
            if not isinstance(value, (int, float)):
                raise TypeError(f"expected a number, got {type(value).__name__}")
            return float(value)
        if isinstance(col_type, sa.Numeric):
            return decimal.Decimal(str(value))
        if isinstance(col_type, sa.Boolean):
            if not isinstance(value, bool):
                raise TypeError(f"expected true/false, got {type(value).__name__}")
            return value
        if isinstance(col_type, sa.Integer):
            if isinstance(value, float) and not value.is_integer() or not isinstance(value, (int, float)):
                raise TypeError(f"expected an integer, got {value!r}")
            return int(value)
        if isinstance(col_type, sa.String) and not isinstance(value, str):
            raise TypeError(f"expected a string, got {type(value).__name__}")
    except (TypeError, ValueError, decimal.InvalidOperation) as exc:
        raise DataPatchError(f"{where}: {exc}") from exc
    return value


def coerce_row(table: sa.Table, row: Any, where: str) -> dict[str, Any]:
    """One patch/seed row checked against the table: known columns, typed values."""
    if not isinstance(row, Mapping):
        raise DataPatchError(f"{where}: a row must be a mapping, got {type(row).__name__}")
    unknown = sorted(set(row) - set(table.columns.keys()))
    if unknown:
        raise DataPatchError(f"{where}: unknown column(s) {unknown} in table {table.name!r}")
    return {k: coerce_value(table.columns[k], v, f"{where}.{k}") for k, v in row.items()}


def _enable_foreign_keys(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def new_engine() -> sa.Engine:
    """A private in-memory SQLite engine (one connection, usable from any thread)."""
    engine = sa.create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    sa.event.listen(engine, "connect", _enable_foreign_keys)
    return engine


def apply_data_patch(engine: sa.Engine, metadata: sa.MetaData, patch: Mapping[str, Any] | None) -> None:
    """Upsert the rows of a ``data_patch`` by primary key, in foreign-key order.

    An existing row is updated with the given columns; a new row is inserted.
    An empty list is a no-op (it never clears a table).

    Raises:
        DataPatchError: unknown table or column, a value of the wrong type, a row
            without its primary key, or a constraint violation. Nothing is written.
    """
    if not patch:
        return
    if not isinstance(patch, Mapping):
        raise DataPatchError(f"data_patch must be a mapping of table -> rows, got {type(patch).__name__}")
    unknown = sorted(set(patch) - set(metadata.tables))
    if unknown:
        raise DataPatchError(f"data_patch: unknown table(s) {unknown}; known: {sorted(metadata.tables)}")
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            rows = patch.get(table.name) or []
            if not isinstance(rows, list):
                raise DataPatchError(f"data_patch.{table.name}: expected a list of rows")
            for i, raw in enumerate(rows):
                _upsert(conn, table, coerce_row(table, raw, f"data_patch.{table.name}[{i}]"), i)


def _upsert(conn: sa.Connection, table: sa.Table, row: dict[str, Any], index: int) -> None:
    where = f"data_patch.{table.name}[{index}]"
    pk_cols = list(table.primary_key.columns)
    missing = [c.name for c in pk_cols if row.get(c.name) is None]
    if missing:
        raise DataPatchError(f"{where}: missing primary key column(s) {missing}")
    cond = sa.and_(*[c == row[c.name] for c in pk_cols])
    try:
        exists = conn.execute(sa.select(sa.func.count()).select_from(table).where(cond)).scalar_one()
        if exists:
            conn.execute(table.update().where(cond).values(**row))
        else:
            conn.execute(table.insert().values(**row))
    except sa.exc.IntegrityError as exc:
        raise DataPatchError(f"{where}: {exc.orig}") from exc


@functools.lru_cache(maxsize=16)
def _coerced_seed(domain: Domain) -> tuple[tuple[str, tuple[dict[str, Any], ...]], ...]:
    rows = domain.seed_rows()
    out = []
    for table in domain.metadata.sorted_tables:
        coerced = tuple(coerce_row(table, r, f"seed.{table.name}[{i}]") for i, r in enumerate(rows.get(table.name, [])))
        out.append((table.name, coerced))
    return tuple(out)


class EpisodeDatabase:
    """One episode's private database: schema, seed rows, then the task's data patch.

    Raises:
        DataPatchError: the patch is invalid (the engine is disposed first).
    """

    def __init__(self, domain: Domain, data_patch: Mapping[str, Any] | None = None):
        self.domain = domain
        self.engine = new_engine()
        try:
            domain.metadata.create_all(self.engine)
            with self.engine.begin() as conn:
                for name, rows in _coerced_seed(domain):
                    if rows:
                        conn.execute(domain.metadata.tables[name].insert(), [dict(r) for r in rows])
            apply_data_patch(self.engine, domain.metadata, data_patch)
        except BaseException:
            self.engine.dispose()
            raise

    def dump(self) -> State:
        """The canonical state now."""
        return self.domain.dump(self.engine)

    def dispose(self) -> None:
        """Close the connection; the in-memory database is gone."""
        self.engine.dispose()


# -- tools ----------------------------------------------------------------------------


def public_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The tool's signature as the model sees it: without the leading session parameter."""
    sig = inspect.signature(fn, eval_str=True)
    params = list(sig.parameters.values())[1:]
    return sig.replace(parameters=params, return_annotation=str)


def format_validation_error(exc: ValidationError) -> str:
    """``"Input validation failed: order_id: Input should be a valid string"``."""
    parts = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
    return "Input validation failed: " + "; ".join(parts)


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(payload: Any) -> str:
    """Tool output text: ``json.dumps`` with Decimals as numbers and dates as ISO strings."""
    return json.dumps(payload, default=_json_default)


class ToolRunner:
    """Validates and runs a domain's tools; shared by the MCP server and the golden replay."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self.functions: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in domain.tools}
        self.metadata: dict[str, FuncMetadata] = {}
        for name, fn in self.functions.items():
            first = next(iter(inspect.signature(fn).parameters))
            self.metadata[name] = func_metadata(fn, skip_names=[first], structured_output=False)

    def validate(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments parsed exactly as the MCP SDK parses them.

        Raises:
            ToolFailure: unknown tool or invalid arguments (message for the model).
        """
        if name not in self.metadata:
            raise ToolFailure(f"Unknown tool: {name}")
        try:
            return self.metadata[name].validate_arguments(dict(arguments))
        except ValidationError as exc:
            raise ToolFailure(format_validation_error(exc)) from exc

    def execute(self, engine: sa.Engine, name: str, kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
        """Run one validated call in its own transaction.

        Returns:
            ``(payload, failed)``: the tool's result, or ``{"error", "tool"}`` with
            ``failed=True`` when the tool raised ``ToolFailure`` (nothing is written).
        """
        with Session(engine) as db:
            try:
                result = self.functions[name](db, **kwargs)
                db.commit()
            except ToolFailure as exc:
                db.rollback()
                return {"error": str(exc), "tool": name}, True
        return result, False

    def invoke(self, engine: sa.Engine, name: str, arguments: Mapping[str, Any]) -> tuple[Any, bool]:
        """Validate then execute; every tool-level problem becomes ``{"error", "tool"}``."""
        try:
            kwargs = self.validate(name, arguments)
        except ToolFailure as exc:
            return {"error": str(exc), "tool": name}, True
        return self.execute(engine, name, kwargs)


# -- golden state and effects -----------------------------------------------------------


def golden_interactions(golden_test_case: Any) -> list[dict[str, Any]]:
    """The ``tool_interactions`` list of a ``golden_test_case`` (checked shape).

    Raises:
        DataPatchError: the block is not ``{tool_interactions: [{tool, parameters}]}``.
    """
    if not golden_test_case:
        return []
    if not isinstance(golden_test_case, Mapping):
        raise DataPatchError("golden_test_case must be a mapping with 'tool_interactions'")
    items = golden_test_case.get("tool_interactions") or []
    if not isinstance(items, list):
        raise DataPatchError("golden_test_case.tool_interactions must be a list")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("tool"), str):
            raise DataPatchError(f"golden_test_case.tool_interactions[{i}]: needs a 'tool' name")
        if not isinstance(item.get("parameters") or {}, Mapping):
            raise DataPatchError(f"golden_test_case.tool_interactions[{i}].parameters must be a mapping")
    return [dict(item) for item in items]


def build_golden_state(
    runner: ToolRunner, data_patch: Mapping[str, Any] | None, interactions: list[dict[str, Any]]
) -> tuple[State | None, str | None]:
    """Replay the golden interactions on a fresh database (same seed, same patch).

    Returns:
        ``(golden_state, None)``, or ``(None, message)`` when an interaction
        fails: the golden state cannot be built and the task is invalid.
    """
    db = EpisodeDatabase(runner.domain, data_patch)
    try:
        for i, item in enumerate(interactions):
            payload, failed = runner.invoke(db.engine, item["tool"], item.get("parameters") or {})
            if failed:
                return None, f"golden interaction {i} ({item['tool']}) failed: {payload['error']}"
        return db.dump(), None
    finally:
        db.dispose()


def compute_effects(
    runner: ToolRunner,
    initial_state: State,
    result_state: State,
    data_patch: Mapping[str, Any] | None,
    interactions: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``__reserved__geteffects`` payload.

    Returns:
        ``{initial_db_state, result_db_state, result_db_hash, golden_db_state,
        golden_db_hash, diff}``; when the golden state cannot be built,
        ``golden_db_state``/``golden_db_hash`` are None, ``diff`` is empty and
        ``golden_error`` says why (the task is invalid, never graded).
    """
    golden_state, error = build_golden_state(runner, data_patch, interactions)
    effects: dict[str, Any] = {
        "initial_db_state": initial_state,
        "result_db_state": result_state,
        "result_db_hash": state_hash(result_state),
        "golden_db_state": golden_state,
        "golden_db_hash": None if golden_state is None else state_hash(golden_state),
        "diff": [],
    }
    if error is not None:
        effects["golden_error"] = error
    else:
        keys = primary_keys(runner.domain.metadata)
        effects["diff"] = diff_states(result_state, golden_state, keys=keys)
    return effects
