"""Load a ThinkingBox-layout dataset into tasks (docs/thinkingbox.md, "Dataset layout").

Layout: ``agent/<name>.yaml``, ``scenario/<name>.yaml``, ``test_case/**/*.py``
and ``test_case/**/*.yaml`` (see :mod:`rewardbox.tasks.pyfile` and
:mod:`rewardbox.tasks.yamlfile`), and optional ``conftest.yaml`` files with
fixtures (the dataset root, then ``test_case/`` down to the test's folder;
later files override, the scenario's ``fixtures`` override them all).

**Which agent.** The ``agent`` argument if given; else the scenario's
``metadata.agent``; else the dataset's only agent file. Several agent files
and no choice is a TaskFormatError (field ``agent``) for that scenario's tests.

**Skipped tests.** A test or scenario whose ``tags`` is a mapping with
``skip: true`` is left out of a whole-dataset load (listed in
``LoadResult.skipped``); a test list that names it still loads it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rewardbox.errors import TaskFormatError
from rewardbox.tasks.exclusion import load_test_list, parse_uid
from rewardbox.tasks.pyfile import RawTestCase, parse_python_test_file
from rewardbox.tasks.schema import Task, ToolOverride
from rewardbox.tasks.tb_config import (
    DEFAULT_MAX_USER_SIM_TURNS,
    AgentConfig,
    Conftest,
    ScenarioConfig,
    TestConfig,
    builtin_tool_dict,
    flatten_tags,
    format_validation_error,
    load_config_file,
    merge_bot_instructions,
    merge_init,
)
from rewardbox.tasks.yamlfile import parse_yaml_test_file


@dataclass
class LoadResult:
    """Tasks that loaded, and one TaskFormatError per broken file or test.

    ``skipped`` holds uids left out on purpose (a ``skip`` tag); ``missing`` the
    uids a test list named that did not load (their causes are in ``errors``).
    """

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskFormatError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def raise_for_errors(self) -> None:
        """Raise one TaskFormatError listing every error, if there are any."""
        if self.errors:
            lines = "\n".join(f"  {e}" for e in self.errors)
            raise TaskFormatError(
                self.errors[0].path, f"{len(self.errors)} task format error(s):\n{lines}"
            )


class ThinkingBoxDataset:
    """One dataset directory; agents and scenarios are read once and cached."""

    def __init__(self, root: str | Path, name: str | None = None, agent: str | None = None):
        self.root = Path(root).expanduser().resolve()
        if not (self.root / "test_case").is_dir():
            raise TaskFormatError(str(self.root), "not a ThinkingBox dataset: no test_case/ folder")
        self.name = name or self.root.name
        self.agent = agent
        self._configs: dict[Path, BaseModel] = {}

    def _config(self, path: Path, model: type[BaseModel]) -> Any:
        if path not in self._configs:
            if not path.is_file():
                raise TaskFormatError(str(path), "file not found", field=path.parent.name)
            self._configs[path] = load_config_file(path, model)
        return self._configs[path]

    def scenario(self, name: str) -> ScenarioConfig:
        return self._config(self.root / "scenario" / f"{name}.yaml", ScenarioConfig)

    def agent_for(self, scenario: ScenarioConfig) -> tuple[str, AgentConfig]:
        """Pick the agent by the rule in the module docstring."""
        name = self.agent or scenario.metadata.get("agent")
        if name is None:
            files = sorted(p.stem for p in (self.root / "agent").glob("*.yaml"))
            if len(files) != 1:
                raise TaskFormatError(
                    str(self.root / "agent"),
                    f"{len(files)} agent files {files}; pass agent= or set metadata.agent in the scenario",
                    field="agent",
                )
            name = files[0]
        return name, self._config(self.root / "agent" / f"{name}.yaml", AgentConfig)

    def get_testfile_path(self, filename: str) -> Path:
        """Find a test file by name (docs/thinkingbox.md, "Test files"): ``test_case/<f>``, then
        ``test_case/<prefix>/<f>`` for underscore prefixes, longest first, one level.

        Raises:
            FileNotFoundError: no candidate exists.
        """
        base = self.root / "test_case"
        if (base / filename).is_file():
            return base / filename
        parts = filename.split("_")
        for k in range(len(parts) - 1, 0, -1):
            candidate = base / "_".join(parts[:k]) / filename
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{filename} not found under {base}")

    def test_files(self) -> list[Path]:
        """Every test file under ``test_case/``, sorted (conftest and .meta.yaml excluded)."""
        out = []
        for path in sorted((self.root / "test_case").rglob("*")):
            name = path.name
            if not path.is_file() or name == "conftest.yaml" or name.endswith(".meta.yaml"):
                continue
            if path.suffix in (".py", ".yaml", ".yml"):
                out.append(path)
        return out

    def parse_file(self, path: Path) -> tuple[list[RawTestCase], list[TaskFormatError]]:
        if path.suffix == ".py":
            return parse_python_test_file(path)
        return parse_yaml_test_file(path)

    def fixtures_for(self, path: Path) -> dict[str, dict[str, Any]]:
        """Fixtures from conftest.yaml files: dataset root, then test_case/ down to ``path``'s folder."""
        dirs = [self.root, self.root / "test_case"]
        for part in path.parent.relative_to(self.root / "test_case").parts:
            dirs.append(dirs[-1] / part)
        merged: dict[str, dict[str, Any]] = {}
        for conftest in (d / "conftest.yaml" for d in dirs):
            if conftest.is_file():
                merged.update(self._config(conftest, Conftest).fixtures)
        return merged

    def hydrate(self, raw: RawTestCase) -> tuple[Task, bool]:
        """Build the Task for one raw test case. Returns ``(task, skip)``.

        Raises:
            TaskFormatError: bad config, missing scenario or agent file.
        """
        try:
            cfg = TestConfig.model_validate(raw.config)
        except ValidationError as exc:
            raise format_validation_error(raw.path, exc, lambda loc: raw.lineno) from exc
        scenario = self.scenario(cfg.scenario)
        agent_name, agent = self.agent_for(scenario)
        scenario_tags, scenario_skip = flatten_tags(scenario.tags)
        test_tags, test_skip = flatten_tags(cfg.tags)
        rel = raw.path.relative_to(self.root).as_posix()
        metadata = {
            **raw.extra.get("metadata", {}),
            "test_case_file": rel,
            "test_case_name": raw.name,
            "agent": agent_name,
            "scenario": cfg.scenario,
        }
        if cfg.history is not None:
            metadata["history"] = cfg.history
        task = Task(
            uid=f"{raw.path.name}:{raw.name}",
            dataset=self.name,
            scenario=cfg.scenario,
            agent=agent_name,
            query=cfg.query,
            user_context=cfg.user_context or "",
            init=copy.deepcopy(cfg.init),
            world_state=merge_init(scenario.world_state, cfg.init),
            tools=tuple(ToolOverride(**t.model_dump()) for t in scenario.tools),
            system_instructions=agent.system_instructions,
            bot_instructions=merge_bot_instructions(
                scenario.bot_instructions, cfg.bot_instructions
            ),
            test_code=raw.test_code,
            test_name=raw.name,
            test_file=rel,
            builtin_tools=tuple(builtin_tool_dict(t) for t in agent.builtin_tools),
            tags=tuple(scenario_tags + test_tags),
            max_user_turns=cfg.max_user_sim_turns
            if cfg.max_user_sim_turns is not None
            else DEFAULT_MAX_USER_SIM_TURNS,
            max_agent_turns=cfg.max_agent_sim_turns,
            metadata=metadata,
            fixtures={**self.fixtures_for(raw.path), **scenario.fixtures},
        )
        return task, scenario_skip or test_skip


