"""The domain contract: what a domain defines, and the runner that executes its tools.

A ``Domain`` bundles what every embedded domain defines (tables, tools, seed
rows, policy, ungraded parts). ``ToolRunner`` validates arguments exactly as the
MCP server does (the SDK's own ``func_metadata``) and runs a tool in one
transaction, so the agent's calls and the golden replay go through the same code.
The episode database lives in ``database.py``; the golden state and the
``geteffects`` payload in ``golden.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata
from pydantic import ValidationError
from sqlalchemy.orm import Session

from rewardbox import strict_json
from rewardbox.grading.canonical import State, dump_database


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
        splittable: ``{tool: list parameter}`` of write tools whose list may be
            sent in several calls with the same outcome (e.g. ``return_items``'s
            ``item_ids``); the order-independence check of the generator splits them.
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
    splittable: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_modules(
        cls, name: str, *, models: ModuleType, seed: ModuleType, tools: ModuleType
    ) -> Domain:
        """The record of a domain package laid out as every embedded domain is.

        Args:
            name: the domain (dataset and scenario) name; the server is ``rewardbox_<name>``.
            models: its ``models`` module (``METADATA``, ``UNGRADED``).
            seed: its ``seed`` module (``seed_rows``).
            tools: its ``tools`` module (``TOOLS``, ``READONLY_TOOLS``, optional ``SPLITTABLE``).

        The policy is ``policy.md`` next to ``models``, stripped.

        Raises:
            OSError: the policy file cannot be read.
        """
        policy_path = Path(models.__file__).with_name("policy.md")
        return cls(
            name=name,
            server_name=f"rewardbox_{name}",
            metadata=models.METADATA,
            tools=tools.TOOLS,
            seed_rows=seed.seed_rows,
            policy_text=policy_path.read_text(encoding="utf-8").strip(),
            ungraded=models.UNGRADED,
            readonly_tools=tools.READONLY_TOOLS,
            splittable=dict(getattr(tools, "SPLITTABLE", {})),
        )

    def dump(self, engine: sa.Engine) -> State:
        """The canonical state of an engine of this domain."""
        return dump_database(engine, self.metadata, ungraded=self.ungraded, rounding=self.rounding)


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
    """Tool output text: strict JSON (``rewardbox.strict_json``) with Decimals as numbers and dates as ISO strings."""
    return strict_json.dumps(payload, default=_json_default)


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

    def invoke(
        self, engine: sa.Engine, name: str, arguments: Mapping[str, Any]
    ) -> tuple[Any, bool]:
        """Validate then execute; every tool-level problem becomes ``{"error", "tool"}``."""
        try:
            kwargs = self.validate(name, arguments)
        except ToolFailure as exc:
            return {"error": str(exc), "tool": name}, True
        return self.execute(engine, name, kwargs)
