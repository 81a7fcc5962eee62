"""Reference screening end to end with Dagster: a fake OpenAI-compatible reference, a ``tb infer`` import, and off.

The upstream assets (candidates, screening, base-policy probes, difficulty) are materialised once with the
scripted ``test`` policy; each case then materialises ``reference_probe_results`` and ``training_pool``
with its own profile, reading the upstream assets from storage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR
from rewardbox.selection import training_pool as select_pool
from tests.fixtures.fake_reference import FakeReference

UPSTREAM = (
    "candidate_tasks",
    "screened_candidates",
    "base_checkpoint",
    "probe_results",
    "task_difficulty",
)
GATED = ("reference_probe_results", "training_pool")


def _write_profile(root: Path, name: str, reference: dict | None) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["tasks"]["candidates"] = [
        {"dataset": "embedded:retail", "test_list": "testlists/candidates.yaml", "limit": 4},
        {"dataset": "embedded:hotel", "test_list": "testlists/candidates.yaml", "limit": 2},
    ]
    data["episode"]["max_system_error_retries"] = (
        0  # a 503 stays a system error: the reference probe refills it
    )
    if reference is not None:
        data["reference"] = reference
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Graph:
    """The asset graph on one temporary storage, materialised with the profile each case names."""

    def __init__(self, root: Path):
        from assets import selection, tasks

        @dg.asset(name="base_checkpoint")
        def base_checkpoint() -> str:  # the scripted test policy needs no weights
            return ""

        self.root = root
        wanted = {*UPSTREAM, *GATED}
        self.assets = [
            a
            for a in dg.load_assets_from_modules([tasks, selection])
            if any(k.to_user_string() in wanted for k in a.keys)
        ] + [base_checkpoint]
        self.instance = dg.DagsterInstance.ephemeral()

    def materialize(self, profile: Path, names: tuple[str, ...]) -> dg.ExecuteInProcessResult:
        from resources.io import ParquetIOManager
        from resources.ray_cluster import RayClusterResource
        from resources.rewardbox import RewardboxResource
        from resources.vllm_server import VllmServerResource

        resources = {
            "rewardbox": RewardboxResource(profile=str(profile), data_dir=str(self.root / "data")),
            "ray_cluster": RayClusterResource(),
            "vllm_server": VllmServerResource(),
            "parquet_io_manager": ParquetIOManager(base_dir=str(self.root / "assets")),
            "io_manager": dg.FilesystemIOManager(base_dir=str(self.root / "objects")),
        }
        result = dg.materialize(
            self.assets, selection=list(names), resources=resources, instance=self.instance
        )
        assert result.success
        return result

    def metadata(self, result: dg.ExecuteInProcessResult, name: str) -> dict[str, Any]:
        event = next(
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.to_user_string() == name
        )
        return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}

    def load(self, name: str) -> Any:
        if name in ("reference_probe_results", "probe_results", "task_difficulty"):
            return pl.read_parquet(self.root / "assets" / f"{name}.parquet")
        import pickle

        return pickle.loads((self.root / "objects" / name).read_bytes())


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    graph = Graph(root)
    graph.materialize(_write_profile(root, "upstream", None), UPSTREAM)
    return graph


def _kept_by_bands(graph: Graph) -> set[str]:
    from rewardbox.selection import SelectionConfig

    return set(select_pool(graph.load("task_difficulty"), SelectionConfig())["uid"].to_list())


def test_fake_endpoint_reference_gates_the_pool(graph):
    candidates = graph.load("screened_candidates")
    uids = sorted(t.uid for t in candidates)
    kept_by_bands = _kept_by_bands(graph)
    # solvable: every other candidate, plus at least one band-kept task; unsolvable: at least one band-kept task
    solvable = set(uids[::2]) | {min(kept_by_bands)}
    solvable -= {max(kept_by_bands)} if len(kept_by_bands) > 1 else set()
    flaky = {uids[0], uids[1]}
    fake = FakeReference(candidates, solvable, flaky)
    try:
        reference = {
            "policy": {
                "kind": "endpoint",
                "base_url": fake.base_url,
                "model": "reference",
                "max_retries": 0,
                "max_timeout_retries": 0,
            },
            "min_clean_runs": 2,
            "min_successes": 1,
            "max_refill_rounds": 1,
        }
        result = graph.materialize(_write_profile(graph.root, "endpoint", reference), GATED)
    finally:
        fake.close()

    rows = graph.load("reference_probe_results")
    assert (
        rows.select("uid", "trial").n_unique() == rows.height == 2 * len(uids)
    )  # one row per (task, trial)
    assert rows["system_error"].is_null().all()  # the two 503s were refilled, not scored
    passed_uids = set(rows.filter(pl.col("passed"))["uid"].to_list())
    assert passed_uids == solvable
    meta = graph.metadata(result, "reference_probe_results")
    assert (meta["tasks_probed"], meta["passed"], meta["failed"], meta["incomplete"]) == (
        len(uids),
        len(solvable),
        len(uids) - len(solvable),
        0,
    )
    assert meta["system_errors_refilled"] == 2 and meta["system_errors"] == 0
    assert (
        meta["status"] == "probed (counts rule)"
        and meta["source"] == f"reference at {fake.base_url[7:-3]}"
    )
    histogram = " ".join(meta["successes_histogram"].split())  # n, k, tasks, passed
    assert f"| 2 | 2 | {len(solvable)} | {len(solvable)} |" in histogram

    pool = {t.uid for t in graph.load("training_pool")}
    assert pool == kept_by_bands & solvable
    pool_meta = graph.metadata(result, "training_pool")
    assert pool_meta["reference_gate"] == "counts rule"
    assert pool_meta["reference_removed"] == len(kept_by_bands - solvable) >= 1


def _decode_line(uid: str, repetition: int, outcome: str) -> str:
    metadata: dict[str, Any] = {"repetition": repetition, "scenario": "retail"}
    line: dict[str, Any] = {"uid": uid, "metadata": metadata}
    if outcome == "E":
        line["is_system_error"] = True
        metadata["error"] = {"type": "EndpointError", "message": "HTTP 503", "tb": ""}
    else:
        line["test_result"] = {
            "result": outcome == "P",
            "reward": float(outcome == "P"),
            "is_system_error": False,
        }
    return json.dumps(line)


def test_imported_tb_infer_run_gates_the_pool_with_the_posterior_rule(graph):
    uids = sorted(t.uid for t in graph.load("screened_candidates"))
    kept_by_bands = _kept_by_bands(graph)
    # P(p > 0.5 | k, n) >= 0.9: 4 of 4 passes (0.985), 3 of 4 fails (0.840), 4 of 4 around an error passes
    patterns = {uid: ("PPPP", "PPPF", "PPEPP")[i % 3] for i, uid in enumerate(uids)}
    patterns[uids[-1]] = "PPE"  # 2 clean runs < min_clean_runs 4: incomplete, not failed
    lines = [
        _decode_line(uid, rep, mark)
        for uid, marks in patterns.items()
        for rep, mark in enumerate(marks)
    ]
    lines.append(
        _decode_line("not_a_candidate.py:test_x", 0, "P")
    )  # left out of the import, with a warning
    run = graph.root / "reference_run.jsonl"
    run.write_text("\n".join(lines) + "\n")
    reference = {
        "import_results": str(run),
        "min_clean_runs": 4,
        "posterior_threshold": 0.5,
        "posterior_q": 0.9,
    }
    result = graph.materialize(_write_profile(graph.root, "imported", reference), GATED)

    passing = {uid for uid, marks in patterns.items() if marks in ("PPPP", "PPEPP")}
    meta = graph.metadata(result, "reference_probe_results")
    assert (
        meta["passed"] == len(passing)
        and meta["incomplete"] == 1
        and meta["system_errors"] == sum(marks.count("E") for marks in patterns.values())
    )
    assert meta["status"] == "probed (posterior rule)" and meta["tasks_not_probed"] == 0
    assert set(graph.load("reference_probe_results")["uid"].to_list()) == set(uids)
    assert {t.uid for t in graph.load("training_pool")} == kept_by_bands & passing
    assert graph.metadata(result, "training_pool")["reference_removed"] == len(
        kept_by_bands - passing
    )


def test_without_a_reference_the_asset_says_skipped_and_the_pool_is_unchanged(graph):
    result = graph.materialize(_write_profile(graph.root, "off", None), GATED)
    meta = graph.metadata(result, "reference_probe_results")
    assert meta["status"] == "skipped: no reference configured" and meta["config_hash"]
    assert graph.load("reference_probe_results").height == 0
    assert graph.metadata(result, "training_pool")["reference_gate"] == "off"
    assert {t.uid for t in graph.load("training_pool")} == _kept_by_bands(graph)
