"""One episode's private SQLite database: schema, seed rows, the task's data patch.

Each ``EpisodeDatabase`` is an in-memory SQLite database on its own engine
(``StaticPool``: one connection, usable from any thread), so no episode ever
sees another's writes. Each task's database (the seeded schema with the task's
``data_patch`` upserted by primary key, docs/thinkingbox.md, "Server effects and golden state", values coerced to
the column types, every problem a ``DataPatchError`` naming the row) is prepared
once per process with its canonical initial state, and copied into every
episode database with SQLite's backup API.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from rewardbox import strict_json
from rewardbox.domains.base import DataPatchError, Domain
from rewardbox.grading.canonical import State


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
            return (
                value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
            )
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
            if (
                isinstance(value, float)
                and not value.is_integer()
                or not isinstance(value, (int, float))
            ):
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


@dataclass(frozen=True)
class _SQLiteTemplate:
    """What every episode engine shares: one initialised dialect and one statement cache."""

    dialect: Any
    url: sa.URL
    connect_args: tuple[tuple[Any, ...], dict[str, Any]]
    on_connect: Any
    compiled_cache: Any


@functools.lru_cache(maxsize=1)
def _sqlite_template() -> _SQLiteTemplate:
    proto = sa.create_engine("sqlite://", poolclass=StaticPool)
    with proto.connect():  # runs dialect.initialize() once
        pass
    cargs, cparams = proto.dialect.create_connect_args(proto.url)
    cparams = {**cparams, "check_same_thread": False}
    proto.dispose()
    return _SQLiteTemplate(
        proto.dialect,
        proto.url,
        (tuple(cargs), cparams),
        proto.dialect.on_connect(),
        sa.util.LRUCache(2000),
    )


def new_engine() -> sa.Engine:
    """A private in-memory SQLite engine (one connection, usable from any thread).

    Equivalent to ``create_engine("sqlite://", poolclass=StaticPool)`` with
    foreign keys on, except that every episode engine shares one dialect and one
    compiled-statement cache: SQLAlchemy keys compiled SQL by dialect instance, so
    separate ``create_engine`` calls would recompile every statement for every
    episode (about half of an episode's CPU time). The database is still private.
    """
    t = _sqlite_template()

    def connect() -> Any:
        conn = t.dialect.connect(*t.connect_args[0], **t.connect_args[1])
        if t.on_connect is not None:
            t.on_connect(conn)
        cursor = conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        return conn

    engine = sa.engine.Engine(StaticPool(connect), t.dialect, t.url, query_cache_size=0)
    return engine.execution_options(compiled_cache=t.compiled_cache)


def apply_data_patch(
    engine: sa.Engine, metadata: sa.MetaData, patch: Mapping[str, Any] | None
) -> None:
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
        raise DataPatchError(
            f"data_patch must be a mapping of table -> rows, got {type(patch).__name__}"
        )
    unknown = sorted(set(patch) - set(metadata.tables))
    if unknown:
        raise DataPatchError(
            f"data_patch: unknown table(s) {unknown}; known: {sorted(metadata.tables)}"
        )
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            rows = patch.get(table.name) or []
            if not isinstance(rows, list):
                raise DataPatchError(f"data_patch.{table.name}: expected a list of rows")
            coerced = [
                coerce_row(table, raw, f"data_patch.{table.name}[{i}]")
                for i, raw in enumerate(rows)
            ]
            if coerced:
                _upsert_rows(conn, table, coerced)


def _upsert_rows(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Update the rows whose primary key exists, insert the others, both in bulk.

    Rows are grouped by their column set and each group runs as one
    ``executemany`` (SQLAlchemy core); only when a group violates a constraint
    are its rows retried one by one to name the offending row.
    """
    pk_cols = list(table.primary_key.columns)
    existing = {tuple(r) for r in conn.execute(sa.select(*pk_cols))}
    updates: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    inserts: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    for i, row in enumerate(rows):
        missing = [c.name for c in pk_cols if row.get(c.name) is None]
        if missing:
            raise DataPatchError(
                f"data_patch.{table.name}[{i}]: missing primary key column(s) {missing}"
            )
        key = tuple(row[c.name] for c in pk_cols)
        target = updates if key in existing else inserts
        existing.add(key)
        target.setdefault(tuple(sorted(row)), []).append((i, row))
    for columns, batch in updates.items():
        pk_names = {c.name for c in pk_cols}
        statement = (
            table.update()
            .where(*[c == sa.bindparam(f"pk_{c.name}") for c in pk_cols])
            .values({name: sa.bindparam(f"v_{name}") for name in columns if name not in pk_names})
        )
        params = [
            {
                **{f"pk_{c.name}": row[c.name] for c in pk_cols},
                **{f"v_{k}": v for k, v in row.items()},
            }
            for _, row in batch
        ]
        if len(columns) > len(pk_names):  # a row naming only its key changes nothing
            _bulk(conn, table, statement, list(zip([i for i, _ in batch], params)))
    for batch in inserts.values():
        _bulk(conn, table, table.insert(), batch)


def _bulk(
    conn: sa.Connection, table: sa.Table, statement: Any, batch: list[tuple[int, dict[str, Any]]]
) -> None:
    """``executemany`` of one statement; on a constraint violation, row by row to name the row."""
    try:
        with conn.begin_nested():
            conn.execute(statement, [params for _, params in batch])
    except sa.exc.IntegrityError:
        for i, params in batch:
            _guarded(conn, statement, params, f"data_patch.{table.name}[{i}]")


def _guarded(
    conn: sa.Connection, statement: Any, params: dict[str, Any] | None, where: str
) -> None:
    try:
        with conn.begin_nested():
            conn.execute(statement, params)
    except sa.exc.IntegrityError as exc:
        raise DataPatchError(f"{where}: {exc.orig}") from exc


class _DatabaseImage:
    """A prepared in-memory database, copied into each new episode database.

    Copying with SQLite's online backup API (``sqlite3.Connection.backup``) is
    much cheaper than creating the schema and inserting rows again; the copy is
    byte-identical and private to the episode.
    """

    def __init__(
        self,
        domain: Domain,
        source: _DatabaseImage | None = None,
        data_patch: Mapping[str, Any] | None = None,
    ):
        self.engine = new_engine()
        self.lock = threading.Lock()
        try:
            if source is None:
                _seed(domain, self.engine)
            else:
                source.copy_into(self.engine)
                apply_data_patch(self.engine, domain.metadata, data_patch)
        except BaseException:
            self.engine.dispose()
            raise
        self.initial_state: State | None = None
        self.golden: dict[str, Any] = {}
        """Golden states replayed on this image, by interactions key (filled by ``rewardbox.domains.golden``)."""
        self._proxy = self.engine.raw_connection()  # held for the image's lifetime

    def copy_into(self, engine: sa.Engine) -> None:
        target = engine.raw_connection()
        try:
            with self.lock:
                self._proxy.driver_connection.backup(target.driver_connection)
        finally:
            target.close()


def _seed(domain: Domain, engine: sa.Engine) -> None:
    domain.metadata.create_all(engine)
    rows = domain.seed_rows()
    with engine.begin() as conn:
        for table in domain.metadata.sorted_tables:
            coerced = [
                coerce_row(table, r, f"seed.{table.name}[{i}]")
                for i, r in enumerate(rows.get(table.name, []))
            ]
            if coerced:
                conn.execute(table.insert(), coerced)


TASK_IMAGES_MAX = 256
"""Prepared task databases kept per process (least recently used are dropped): memory stays bounded."""

_SEEDS: dict[tuple[int, int], _DatabaseImage] = {}
_TASK_IMAGES: OrderedDict[tuple[int, int, str], _DatabaseImage] = OrderedDict()
_IMAGES_LOCK = threading.RLock()


def patch_key(data_patch: Mapping[str, Any] | None) -> str:
    """A canonical text key of a data patch (sorted JSON; non-JSON values by ``str``)."""
    return strict_json.dumps(data_patch or {}, sort_keys=True, default=str, separators=(",", ":"))


def task_image(domain: Domain, data_patch: Mapping[str, Any] | None = None) -> _DatabaseImage:
    """The prepared database of (domain, data patch): seed + patch applied once, initial state dumped once.

    One per process (a forked worker builds its own), at most ``TASK_IMAGES_MAX``
    task images plus one seed image per domain.

    Raises:
        DataPatchError: the patch is invalid (nothing is cached).
    """
    pid = os.getpid()
    key = (pid, id(domain), patch_key(data_patch))
    with _IMAGES_LOCK:
        image = _TASK_IMAGES.get(key)
        if image is not None:
            _TASK_IMAGES.move_to_end(key)
            return image
        seed_key = (pid, id(domain))
        if seed_key not in _SEEDS:
            _SEEDS[seed_key] = _DatabaseImage(domain)
        image = (
            _DatabaseImage(domain, _SEEDS[seed_key], data_patch) if data_patch else _SEEDS[seed_key]
        )
        if image.initial_state is None:
            image.initial_state = domain.dump(image.engine)
        _TASK_IMAGES[key] = image
        while (
            len(_TASK_IMAGES) > TASK_IMAGES_MAX
        ):  # an episode may still be copying it: freed when unreferenced
            _TASK_IMAGES.popitem(last=False)
        return image


class EpisodeDatabase:
    """One episode's private database: schema, seed rows, then the task's data patch.

    The database is a backup-API copy of the task's prepared image
    (:func:`task_image`); ``initial_state`` is the image's canonical state,
    dumped once per task and shared read-only (never mutate it).

    Raises:
        DataPatchError: the patch is invalid (the engine is disposed first).
    """

    def __init__(self, domain: Domain, data_patch: Mapping[str, Any] | None = None):
        self.domain = domain
        self.engine = new_engine()
        try:
            self.image = task_image(domain, data_patch)
            self.image.copy_into(self.engine)
        except BaseException:
            self.engine.dispose()
            raise
        self.initial_state: State = self.image.initial_state

    def dump(self) -> State:
        """The canonical state now."""
        return self.domain.dump(self.engine)

    def dispose(self) -> None:
        """Close the connection; the in-memory database is gone."""
        self.engine.dispose()
