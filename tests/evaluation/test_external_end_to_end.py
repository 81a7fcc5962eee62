"""A ThinkingBox-layout dataset with an external stdio server, end to end, no conversion step.

The dataset directory is assembled in tmp_path from unchanged ThinkingBox-layout
files (our retail domain's agent, scenario and two test files), plus test lists
and a ``servers.yaml`` that runs ``{python} -m rewardbox.domains.server retail``
as an ``mcp-process`` entry. The profile points the task sources at that
directory (``servers`` per source) with ``sandbox.kind: external``; then
screening -> probes -> difficulty / training pool -> evaluation -> report ->
DecodeResult export run for real, each episode spawning its own server process.
"""

from __future__ import annotations

import json
import shutil
import threading
import time

import polars as pl
import psutil
import pytest
import yaml

from rewardbox.config.profile import Profile
from rewardbox.domains.registry import dataset_dir
from rewardbox.episode.campaign import coverage_problems, results_frame
from rewardbox.episode.run import run_trials
from rewardbox.policy.factory import build_policy
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.report.tables import reliability_tables
from rewardbox.runtime.compose import build_sandbox, campaign_parts
from rewardbox.selection import task_difficulty, training_pool
from rewardbox.selection.screening import screen_tasks
from rewardbox.tasks.sources import load_benchmark, load_candidates
from rewardbox.thinkingbox.interchange import export_decode_results, import_infer_results

SERVER_MODULE = "rewardbox.domains.server"
# Scripted-mix picks (golden on seeds 0..3): explicit_01 1/4, lookup_02 3/4, explicit_03 2/4.
CANDIDATES = [
    "retail_cancel.py:test_retail_cancel_explicit_01",
    "retail_cancel.py:test_retail_cancel_lookup_02",
    "retail_cancel.py:test_retail_cancel_explicit_03",
]
BENCHMARK = [
    "retail_cancel.py:test_retail_cancel_explicit_02",
    "retail_address.py:test_retail_address_change_01",
]


def _dataset(root):
    """A ThinkingBox dataset dir: agent/, scenario/, test_case/ copied verbatim, lists, servers.yaml."""
    src = dataset_dir("retail")
    for rel in (
        "agent/agent.yaml",
        "scenario/retail.yaml",
        "test_case/retail_cancel.py",
        "test_case/retail_address.py",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, root / rel)
    (root / "candidates.yaml").write_text(yaml.safe_dump(CANDIDATES))
    (root / "benchmark.yaml").write_text(yaml.safe_dump(BENCHMARK))
    (root / "servers.yaml").write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "rewardbox_retail": {
                        "type": "mcp-process",
                        "command": f"{{python}} -m {SERVER_MODULE} retail",
                    }
                }
            }
        )
    )
    return root


def _profile(root, tmp_path) -> Profile:
    source = {"dataset": str(root), "servers": "servers.yaml"}
    return Profile.model_validate(
        {
            "name": "external-e2e",
            "data_dir": str(tmp_path / "data"),
            "tasks": {
                "candidates": [{**source, "test_list": "candidates.yaml"}],
                "benchmark": [{**source, "test_list": "benchmark.yaml"}],
            },
            "sandbox": {"kind": "external", "tool_timeout_s": 30},
            "policy": {"kind": "scripted_mix", "golden_frac": 0.5},
            "episode": {"max_user_turns": 2, "concurrency": 4},
            "grading": {"workers": 1},
            "probe": {"trials": 4},
            "evaluation": {"trials": 2},
            "report": {
                "k_values": [1, 2],
                "price_table": {
                    "version": "e2e",
                    "models": {
                        "*": {
                            "usd_per_1m_input_tokens": 0.05,
                            "usd_per_1m_cached_input_tokens": 0.025,
                            "usd_per_1m_output_tokens": 0.2,
                        }
                    },
                },
            },
        }
    )


