"""``servers.yaml``: where each tool server of a scenario comes from.

The shape follows ThinkingBox's ``ServersConfig`` (docs/thinkingbox.md, "Servers")::

    use_internal_servers: false
    servers:
      sandbox_external_retail:
        type: mcp-process
        command: "{python} -m tb_business_ops_servers_202606.mcp_sandbox_external_retail"
        env: {TYPESENSE_API_KEY: Fake}
        cwd: ${THINKINGBOX_DATA}/servers        # optional
        episodes_per_process: 1                  # optional (rewardbox): > 1 reuses a warm process
        start: template                          # optional (rewardbox): template (fork) | fresh
        reuse_unchecked: false                   # optional (rewardbox): reuse without the canary
      search:
        type: mcp-remote
        endpoint: http://127.0.0.1:8000/mcp
        transport: streamable-http
        headers: {Authorization: "Bearer ${SEARCH_API_KEY}"}
        timeout: 30

Substitution in ``command``, ``env`` values, ``cwd``, ``endpoint`` and header
values, in this order:

1. ``{python}`` becomes ``sys.executable``; ``{env[NAME]}`` becomes
   ``os.environ["NAME"]`` (an unset NAME is an error naming file and field).
   Other braces are left alone, so JSON in arguments survives.
2. ``$NAME`` / ``${NAME}`` are expanded by ``os.path.expandvars``; an unset
   NAME is left as written (expandvars' rule), so a literal ``$`` survives.

``command`` may be a string (split with ``shlex``) or a list of strings.
A process server runs with env = ``os.environ`` + its ``env`` +
``FASTMCP_LOG_LEVEL=WARNING``.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

INTERNAL_EPISODES_PER_PROCESS = 100
_ENV_REF = re.compile(r"\{env\[['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\]\}")


class ServersConfigError(ValueError):
    """A servers.yaml file is malformed; the message names the file and field."""

    def __init__(self, path: str | Path, message: str, field: str | None = None):
        detail = f" (field {field!r})" if field else ""
        super().__init__(f"{path}{detail}: {message}")
        self.path = str(path)
        self.field = field


def substitute(text: str, *, field: str = "", path: str | Path = "<servers config>") -> str:
    """Apply ``{python}``, ``{env[NAME]}`` and ``$NAME`` substitution to one string.

    Raises:
        ServersConfigError: ``{env[NAME]}`` names an unset variable.
    """

    def env_ref(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ServersConfigError(path, f"environment variable {name!r} is not set", field)
        return os.environ[name]

    text = text.replace("{python}", sys.executable)
    text = _ENV_REF.sub(env_ref, text)
    return os.path.expandvars(text)


class ProcessServer(BaseModel):
    """A stdio MCP server spawned per episode (``type: mcp-process``).

    ``episodes_per_process`` (a rewardbox extension, default 1 = a fresh process
    per episode as in ThinkingBox) lets a warm pool (``rewardbox.sandbox.pool``)
    reuse one process for up to that many episodes; the first reused episode is
    checked against a fresh process (``rewardbox.sandbox.canary``), and reuse is
    retired for a server that fails the check. ``reuse_unchecked: true`` trusts
    reuse (pool or template) without that check: for a server whose effects
    carry no hashes, which the canary cannot check. ``start`` is how a process is made: ``template``
    (default) forks it from a template that has imported the server
    (``rewardbox.sandbox.template``; a server that cannot be forked falls back to
    ``fresh``), ``fresh`` spawns a new interpreter (as ThinkingBox does).
    """

    model_config = ConfigDict(extra="forbid")
    type: Literal["mcp-process"]
    command: str | list[str]
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    cwd: str | None = None
    episodes_per_process: int = Field(default=1, ge=1)
    reuse_unchecked: bool = False
    start: Literal["template", "fresh"] = "template"

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if not (value.strip() if isinstance(value, str) else value):
            raise ValueError("command is empty")
        return value

    def argv(self, path: str | Path = "<servers config>", name: str = "") -> list[str]:
        """The command as an argv list, with substitution applied."""
        field = f"servers.{name}.command"
        parts = shlex.split(self.command) if isinstance(self.command, str) else list(self.command)
        return [substitute(p, field=field, path=path) for p in parts]

    def process_env(self, path: str | Path = "<servers config>", name: str = "") -> dict[str, str]:
        """``os.environ`` + this server's ``env`` (substituted) + ``FASTMCP_LOG_LEVEL=WARNING``."""
        env = dict(os.environ)
        for key, value in self.env.items():
            env[key] = substitute(str(value), field=f"servers.{name}.env.{key}", path=path)
        env["FASTMCP_LOG_LEVEL"] = "WARNING"
        return env

    def resolved_cwd(self, path: str | Path = "<servers config>", name: str = "") -> str | None:
        """The working directory with substitution applied (``None``: inherit)."""
        return substitute(self.cwd, field=f"servers.{name}.cwd", path=path) if self.cwd else None


