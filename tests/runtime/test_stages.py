"""The campaign stages of ``rewardbox.runtime``: one wiring of journal, serving, parity recorder and gate.

Real episodes (the embedded retail domain, the in-process sandbox, the real grader) with scripted
policies; the Dagster layer's resources are replaced by what :class:`StageIO` asks for.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.domains import registry
from rewardbox.episode.clean_trials import UncleanCampaignError
from rewardbox.errors import EndpointError
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.evaluate import evaluate
from rewardbox.runtime.probe import REFERENCE_SKIPPED, probe, reference_probe
from rewardbox.runtime.stages import StageIO, screen
from rewardbox.tasks.schema import canonical_json
from rewardbox.tasks.sources import load_candidates
from rewardbox.tasks.thinkingbox import load_dataset


class Down(GoldenReplayPolicy):
    """Every completion is an endpoint outage: every trial is a system error."""

    async def complete(self, request: ChatRequest) -> Completion:
        raise EndpointError("503 from the test endpoint")


@pytest.fixture(scope="module")
def tasks():
    return sorted(load_dataset(registry.dataset_dir("retail")).tasks, key=lambda t: t.uid)[:2]


@pytest.fixture
def profile():
    profile = load_profile("test")
    profile.episode.max_system_error_retries = 0
    profile.probe.trials = 2
    return profile


class Lent:
    """A :class:`StageIO` whose serving and policy builder count their calls."""

    def __init__(self, root, policy=GoldenReplayPolicy):
        self.root, self.served, self.built, self.policy = root, [], [], policy

    def path(self, *parts):
        out = self.root.joinpath(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    @contextmanager
    def serve(self, profile, checkpoint, log):
        self.served.append(checkpoint)
        yield profile.policy

    def make_policy(self, checkpoint, config):
        self.built.append((checkpoint, config.kind))
        return self.policy()

    def io(self) -> StageIO:
        return StageIO(
            path=self.path, log=lambda line: None, serve=self.serve, make_policy=self.make_policy
        )


def test_probe_wires_serving_once_writes_parity_and_discards_the_journal(profile, tasks, tmp_path):
    lent = Lent(tmp_path)
    run = probe(profile, tasks, "ckpt", "input-1", lent.io())
    assert lent.served == ["ckpt"] and lent.built == [("ckpt", profile.policy.kind)]
    assert run.rows.height == 4 and run.rows["passed"].all()
    meta = run.metadata
    assert meta["episodes"] == 4 and meta["pass_rate"] == 1.0 and meta["system_errors"] == 0
    assert meta["clean_trial_gate"]["problems"] == [] and meta["input_hash"] == "input-1"
    assert meta["config_hash"] == profile.section_hash("probe", "policy", "episode")
    assert "sandbox_servers" not in meta  # the in-process sandbox has no per-server report
    parity = json.loads((tmp_path / "parity" / "probe_results.json").read_text())
    assert parity["completions"] or parity  # written once the gate passed
    assert not list((tmp_path / "campaigns").iterdir())  # journal discarded


def test_an_unclean_probe_raises_and_keeps_its_journal_for_a_rerun(profile, tasks, tmp_path):
    lent = Lent(tmp_path, policy=Down)
    with pytest.raises(UncleanCampaignError) as caught:
        probe(profile, tasks, "ckpt", "input-1", lent.io())
    assert caught.value.verdict.system_errors == 4 and "probe_results" in str(caught.value)
    assert list((tmp_path / "campaigns").iterdir())  # kept: a rerun plays only what was not clean
    assert not (tmp_path / "parity" / "probe_results.json").exists()


def test_screen_returns_the_valid_tasks_and_its_counts(profile, tasks, tmp_path):
    run = screen(profile, tasks, Lent(tmp_path).io())
    assert [t.uid for t in run.extra] == [t.uid for t in tasks] and run.rows.height == 2
    assert run.metadata["tasks"] == 2 and run.metadata["invalid"] == 0
    assert run.metadata["invalid_tasks"].columns == ["uid", "reason"]


def test_reference_probe_without_a_reference_is_skipped_with_the_profile_section_hash(
    profile, tasks, tmp_path
):
    profile.reference = None
    run = reference_probe(profile, tasks, "input-1", Lent(tmp_path).io())
    assert run.rows.height == 0 and run.metadata["status"] == REFERENCE_SKIPPED
    import hashlib  # the hash the assets computed by hand before (``_reference_hash``): the same value

    by_hand = hashlib.sha256(
        canonical_json(
            {"reference": None, "episode": profile.episode.model_dump(mode="json")}
        ).encode()
    ).hexdigest()[:16]
    assert run.metadata["config_hash"] == by_hand == profile.section_hash("reference", "episode")


def test_evaluate_writes_decode_results_and_parity_then_discards_the_journal(
    profile, tasks, tmp_path
):
    profile.evaluation.trials = 2
    lent = Lent(tmp_path)
    run = evaluate(profile, tasks, "ckpt", "evaluation_results", "input-1", lent.io())
    assert lent.served == ["ckpt"] and len(lent.built) == 1  # one pass: nothing to repair
    assert run.rows.select("uid", "trial").rows() == [(t.uid, i) for t in tasks for i in range(2)]
    meta = run.metadata
    assert (
        meta["pass_at_1"] == 1.0
        and meta["repaired_keys"] == 0
        and meta["policy_kind"] == profile.policy.kind
    )
    assert isinstance(meta["per_domain"], pl.DataFrame) and meta["clean_trial_gate"]["trials"] == 4
    lines = meta["decode_results_jsonl"].read_text().splitlines()
    assert len(lines) == 4 and (tmp_path / "parity" / "evaluation_results.json").exists()
    assert not list((tmp_path / "campaigns").iterdir())


def test_the_external_sandbox_report_reaches_the_stage_metadata(tmp_path):
    """#25: the per-server decision of a real external server (template start or fallback, reuse status)
    is in the stage's metadata, which the asset writes."""
    from tests.evaluation.test_external_end_to_end import _dataset, _profile

    profile = _profile(_dataset(tmp_path / "tb_retail"), tmp_path)
    tasks = load_candidates(profile.tasks).tasks[:1]
    run = screen(profile, tasks, Lent(tmp_path).io())
    servers = run.metadata["sandbox_servers"]
    assert run.metadata["tasks"] == 1 and "rewardbox_retail" in servers
    assert set(servers["rewardbox_retail"]) & {"start", "reuse"} and isinstance(
        servers["(pool)"], dict
    )


def test_screen_benchmark_loads_strictly_screens_and_names_the_task_set_version(tmp_path):
    from rewardbox.runtime.stages import screen_benchmark
    from rewardbox.tasks.schema import task_set_version

    profile = load_profile("test")
    run = screen_benchmark(profile, Lent(tmp_path).io())
    assert run.extra and all(t.split == "benchmark" for t in run.extra)
    assert run.metadata["input_hash"] == task_set_version(run.extra)
    assert run.metadata["config_hash"] == profile.section_hash("tasks")
    assert run.metadata["read_only"] == run.metadata["read_only_tasks"]
    assert run.metadata["load_errors"] == []