def _server_pids() -> set[int]:
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            argv = (
                child.cmdline()
            )  # a server is ``python -m <module>``; not the grading pool's forkserver,
            # whose argv lists the modules it preloads (the server module among them)
            is_server = any(a == "-m" and b == SERVER_MODULE for a, b in zip(argv, argv[1:]))
            if is_server and child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


class _ServerWatch:
    """Samples this process's children while the run goes on: proves servers were separate processes."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.seen |= _server_pids()
            time.sleep(0.05)

    def __enter__(self) -> _ServerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
def test_thinkingbox_dataset_with_external_server_runs_end_to_end(tmp_path):
    root = _dataset(tmp_path / "tb_retail")
    profile = _profile(root, tmp_path)
    assert type(build_sandbox(profile)()).__name__ == "ExternalSandbox"

    candidates, benchmark = load_candidates(profile.tasks), load_benchmark(profile.tasks)
    assert [t.uid for t in candidates.tasks] == CANDIDATES and [
        t.uid for t in benchmark.tasks
    ] == BENCHMARK
    assert not candidates.errors and not candidates.excluded

    with _ServerWatch() as watch:
        valid, screen = screen_tasks(candidates.tasks + benchmark.tasks, campaign_parts(profile))
        assert len(valid) == 5 and screen["valid"].all(), screen.filter(~pl.col("valid"))[
            "reason"
        ].to_list()
        assert screen["expects_write"].all()

        probe_rows, _ = run_trials(
            candidates.tasks,
            profile.probe.trials,
            build_policy(profile.policy),
            campaign_parts(profile),
        )
        assert coverage_problems(probe_rows, [(u, t) for u in CANDIDATES for t in range(4)]) == []
        assert probe_rows["system_error"].null_count() == probe_rows.height

        difficulty = task_difficulty(probe_rows, profile.selection)
        bands = dict(zip(difficulty["uid"], difficulty["band"]))
        assert bands == {CANDIDATES[0]: "hard", CANDIDATES[1]: "easy", CANDIDATES[2]: "medium"}
        assert training_pool(difficulty, profile.selection)["uid"].to_list() == sorted(CANDIDATES)

        trials = profile.evaluation.trials
        base_rows, base_results = run_trials(
            benchmark.tasks, trials, build_policy(profile.policy), campaign_parts(profile)
        )
        tuned_rows, _ = run_trials(
            benchmark.tasks, trials, GoldenReplayPolicy(), campaign_parts(profile)
        )
    for rows in (base_rows, tuned_rows):
        assert coverage_problems(rows, [(u, t) for u in BENCHMARK for t in range(trials)]) == []
        assert rows["system_error"].null_count() == rows.height
    assert tuned_rows["passed"].all() and base_rows["passed"].to_list() == [
        True,
        False,
        False,
        True,
    ]

    tables = reliability_tables(
        base_rows, tuned_rows, trials, profile.report.price_table, k_values=profile.report.k_values
    )
    assert set(tables) == {"overall", "changed_tasks", "per_domain", "per_task"}
    # the domain is the scenario ("retail"), not the dataset directory's name (docs/thinkingbox.md, "Domains")
    assert "retail" in tables["per_domain"] and all(uid in tables["per_task"] for uid in BENCHMARK)

    exported = export_decode_results(base_results, benchmark.tasks, tmp_path / "out" / "base.jsonl")
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [(r["uid"], r["metadata"]["repetition"]) for r in lines] == [
        (u, t) for u in BENCHMARK for t in range(trials)
    ]
    assert all(r["test_context"]["effects"]["rewardbox_retail"]["result_db_hash"] for r in lines)
    assert (
        import_infer_results(exported, benchmark.tasks).to_dicts()
        == results_frame(base_results, benchmark.tasks).to_dicts()
    )

    # 5 screened x 2 + 3 probed x 4 + 2 evaluated x 2 x 2 episodes, one server process each.
    assert len(watch.seen) >= 30
    assert _server_pids() == set()
    assert all(
        not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        for pid in watch.seen
    )