def load_dataset(
    path: str | Path,
    *,
    test_list: str | Path | list[str] | None = None,
    dataset_name: str | None = None,
    agent: str | None = None,
    strict: bool = True,
) -> LoadResult:
    """Load a ThinkingBox dataset directory into tasks.

    Args:
        path: the dataset root (holds ``agent/``, ``scenario/``, ``test_case/``).
        test_list: a test-list file or a list of ``"file.py:test_name"`` uids;
            only those tasks load, in list order, files found by name (docs/thinkingbox.md, "Test files", "Test lists").
            None loads every test file (sorted by path; skipped tests left out).
        dataset_name: ``Task.dataset``; defaults to the directory name.
        agent: the agent file stem; see the module docstring for the default.
        strict: with a test list, raise when a listed uid cannot be loaded;
            otherwise that becomes one more entry of ``errors``.

    Returns:
        LoadResult: tasks, plus one TaskFormatError per broken file or test
        (file, line, field); the other tasks still load.

    Raises:
        TaskFormatError: ``path`` is not a dataset; a malformed test-list file;
            with ``strict``, listed uids that did not load (all named at once).
    """
    dataset = ThinkingBoxDataset(path, name=dataset_name, agent=agent)
    if test_list is None:
        return _load_all(dataset)
    if isinstance(test_list, (str, Path)):
        return _load_listed(dataset, load_test_list(test_list), str(test_list), strict)
    return _load_listed(dataset, list(test_list), "<test list>", strict)


