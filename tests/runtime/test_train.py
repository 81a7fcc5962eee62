"""The training stage on the runtime floor (``rewardbox.runtime.train``): engine values out, engine
errors raised, no Dagster. The assets' side (metadata, ``dg.Failure``) is in
``tests/pipelines/test_verl_backend_assets.py``."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from rewardbox.config.profile import load_profile
from rewardbox.runtime import train
from rewardbox.tasks.sources import load_candidates
from rewardbox.training.verl import job as verl_job
from rewardbox.training.verl.job import VerlRunResult
from rewardbox.training.verl.progress import VerlCheckpoint
from tests.resources.verl_job_support import minimal_rows, no_agent_loop, verl_profile


@pytest.fixture()
def verl_hooks(monkeypatch):
    monkeypatch.setattr(verl_job, "pool_rows", minimal_rows)
    monkeypatch.setattr(verl_job, "agent_loop_overrides", no_agent_loop)


def _verl(tmp_path, **verl):
    path = verl_profile(tmp_path, mode=None, preflight=False)
    data = yaml.safe_load(path.read_text())
    data["verl"] |= verl
    data["data_dir"] = str(tmp_path / "data")
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


def _pool(profile, n=2):
    return load_candidates(profile.tasks).tasks[:n]


def _never(*args, **kwargs):
    raise AssertionError("must not be called")


# --- the leak guard, before anything is written or submitted ------------------------------------------------


def test_a_benchmark_task_in_the_pool_is_refused_by_both_backends_before_anything_runs(
    tmp_path, monkeypatch
):
    profile = load_profile("test")
    pool = _pool(profile)
    leaked = [pool[0], dataclasses.replace(pool[1], split="benchmark")]
    out = tmp_path / "adapter"
    out.mkdir()
    (out / "kept").write_text("x")
    monkeypatch.setattr(train, "preflight_step", _never)
    with pytest.raises(
        train.LeakedTasksError, match="benchmark tasks in the training pool"
    ) as caught:
        train.train_local(profile, leaked, tmp_path / "base", out)
    assert len(caught.value.leaked) == 1 and pool[1].uid in caught.value.leaked[0]
    assert (out / "kept").exists()  # nothing was emptied
    with pytest.raises(train.LeakedTasksError):
        train.train_verl(
            _verl(tmp_path), leaked, "/models/base", job_client=_never, local_head=True, log=print
        )


# --- local backend wiring ----------------------------------------------------------------------------------


def test_rollout_parts_sample_at_the_grpo_temperature_and_start_after_the_probe(monkeypatch):
    profile = load_profile("test")
    profile = profile.model_copy(
        update={"grpo": profile.grpo.model_copy(update={"temperature": 0.37})}
    )
    assert profile.episode.temperature != 0.37
    parts = train.rollout_parts(profile)
    assert parts.episode.temperature == 0.37 and parts.policy == profile.policy
    assert parts.first_trial == profile.probe.trials
    assert parts.boundaries == tuple(profile.selection.boundaries)
    assert (
        parts.runner_factory.args[0].episode.temperature == 0.37
    )  # episodes run at the trainer's temperature
    seen = []
    monkeypatch.setattr(
        train, "check_policy_budget", lambda policy, p, tasks: seen.append((policy, p, tasks))
    )
    parts.check_budget("policy", ["task"])
    assert (
        seen[0][0] == "policy" and seen[0][1].episode.temperature == 0.37 and seen[0][2] == ["task"]
    )
    assert profile.episode.temperature != 0.37  # the profile itself is unchanged


def test_local_training_of_an_empty_pool_skips_the_preflight_and_saves_an_untrained_adapter(
    tmp_path, monkeypatch
):
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    monkeypatch.setattr(train, "preflight_step", _never)
    out = tmp_path / "adapter"
    out.mkdir()
    (out / "stale.bin").write_text("from an earlier run")
    adapter, summary = train.train_local(
        load_profile("test"), [], write_tiny_checkpoint(tmp_path / "base"), out
    )
    assert adapter == out and summary.steps == []
    assert (out / "adapter_config.json").exists() and not (out / "stale.bin").exists()


# --- verl backend ------------------------------------------------------------------------------------------


def test_verl_dry_run_writes_the_launch_and_never_asks_for_a_job_client(tmp_path, verl_hooks):
    profile = _verl(tmp_path, dry_run=True, merge_python=str(tmp_path / "no-verl" / "python"))
    done = train.train_verl(
        profile, _pool(profile), "/models/base", job_client=_never, local_head=True, log=print
    )
    assert done.run is None and done.dry is not None and done.job_version is None
    assert (
        done.path == profile.artifacts_path / "verl" / "dry_run"
        and (done.path / "launch.sh").exists()
    )
    assert done.launch.rows == 2 and not done.dry.validated
    assert "make verl-env" in done.unvalidated


def test_a_trained_verl_job_names_its_checkpoint_and_reports_its_submission(
    tmp_path, verl_hooks, monkeypatch
):
    profile = _verl(tmp_path)
    actor = tmp_path / "global_step_3" / "actor"

    def run(client, launch, cfg, log, on_submit=None):
        assert client == "client"
        on_submit("rewardbox-grpo-abc")
        return VerlRunResult("rewardbox-grpo-abc", [], VerlCheckpoint(3, actor), 12.5)

    monkeypatch.setattr(train, "run_verl_training", run)
    submitted = []
    done = train.train_verl(
        profile,
        _pool(profile),
        "/models/base",
        job_client=lambda: "client",
        local_head=True,
        log=print,
        on_submit=lambda job_id, where: submitted.append((job_id, where)),
    )
    assert done.path == actor and done.dry is None and done.run.checkpoint.step == 3
    assert submitted == [("rewardbox-grpo-abc", done.launch.checkpoint_dir)]
    again = train.VerlTraining(
        done.launch, actor, run=VerlRunResult("rewardbox-grpo-abc", [], VerlCheckpoint(4, actor), 1)
    )
    assert (
        len(done.job_version) == 16 and done.job_version != again.job_version
    )  # job and step, not bytes


def test_a_failed_verl_job_raises_the_engine_error(tmp_path, verl_hooks, monkeypatch):
    from rewardbox.training.verl.ray_job import JobFailedError, JobOutcome

    def run(client, launch, cfg, log, on_submit=None):
        raise JobFailedError(
            "job rewardbox-grpo-x FAILED: no GPU",
            JobOutcome("rewardbox-grpo-x", "FAILED", "exit 1", "", 0.0),
        )

    monkeypatch.setattr(train, "run_verl_training", run)
    profile = _verl(tmp_path)
    with pytest.raises(JobFailedError, match="no GPU"):
        train.train_verl(
            profile,
            _pool(profile),
            "/models/base",
            job_client=lambda: None,
            local_head=True,
            log=print,
        )


# --- merge and the gate ------------------------------------------------------------------------------------


def test_merge_errors_of_the_verl_backend_are_merge_errors(tmp_path):
    with pytest.raises(train.MergeError, match="verl.dry_run is true"):
        train.merge(
            _verl(tmp_path, dry_run=True),
            "/models/base",
            str(tmp_path / "dry_run"),
            tmp_path / "merged",
        )
    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    profile = _verl(tmp_path, merge_python=str(tmp_path / "no-python"))
    with pytest.raises(train.MergeError, match="make verl-env") as caught:
        train.merge(profile, "/models/base", str(actor), tmp_path / "merged")
    assert isinstance(caught.value.__cause__, FileNotFoundError | RuntimeError | ValueError)


def test_merge_fidelity_applies_to_verl_only_and_a_missing_report_fails(tmp_path):
    local = train.merge_fidelity(load_profile("test"), str(tmp_path))
    assert (local.passed, local.checked) == (True, False)
    missing = train.merge_fidelity(_verl(tmp_path), str(tmp_path))
    assert (missing.passed, missing.checked, missing.report) == (False, True, None)


def test_a_merged_checkpoint_that_does_not_load_fails_the_gate_with_the_error(tmp_path):
    run = train.run_merged(load_profile("test"), str(tmp_path / "nothing-here"), [])
    assert not run.passed and run.load_error.split(":")[0] in (
        "OSError",
        "ValueError",
        "FileNotFoundError",
    )
