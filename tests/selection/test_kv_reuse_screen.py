"""Issue #25: screening a dataset whose stdio server keeps state across inits (``tests/fixtures/tb_kv``).

``kv_server.py`` with ``KV_KEEP_STATE=1`` keeps its store on ``__reserved__init`` and only upserts the
patch. Reusing its process (``episodes_per_process: 10``) used to start each episode on the previous
one's writes, and screening marked two of the three tasks invalid ("golden replay fails its own test").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rewardbox.config.profile import Profile
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.difficulty import teachable
from rewardbox.selection.screening import screen_tasks, write_evidence_counts
from rewardbox.tasks.sources import load_benchmark
from tests.fixtures.fake_judge import Judge200

KV = Path(__file__).resolve().parents[1] / "fixtures" / "tb_kv"
SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "kv_server.py"


def kv_servers_yaml(tmp_path: Path, **server: object) -> Path:
    """A servers.yaml for the kv fixture server; ``server`` adds fields (``env``, ``episodes_per_process``...)."""
    entry = {"type": "mcp-process", "command": f"{{python}} {SERVER}", **server}
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump({"servers": {"kv": entry}}), encoding="utf-8")
    return path


def kv_profile(
    tmp_path: Path, servers: Path, test_list: str = "testlists/repro.yaml", **grading: object
) -> Profile:
    source = {"dataset": str(KV), "servers": str(servers), "test_list": test_list}
    return Profile.model_validate(
        {
            "name": "kv",
            "data_dir": str(tmp_path),
            "tasks": {"candidates": [], "benchmark": [source], "domains": {"kv": "kv"}},
            "sandbox": {"kind": "external", "tool_timeout_s": 30},
            "policy": {"kind": "scripted_mix", "golden_frac": 1.0},
            "episode": {"max_user_turns": 1, "concurrency": 1},
            "grading": {"workers": 1, **grading},
        }
    )


def _screen(profile: Profile) -> dict[str, dict]:
    tasks = load_benchmark(profile.tasks).tasks
    _, report = screen_tasks(tasks, campaign_parts(profile))
    return {r["uid"].split(":")[1]: r for r in report.iter_rows(named=True)}


@pytest.mark.parametrize("episodes_per_process", [1, 10])
def test_kv_server_that_keeps_state_screens_all_three_tasks_valid(tmp_path, episodes_per_process):
    servers = kv_servers_yaml(
        tmp_path, env={"KV_KEEP_STATE": "1"}, episodes_per_process=episodes_per_process
    )
    rows = _screen(kv_profile(tmp_path, servers))
    assert {uid: (r["valid"], r["reason"]) for uid, r in rows.items()} == {
        "test_close_order_1": (True, ""),
        "test_close_order_2": (True, ""),
        "test_read_order_2": (True, ""),
    }
    assert (
        rows["test_read_order_2"]["read_only"] is True
        and rows["test_close_order_2"]["expects_write"] is True
    )


def _closed_rule(prompt: str) -> str:
    """Yes iff the graded message (inside <message>/<response>) says a status is closed."""
    body = re.search(r"<(message|response)>\n(.*)\n</\1>", prompt, re.S)
    return "Yes" if body and '"status": "closed"' in body.group(2) else "No"


def test_server_without_hashes_leaves_write_and_read_only_unknown(tmp_path):
    """KV_NO_HASH=1: effects are raw state, so nothing says whether the golden actions write."""
    judge = Judge200(_closed_rule)
    try:
        servers = kv_servers_yaml(tmp_path, env={"KV_NO_HASH": "1"})
        profile = kv_profile(
            tmp_path,
            servers,
            "testlists/judged.yaml",
            judge_base_url=judge.config["base_url"],
            judge_model="j",
        )
        tasks = load_benchmark(profile.tasks).tasks
        valid, report = screen_tasks(tasks, campaign_parts(profile))
    finally:
        judge.close()
    row = report.row(0, named=True)
    assert (row["valid"], row["golden_passed"], row["null_passed"]) == (True, True, False), row[
        "reason"
    ]
    assert (
        row["expects_write"] is None and row["read_only"] is None
    )  # was: expects_write False, read_only True
    assert write_evidence_counts(report) == {"expects_write": 0, "read_only": 0, "write_unknown": 1}
    assert valid[0].metadata["read_only"] is None
    assert teachable(valid) == (valid, [])  # the null-pass read-only rule needs evidence
