"""An API key named by a profile never reaches any output of a run (issue #12).

A small evaluation materialises with every endpoint (policy, user simulator, judge) reading its key
from one environment variable that holds a fake key. The fake server proves the key was sent; then
every file the run wrote is scanned: the data directory (Parquet decoded, JSON/JSONL, campaign
journals, checkpoints), the Dagster instance directory (run and event-log storage as SQLite dumps,
compute logs), the materialisation metadata and run tags, and everything logged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
import polars as pl
import yaml

from rewardbox.config.profile import PROFILE_DIR
from tests.fixtures.fake_openai import chat_response

KEY_ENV = "REWARDBOX_TEST_SECRET_KEY"
KEY = "sk-rewardbox-FAKE-9f3c2a71d4e84b0c"
UNSET_ENV = "REWARDBOX_TEST_UNSET_KEY"


def _profile(tmp_path: Path, base_url: str) -> Path:
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    profile["tasks"]["benchmark"] = [
        {"dataset": "embedded:retail", "test_list": "testlists/benchmark.yaml", "limit": 1},
        {"dataset": "embedded:helpdesk", "test_list": "testlists/benchmark.yaml", "limit": 1},
    ]
    # the policy's key comes through the resource's dg.EnvVar; its api_key_env names an unset variable
    profile["policy"] = {
        "kind": "endpoint",
        "base_url": base_url,
        "model": "agent",
        "api_key_env": UNSET_ENV,
        "max_retries": 0,
    }
    profile["user"] = {
        "kind": "endpoint",
        "base_url": base_url,
        "model": "user",
        "api_key_env": KEY_ENV,
    }
    profile["grading"] = {"workers": 1, "judge_base_url": base_url, "judge_api_key_env": KEY_ENV}
    profile["episode"].update(max_user_turns=1, concurrency=1)
    path = tmp_path / "secret_scan.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def _texts(root: Path):
    """(path, text) for every file under ``root``: Parquet decoded, SQLite dumped, the rest as bytes."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        yield path, raw.decode("utf-8", "replace")
        if path.suffix == ".parquet":
            yield path, pl.read_parquet(path).write_ndjson()
        elif raw.startswith(b"SQLite format 3"):
            with sqlite3.connect(path) as db:
                yield path, "\n".join(db.iterdump())


@dg.asset(name="base_checkpoint", group_name="model")
def no_checkpoint() -> str:
    """The endpoint policy needs no checkpoint."""
    return ""


def test_profile_api_key_appears_in_no_output(tmp_path, fake_openai, monkeypatch, capfd, caplog):
    from assets.evaluation import base_evaluation_coverage, base_evaluation_results
    from assets.tasks import benchmark_tasks
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv(UNSET_ENV, raising=False)
    fake_openai.default = (200, chat_response("Could you confirm the order id?"), {})
    fake_openai.models = ["agent", "user", "judge"]  # what the endpoint preflight finds served
    data, home = tmp_path / "data", tmp_path / "dagster_home"
    home.mkdir()
    resources = {
        "rewardbox": RewardboxResource(
            profile=str(_profile(tmp_path, fake_openai.base_url)),
            data_dir=str(data),
            policy_api_key=dg.EnvVar(KEY_ENV),
        ),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(data / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(data / "objects")),
    }
    (data / "secret_scan" / "checkpoints").mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(home), set_dagster_home=False) as instance:
        result = dg.materialize(
            [benchmark_tasks, no_checkpoint, base_evaluation_results, base_evaluation_coverage],
            resources=resources,
            instance=instance,
            tags={"rewardbox/profile": "secret_scan"},
        )
        assert result.success
        records = instance.get_records_for_run(result.run_id).records
        run = instance.get_run_by_id(result.run_id)
        dagster_text = "\n".join(
            [repr(r.event_log_entry) for r in records] + [repr(run.tags), repr(run.run_config)]
        )

    assert fake_openai.requests and all(
        r["authorization"] == f"Bearer {KEY}" for r in fake_openai.requests
    )
    assert any(
        r["body"].get("model") == "agent" for r in fake_openai.requests
    )  # the policy's key came via EnvVar
    rows = pl.read_parquet(data / "assets" / "base_evaluation_results.parquet")
    assert (
        rows.height == 2 * 2 and rows["system_error"].null_count() == rows.height
    )  # every attempt was scored
    captured = capfd.readouterr()
    logs = "\n".join([captured.out, captured.err, caplog.text])
    scanned = list(_texts(data)) + list(_texts(home))
    kinds = {p.suffix or p.name for p, _ in scanned}
    leaks = [str(p) for p, text in scanned if KEY in text]
    leaks += [
        name
        for name, text in (("dagster events/tags", dagster_text), ("logs", logs))
        if KEY in text
    ]
    print(
        f"\nscanned {len({p for p, _ in scanned})} files ({sorted(kinds)}), {len(records)} Dagster events, "
        f"{len(logs)} characters of logs: {len(leaks)} contain the key"
    )
    assert {".parquet", ".jsonl"} <= kinds and any(p.name.endswith(".db") for p, _ in scanned)
    assert leaks == []
