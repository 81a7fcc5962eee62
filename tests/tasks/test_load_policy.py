"""A broken task file never silently shrinks a task set (issue #12, part A).

Every format names the file and the line of its fault; the candidate set follows
``tasks.candidate_loading`` (fail by default, or skip up to a share); the benchmark is strict.
All datasets here are temporary copies; the shipped files are never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.errors import TaskSetLoadError
from rewardbox.tasks.pyfile import parse_python_test_file
from rewardbox.tasks.sources import load_benchmark, load_candidates, resolve_dataset
from rewardbox.tasks.thinkingbox import load_dataset

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def break_line(path: Path, lineno: int, suffix: str) -> str:
    """Append ``suffix`` to 1-based line ``lineno``; returns the broken line."""
    lines = path.read_text().split("\n")
    lines[lineno - 1] += suffix
    path.write_text("\n".join(lines))
    return lines[lineno - 1]


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().split("\n"), 1) if needle in line)


@pytest.fixture()
def hotel(tmp_path) -> Path:
    return copy_dataset(resolve_dataset("embedded:hotel"), tmp_path / "hotel")


def profile_tasks(hotel: Path, **loading):
    """The ``test`` profile's task config with its hotel sources pointed at ``hotel``."""
    tasks = load_profile("test").tasks.model_copy(deep=True)
    for source in [*tasks.candidates, *tasks.benchmark]:
        if source.dataset == "embedded:hotel":
            source.dataset, source.name = str(hotel), "hotel"
    for key, value in loading.items():
        setattr(tasks.candidate_loading, key, value)
    return tasks


# --- every format names its file and line ------------------------------------------------------


def test_python_syntax_error_names_file_line_and_text(hotel):
    path = hotel / "test_case" / "hotel_cancel.py"
    lineno = line_of(path, "validate_database(x, SRV)")
    break_line(path, lineno, " (((")
    tests, errors = parse_python_test_file(path)
    assert tests == [] and len(errors) == 1
    assert errors[0].path == str(path) and errors[0].line == lineno
    assert "not valid Python" in str(errors[0]) and "(((" in str(errors[0])


def test_python_broken_defaults_block_is_one_error_at_its_line_not_a_cascade(hotel):
    path = hotel / "test_case" / "hotel_cancel.py"
    lineno = line_of(path, "tags: [hotel]")
    break_line(path, lineno, " (((")
    tests, errors = parse_python_test_file(path)
    assert tests == [] and len(errors) == 1  # not one "field required" per test below it
    assert errors[0].line == lineno and "invalid YAML" in str(errors[0])
    assert "<unicode string>" not in str(errors[0])  # no line numbers relative to the YAML block


def test_python_bad_test_yaml_names_its_line(tmp_path):
    root = copy_dataset(FIXTURE, tmp_path / "ds")
    path = root / "test_case" / "extra.py"
    path.write_text(
        '"""!\nscenario: fake_shop\n"""\n\n\ndef t_one(x):\n    """!\n    query: [unclosed\n    """\n'
    )
    result = load_dataset(root)
    (error,) = [e for e in result.errors if e.path == str(path)]
    assert error.line == 9 and "invalid YAML" in str(error)  # where the parser stopped
    assert "opened on line 8" in str(error)  # where the unclosed list began


def test_yaml_test_file_error_names_its_line(tmp_path):
    root = copy_dataset(FIXTURE, tmp_path / "ds")
    path = root / "test_case" / "fake_shop_declarative.yaml"
    lineno = line_of(path, "query: Cancel ORD-4 please.")
    break_line(path, lineno, ": : [")
    result = load_dataset(root)
    (error,) = [e for e in result.errors if e.path == str(path)]
    assert error.line == lineno and "invalid YAML" in str(error)


def test_pydantic_error_in_a_test_config_names_file_and_field_path(tmp_path):
    root = copy_dataset(FIXTURE, tmp_path / "ds")
    path = root / "test_case" / "extra.py"
    path.write_text(
        '"""!\nscenario: fake_shop\n"""\n\n\ndef t_one(x):\n    """!\n    query: q\n'
        '    max_user_sim_turns: many\n    """\n'
    )
    (error,) = [e for e in load_dataset(root).errors if e.path == str(path)]
    assert error.field == "max_user_sim_turns" and error.line == 6
    assert str(error).startswith(f"{path}:6 (field 'max_user_sim_turns')")