class RemoteServer(BaseModel):
    """An MCP server reached over HTTP (``type: mcp-remote``); not spawned by us."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["mcp-remote"]
    endpoint: str
    transport: Literal["streamable-http", "streamable_http", "http", "sse"] = "streamable-http"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=30.0, gt=0)

    def resolved_endpoint(self, path: str | Path = "<servers config>", name: str = "") -> str:
        """The endpoint URL with substitution applied."""
        return substitute(self.endpoint, field=f"servers.{name}.endpoint", path=path)

    def resolved_headers(
        self, path: str | Path = "<servers config>", name: str = ""
    ) -> dict[str, str]:
        """Header values with substitution applied (secrets come from the environment)."""
        return {
            key: substitute(value, field=f"servers.{name}.headers.{key}", path=path)
            for key, value in self.headers.items()
        }


ServerConfig = Annotated[ProcessServer | RemoteServer, Field(discriminator="type")]


class ServersConfig(BaseModel):
    """The whole servers.yaml: ``{use_internal_servers, servers: {name: server}}``."""

    model_config = ConfigDict(extra="forbid")
    use_internal_servers: bool = False
    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    _source: str = PrivateAttr(default="<servers config>")

    @property
    def source(self) -> str:
        """The file this config came from (used in error messages)."""
        return self._source

    def get(self, name: str) -> ProcessServer | RemoteServer:
        """The config of server ``name``.

        Raises:
            KeyError: with a message naming the file, when ``name`` is not configured.
        """
        try:
            return self.servers[name]
        except KeyError:
            known = ", ".join(sorted(self.servers)) or "none"
            note = (
                f"; {UPSTREAM_INTERNAL_NOTE.format(python=sys.executable)}"
                if (self.use_internal_servers and not upstream_internal_servers())
                else ""
            )
            raise KeyError(
                f"server {name!r} is not defined in {self.source} (defined: {known}){note}"
            ) from None


UPSTREAM_INTERNAL_NOTE = (
    "use_internal_servers adds ThinkingBox's bundled servers (tb/tools/mcp_*.py, e.g. cloud_drive) only when "
    "the {{python}} interpreter ({python}) can import the package tb.tools, and it cannot here; what it adds "
    'here is rewardbox\'s embedded domain servers (docs/external_servers.md, "use_internal_servers")'
)


def upstream_internal_servers() -> dict[str, ProcessServer]:
    """ThinkingBox's own bundled servers, as upstream's ``use_internal_servers`` adds them.

    Every ``tb/tools/mcp_<name>.py`` of the ``tb`` package that ``{python}`` (this
    interpreter) can import becomes server ``<name>``, run as ``{python} -m
    tb.tools.mcp_<name>`` (one process per episode, as upstream). ``{}`` when
    ``tb.tools`` is not importable.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("tb.tools")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    servers: dict[str, ProcessServer] = {}
    for folder in spec.submodule_search_locations:
        root = str(Path(folder).resolve().parents[1])  # the directory that holds ``tb``
        pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        for path in sorted(Path(folder).glob("mcp_*.py")):
            servers.setdefault(
                path.stem.removeprefix("mcp_"),
                ProcessServer(
                    type="mcp-process",
                    command=["{python}", "-m", f"tb.tools.{path.stem}"],
                    env={"PYTHONPATH": pythonpath},
                ),
            )
    return servers


