"""The strict JSON policy (docs/json_policy.md): one writer, non-finite floats as null, no stray json.dump."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from rewardbox import strict_json

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("rewardbox", "assets", "resources", "sensors", "pipelines", "benchmarks")
STRAY_WRITER = re.compile(r"(?<![\w.])json\.dumps?\(|(?<!strict_json)\.write_(?:nd)?json\(")


def _reject(name):
    raise AssertionError(f"non-strict literal {name}")


def test_non_finite_floats_become_null_everything_else_is_kept():
    value = {
        "a": math.nan,
        "b": [1.5, -math.inf, {"c": math.inf}],
        "d": (np.float32("nan"), np.int64(3)),
        "e": "NaN",
        "f": True,
        "g": None,
        "h": 0,
    }
    text = strict_json.dumps(value, sort_keys=True)
    assert json.loads(text, parse_constant=_reject) == {
        "a": None,
        "b": [1.5, None, {"c": None}],
        "d": [None, 3],
        "e": "NaN",
        "f": True,
        "g": None,
        "h": 0,
    }
    assert strict_json.non_finite_paths(value) == ["$.a", "$.b[1]", "$.b[2].c", "$.d[0]"]


def test_default_hook_results_are_made_strict_too():
    class Reading:
        value = math.nan

    assert (
        strict_json.dumps({"r": Reading()}, default=lambda o: {"value": o.value})
        == '{"r": {"value": null}}'
    )
    with pytest.raises(TypeError):
        strict_json.dumps({"r": Reading()})


def test_reading_is_strict():
    for literal in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ValueError, match="not valid JSON"):
            strict_json.loads(f'{{"x": {literal}}}')
    assert strict_json.loads('{"x": "NaN"}') == {"x": "NaN"}


def test_write_json_and_jsonl(tmp_path):
    path = strict_json.write_json(tmp_path / "m.json", [{"mean_reward": math.nan, "n": 0}])
    assert json.loads(path.read_text(), parse_constant=_reject) == [{"mean_reward": None, "n": 0}]
    assert not (tmp_path / "m.json.tmp").exists()
    rows = [{"uid": "t:1", "reward": math.nan, "text": "é"}, {"uid": "t:2", "reward": 1.0}]
    assert strict_json.write_jsonl(tmp_path / "r.jsonl", rows) == 2
    lines = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line, parse_constant=_reject)["reward"] for line in lines] == [None, 1.0]
    assert "é" in lines[0]


def test_every_json_writer_of_the_project_goes_through_strict_json():
    stray = []
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "rewardbox" / "strict_json.py":
                continue
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if STRAY_WRITER.search(line):
                    stray.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not stray, "use rewardbox.strict_json (docs/json_policy.md) instead of:\n" + "\n".join(
        stray
    )
