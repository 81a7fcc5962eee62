"""An evaluation killed part-way resumes from its journal: only the missing keys run again."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl

from rewardbox.config.profile import load_profile
from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.episode.journal import campaign_journal
from rewardbox.tasks.schema import task_set_version
from rewardbox.tasks.sources import load_benchmark
from tests.fixtures.fake_openai import chat_response
from tests.pipelines.test_secrets_never_written import KEY, KEY_ENV, _profile, no_checkpoint


def test_a_killed_evaluation_resumes_and_its_exports_stay_whole(tmp_path, fake_openai, monkeypatch):
    from assets.evaluation import base_evaluation_results
    from assets.tasks import benchmark_tasks
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    monkeypatch.setenv(KEY_ENV, KEY)
    fake_openai.default = (200, chat_response("Could you confirm the order id?"), {})
    fake_openai.models = ["agent", "user", "judge"]  # what the endpoint preflight finds served
    profile_path, data = _profile(tmp_path, fake_openai.base_url), tmp_path / "data"
    resources = {
        "rewardbox": RewardboxResource(profile=str(profile_path), data_dir=str(data)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(data / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(data / "objects")),
    }
    assets = [benchmark_tasks, no_checkpoint, base_evaluation_results]
    assert dg.materialize(
        assets, resources=resources, instance=dg.DagsterInstance.ephemeral()
    ).success
    full = pl.read_parquet(data / "assets" / "base_evaluation_results.parquet")
    jsonl = data / "secret_scan" / "evaluation" / "base_evaluation_results.jsonl"
    lines = jsonl.read_text().splitlines()
    assert not list(
        (data / "secret_scan" / "campaigns").iterdir()
    )  # a finished campaign leaves no journal

    # What a run killed after two attempts leaves behind: their rows in the journal.
    profile = load_profile(profile_path)
    identity = [
        profile.section_hash("evaluation", "policy", "episode"),
        task_set_version(load_benchmark(profile.tasks).tasks),
        "",
    ]
    journal = campaign_journal(
        data / "secret_scan" / "campaigns",
        "base_evaluation_results",
        identity,
        {**ROW_SCHEMA, "decode_result": pl.Utf8},
    )
    for row, line in list(zip(full.to_dicts(), lines))[:2]:
        journal.append({**row, "decode_result": line})
    requests_before = len(fake_openai.requests)
    assert dg.materialize(
        assets, resources=resources, instance=dg.DagsterInstance.ephemeral()
    ).success

    resumed = pl.read_parquet(data / "assets" / "base_evaluation_results.parquet")
    per_episode = requests_before / full.height  # every episode makes the same requests here
    assert len(fake_openai.requests) - requests_before == per_episode * (
        full.height - 2
    )  # only 2 keys re-ran
    assert resumed.select("uid", "trial").rows() == full.select("uid", "trial").rows()
    exported = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["uid"], r["metadata"]["repetition"]) for r in exported] == resumed.select(
        "uid", "trial"
    ).rows()