@pytest.mark.parametrize(
    "config", ["agent/think.yaml", "scenario/fake_shop.yaml", "test_case/conftest.yaml"]
)
def test_dataset_config_yaml_error_names_file_and_line(tmp_path, config):
    root = copy_dataset(FIXTURE, tmp_path / "ds")
    path = root / config
    break_line(path, 2, " : : [")
    errors = [e for e in load_dataset(root).errors if e.path == str(path)]
    assert len(errors) == 1 and errors[0].line == 2 and "invalid YAML" in str(errors[0])


def test_test_list_yaml_error_fails_the_source_naming_its_line(hotel):
    path = hotel / "testlists" / "candidates.yaml"
    break_line(path, 3, ": b: c")
    with pytest.raises(TaskSetLoadError) as info:
        load_candidates(profile_tasks(hotel, on_error="skip", max_skipped_frac=1.0))
    assert f"{path}:3: invalid YAML" in str(info.value)  # an unreadable source fails even with skip


# --- the policy: the issue's case and one of our own ---------------------------------------------


def test_issue_case_hotel_syntax_error_fails_candidates_and_benchmark(hotel):
    """The issue's input: one syntax error in one generated hotel file."""
    path = hotel / "test_case" / "hotel_cancel.py"
    lineno = line_of(path, "validate_database(x, SRV)")
    break_line(path, lineno, " (((")
    tasks = profile_tasks(hotel)
    with pytest.raises(TaskSetLoadError) as cand:
        load_candidates(tasks)
    with pytest.raises(TaskSetLoadError) as bench:
        load_benchmark(tasks)
    for info in (cand, bench):
        assert f"{path}:{lineno}: not valid Python" in str(info.value)
        assert "(field 'uid')" not in str(info.value)
    assert cand.value.split == "candidate" and bench.value.split == "benchmark"


def test_skip_policy_keeps_the_rest_within_the_share_and_fails_above_it(tmp_path):
    """Our own case: a broken declarative YAML entry among 10 fixture tests."""
    root = copy_dataset(FIXTURE, tmp_path / "ds")
    path = root / "test_case" / "fake_shop_declarative.yaml"
    path.write_text(path.read_text().replace("- name: cancel_and_confirm", "- name: 1bad_name"))
    tasks = load_profile("test").tasks.model_copy(deep=True)
    tasks.candidates = [
        tasks.candidates[0].model_copy(
            update={"dataset": str(root), "test_list": None, "limit": None}
        )
    ]
    tasks.candidate_loading.on_error = "skip"
    tasks.candidate_loading.max_skipped_frac = 0.5
    loaded = load_candidates(tasks)
    assert loaded.failed == 2  # the bad name + the fixture's own broken_keys.py test
    assert len(loaded.tasks) == loaded.attempted - 2 and loaded.attempted >= 8
    assert any(f"{path}:" in e and "1bad_name" in e for e in loaded.errors)
    tasks.candidate_loading.max_skipped_frac = 0.1
    with pytest.raises(TaskSetLoadError, match="max_skipped_frac"):
        load_candidates(tasks)
    tasks.candidate_loading.on_error = "fail"
    with pytest.raises(TaskSetLoadError, match="on_error=fail"):
        load_candidates(tasks)


def test_clean_sources_load_unchanged():
    tasks = load_profile("test").tasks
    assert len(load_candidates(tasks).tasks) == 10 and len(load_benchmark(tasks).tasks) == 6


def test_benchmark_ignores_candidate_skip_policy(hotel):
    path = hotel / "test_case" / "hotel_cancel.py"
    break_line(path, line_of(path, "validate_database(x, SRV)"), " (((")
    with pytest.raises(TaskSetLoadError):
        load_benchmark(profile_tasks(hotel, on_error="skip", max_skipped_frac=1.0))
