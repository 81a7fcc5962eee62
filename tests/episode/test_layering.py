"""The episode layer stands below evaluation: episodes, selection and training never import it,
and the old import paths that users may hold keep answering with the new objects."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "rewardbox"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["episode", "selection", "training"])
def test_package_does_not_import_evaluation(package):
    offenders = {
        str(path.relative_to(ROOT.parent)): sorted(
            m for m in _imported_modules(path) if m.startswith("rewardbox.evaluation")
        )
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {file: mods for file, mods in offenders.items() if mods} == {}


@pytest.mark.parametrize(
    "old",
    [
        "rewardbox.evaluation.services",
        "rewardbox.evaluation.campaign",
        "rewardbox.evaluation.journal",
        "rewardbox.evaluation.screening",
        "rewardbox.evaluation.tb_messages",
        "rewardbox.episode.attempt",
    ],
)
def test_old_re_export_modules_are_gone(old):
    """Each object has one import path: the re-export modules of earlier layouts are deleted."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


STAGE_PACKAGES = ("rewardbox.selection", "rewardbox.evaluation", "rewardbox.training")


def test_screening_and_probing_never_call_up_from_the_episode_layer():
    """A traced walk of one task (screen: golden + null replay, then one probe trial, then its band):
    no frame of ``rewardbox.episode`` calls into a stage package (the old wiring called
    ``evaluation.services.episode_runner`` from ``episode.executor``), and evaluation is never entered."""
    import sys
    import threading

    from rewardbox.config.profile import load_profile
    from rewardbox.domains import registry
    from rewardbox.episode.executor import LocalExecutor
    from rewardbox.episode.run import run_trials
    from rewardbox.policy.scripted import GoldenReplayPolicy
    from rewardbox.runtime.compose import campaign_parts
    from rewardbox.selection import task_difficulty
    from rewardbox.selection.screening import screen_tasks
    from rewardbox.tasks.thinkingbox import load_dataset

    tasks = sorted(load_dataset(registry.dataset_dir("retail")).tasks, key=lambda t: t.uid)[:1]
    profile = load_profile("test")
    upward, entered = set(), set()

    def module_of(frame) -> str:
        return frame.f_globals.get("__name__", "")

    def watch(frame, event, _arg):
        if event != "call" or not module_of(frame).startswith("rewardbox."):
            return
        callee = module_of(frame)
        entered.add(callee)
        caller = frame.f_back
        while caller is not None and not module_of(caller).startswith("rewardbox."):
            caller = caller.f_back
        if (
            caller is not None
            and module_of(caller).startswith("rewardbox.episode")
            and callee.startswith(STAGE_PACKAGES)
        ):
            upward.add((module_of(caller), callee))

    sys.setprofile(watch)
    threading.setprofile(watch)
    try:
        valid, _ = screen_tasks(tasks, campaign_parts(profile), LocalExecutor(1))
        rows, _ = run_trials(
            valid, 1, GoldenReplayPolicy(), campaign_parts(profile), executor=LocalExecutor(1)
        )
        difficulty = task_difficulty(rows)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert difficulty["n"].to_list() == [1]  # the walk really ran
    assert upward == set()
    assert sorted(m for m in entered if m.startswith("rewardbox.evaluation")) == []
