"""Our datasets carry every key the upstream harness requires (so ``tb infer -d <dataset>`` loads them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardbox.domains.registry import dataset_dir
from rewardbox.tasks.tb_config import upstream_schema_problems
from rewardbox.tasks.thinkingbox import load_dataset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    "root",
    [
        dataset_dir("retail"),
        dataset_dir("hotel"),
        dataset_dir("helpdesk"),
        FIXTURES / "tb_mixed",
        FIXTURES / "tb_dataset",
    ],
    ids=lambda p: p.parent.name + "/" + p.name,
)
def test_dataset_files_have_the_upstream_required_keys(root):
    assert upstream_schema_problems(root) == []
    loaded = load_dataset(root)
    assert loaded.tasks and all(t.query and t.scenario for t in loaded.tasks)


def test_missing_builtin_tools_is_named(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "scenario").mkdir()
    (tmp_path / "agent" / "a.yaml").write_text("system_instructions: hi\n")
    (tmp_path / "scenario" / "s.yaml").write_text(
        "world_state: {}\ntools:\n- {override_description: x}\n"
    )
    assert upstream_schema_problems(tmp_path) == [
        f"{tmp_path / 'agent' / 'a.yaml'} (agent): required key 'builtin_tools' is missing",
        f"{tmp_path / 'scenario' / 's.yaml'} (tools[0]): required key 'name' is missing",
    ]