def internal_servers() -> dict[str, ProcessServer]:
    """What ``use_internal_servers: true`` adds: ThinkingBox's bundled servers and rewardbox's own.

    Upstream's meaning first (:func:`upstream_internal_servers`: ``tb/tools/mcp_*.py``,
    e.g. ``cloud_drive``, when ``{python}`` can import them); then rewardbox's embedded
    domain servers, by their ``world_state`` server name: each server in
    ``rewardbox.domains.registry`` runs as ``{python} -m rewardbox.domains.server <domain>``,
    which serves it on stdio. Their ``__reserved__init`` builds a fresh database,
    so a warm process may serve ``INTERNAL_EPISODES_PER_PROCESS`` episodes. A
    scenario that names a server neither adds fails with
    :data:`UPSTREAM_INTERNAL_NOTE` in the message when ``tb.tools`` is missing.
    """
    from rewardbox.domains.registry import DOMAIN_SERVERS

    root = str(Path(__file__).resolve().parents[2])  # so `-m rewardbox...` imports from any cwd
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ours = {
        name: ProcessServer(
            type="mcp-process",
            command=["{python}", "-m", "rewardbox.domains.server", domain],
            env={"PYTHONPATH": pythonpath},
            episodes_per_process=INTERNAL_EPISODES_PER_PROCESS,
        )
        for domain, name in DOMAIN_SERVERS.items()
    }
    return {**upstream_internal_servers(), **ours}


def _field_of(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"])


def parse_servers_config(data: Any, source: str | Path = "<servers config>") -> ServersConfig:
    """Validate an already-loaded servers mapping.

    Raises:
        ServersConfigError: naming ``source`` and the first bad field.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ServersConfigError(
            source, f"expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        config = ServersConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ServersConfigError(
            source, f"{first['msg']} ({len(exc.errors())} error(s))", _field_of(first)
        ) from None
    config._source = str(source)
    if config.use_internal_servers:
        for name, server in internal_servers().items():
            config.servers.setdefault(name, server)
    return config


def load_servers_config(path: str | Path) -> ServersConfig:
    """Read and validate a servers.yaml file.

    Args:
        path: the YAML file.

    Returns:
        The validated config; ``source`` is the path, used in later error messages.

    Raises:
        ServersConfigError: the file is missing, not YAML, or a field is invalid
            (the message names the file and the field, e.g. ``servers.retail.command``).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServersConfigError(path, f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ServersConfigError(
            path, f"not valid YAML{where}: {getattr(exc, 'problem', exc)}"
        ) from None
    return parse_servers_config(data, path)


def _is_internal(
    name: str, server: ProcessServer | RemoteServer, internal: dict[str, ProcessServer]
) -> bool:
    return name in internal and server.model_dump() == internal[name].model_dump()


def merge_servers_configs(configs: Sequence[ServersConfig]) -> ServersConfig:
    """The union of several servers configs (the profile's and each task source's).

    Server names are global: the same name may appear in several files only
    with the same definition (compared as written, before substitution). An
    entry added by ``use_internal_servers`` yields to an explicit entry of the
    same name in another file.

    Args:
        configs: validated configs, in priority-free order (e.g. profile first).

    Returns:
        One config; ``source`` lists the files joined by ``" + "``;
        ``use_internal_servers`` is true when any input had it.

    Raises:
        ServersConfigError: a name is defined twice with different definitions;
            the message names the server and both files.
    """
    internal = internal_servers() if any(c.use_internal_servers for c in configs) else {}
    merged: dict[str, ProcessServer | RemoteServer] = {}
    origin: dict[str, str] = {}
    for config in configs:
        for name, server in config.servers.items():
            if name not in merged or _is_internal(name, merged[name], internal):
                merged[name], origin[name] = server, config.source
            elif server.model_dump() != merged[name].model_dump() and not _is_internal(
                name, server, internal
            ):
                raise ServersConfigError(
                    config.source,
                    f"server {name!r} is already defined differently in {origin[name]}; "
                    "server names are global, rename one or make the definitions identical",
                    f"servers.{name}",
                )
    sources = list(dict.fromkeys(c.source for c in configs))
    out = ServersConfig(
        use_internal_servers=any(c.use_internal_servers for c in configs), servers=merged
    )
    out._source = " + ".join(sources) or "<servers config>"
    return out
