"""Screening a ThinkingBox-layout dataset of our own on an external stdio server.

``tests/fixtures/tb_mixed`` mixes write, read-only and rubric tasks (see its README);
its server is spawned per episode from ``servers.yaml``. The judge is a loopback fake
that says Yes iff the message holds every quoted value of the question.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rewardbox.config.profile import Profile
from rewardbox.episode.run import run_trials
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.screening import screen_tasks, ungradable
from rewardbox.tasks.sources import load_benchmark
from tests.fixtures.fake_judge import Judge200

MIXED = Path(__file__).resolve().parents[1] / "fixtures" / "tb_mixed"


def _rule(prompt: str) -> str:
    """Yes iff every quoted value of the question appears inside <message>…</message> (or <response>)."""
    body = re.search(r"<(message|response)>\n(.*)\n</\1>", prompt, re.S)
    values = re.findall(r"'([^']+)'", prompt[body.end() :] if body else prompt)
    return "Yes" if body and values and all(v in body.group(2) for v in values) else "No"


@pytest.fixture(scope="module")
def judge():
    fake = Judge200(_rule)
    yield fake
    fake.close()


def _profile(tmp_path: Path, judge: Judge200, test_list: str) -> Profile:
    source = {"dataset": str(MIXED), "servers": "servers.yaml", "test_list": test_list}
    return Profile.model_validate(
        {
            "name": "mixed",
            "data_dir": str(tmp_path),
            "tasks": {"candidates": [], "benchmark": [source], "domains": {"shop": "shop_ops"}},
            "sandbox": {"kind": "external", "tool_timeout_s": 30},
            "policy": {"kind": "scripted_mix", "golden_frac": 1.0},
            "episode": {"max_user_turns": 1, "concurrency": 4},
            "grading": {
                "workers": 1,
                "judge_base_url": judge.config["base_url"],
                "judge_model": "j",
            },
        }
    )


def test_mixed_dataset_screen_counts(tmp_path, judge):
    profile = _profile(tmp_path, judge, "testlists/benchmark.yaml")
    tasks = load_benchmark(profile.tasks).tasks
    valid, report = screen_tasks(tasks, campaign_parts(profile))
    print(
        "\n"
        + str(report.select("uid", "valid", "read_only", "golden_passed", "null_passed", "reason"))
    )
    print(
        f"golden-pass {int(report['golden_passed'].sum())}/{report.height}, "
        f"null-pass {int(report['null_passed'].sum())}/{report.height}, valid {len(valid)}, "
        f"read-only {int(report['read_only'].sum())}"
    )
    rows = {r["uid"].split(":")[1]: r for r in report.iter_rows(named=True)}
    assert len(valid) == 4 and report["golden_passed"].all() and ungradable(report) == []
    assert {u for u, r in rows.items() if r["read_only"]} == {
        "test_total_read_only",
        "test_total_rubric",
    }
    assert {u for u, r in rows.items() if r["null_passed"]} == {"test_total_read_only"}
    marked = {t.uid.split(":")[1]: t.metadata.get("read_only", False) for t in valid}
    assert marked == {
        "test_cancel_write": False,
        "test_total_read_only": True,
        "test_total_rubric": True,
        "test_cancel_rubric_judge": False,
    }
    assert {t.domain for t in valid} == {"shop_ops"}  # by scenario, through the profile's mapping


def test_ungradable_benchmark_task_is_listed_by_uid_and_cause(tmp_path, judge):
    shutil.copytree(MIXED, tmp_path / "ds")
    (tmp_path / "ds" / "testlists" / "two.yaml").write_text(
        "- mixed_orders.py:test_total_read_only\n- mixed_broken.py:test_needs_proxy_client\n"
    )
    profile = _profile(tmp_path, judge, "testlists/two.yaml")
    profile.tasks.benchmark[0].dataset = str(tmp_path / "ds")
    valid, report = screen_tasks(load_benchmark(profile.tasks).tasks, campaign_parts(profile))
    assert [t.uid for t in valid] == ["mixed_orders.py:test_total_read_only"]
    failures = ungradable(report)
    assert len(failures) == 1 and failures[0].startswith(
        "mixed_broken.py:test_needs_proxy_client: grader: "
    )
    assert "No module named 'thinkingbox.common.mcp_proxy_client'" in failures[0]
    broken = [t for t in load_benchmark(profile.tasks).tasks if t.uid.startswith("mixed_broken.py")]
    _, results = run_trials(broken, 1, GoldenReplayPolicy(), campaign_parts(profile))
    assert results[0].system_error_permanent and results[0].tries == 1  # permanent: not retried