def _add_error(result: LoadResult, exc: TaskFormatError) -> None:
    if all(str(e) != str(exc) for e in result.errors):
        result.errors.append(exc)


def _hydrate_into(
    dataset: ThinkingBoxDataset, raw: RawTestCase, result: LoadResult
) -> tuple[Task, bool] | None:
    try:
        return dataset.hydrate(raw)
    except TaskFormatError as exc:
        _add_error(result, exc)
        return None


def _load_all(dataset: ThinkingBoxDataset) -> LoadResult:
    result = LoadResult()
    seen: dict[str, str] = {}
    for path in dataset.test_files():
        raws, errors = dataset.parse_file(path)
        for exc in errors:
            _add_error(result, exc)
        for raw in raws:
            hydrated = _hydrate_into(dataset, raw, result)
            if hydrated is None:
                continue
            task, skip = hydrated
            if task.uid in seen:
                _add_error(
                    result,
                    TaskFormatError(
                        str(raw.path),
                        f"duplicate uid {task.uid!r} (also in {seen[task.uid]})",
                        line=raw.lineno,
                        field="uid",
                    ),
                )
                continue
            seen[task.uid] = task.test_file
            (result.skipped.append(task.uid) if skip else result.tasks.append(task))
    return result


def _load_listed(
    dataset: ThinkingBoxDataset, uids: list[str], list_name: str, strict: bool
) -> LoadResult:
    result = LoadResult()
    files: dict[str, dict[str, RawTestCase]] = {}
    missing: list[str] = []
    loaded: set[str] = set()
    for uid in uids:
        try:
            file_name, test_name = parse_uid(uid)
        except ValueError as exc:
            _add_error(result, TaskFormatError(list_name, str(exc), field="uid"))
            continue
        if file_name not in files:
            files[file_name] = _parse_by_name(dataset, file_name, result)
        raw = files[file_name].get(test_name)
        hydrated = (
            _hydrate_into(dataset, raw, result) if raw is not None and uid not in loaded else None
        )
        if hydrated is None:
            missing.append(uid)
            continue
        loaded.add(uid)
        result.tasks.append(hydrated[0])
    result.missing = missing
    if missing:
        # The causes (file and line of each broken file or test) come first; this
        # summary names the list and the uids it could not deliver.
        summary = f"{len(missing)} listed test(s) not loaded: {missing}"
        if strict:
            causes = "".join(f"\n  caused by: {e}" for e in result.errors)
            raise TaskFormatError(list_name, summary + causes)
        result.errors.append(TaskFormatError(list_name, summary))
    return result


def _parse_by_name(
    dataset: ThinkingBoxDataset, file_name: str, result: LoadResult
) -> dict[str, RawTestCase]:
    try:
        path = dataset.get_testfile_path(file_name)
    except FileNotFoundError:
        return {}
    raws, errors = dataset.parse_file(path)
    for exc in errors:
        _add_error(result, exc)
    return {raw.name: raw for raw in raws}
