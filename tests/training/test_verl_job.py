"""The verl launch (rows, overrides, entrypoint), the watched Ray job (with a fake job client), the merge."""

from __future__ import annotations

import shlex
import stat
import sys
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import requests

from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.job import (
    PREFLIGHT,
    merge_command,
    merge_verl_checkpoint,
    prepare_launch,
    run_verl_training,
)
from rewardbox.training.verl.ray_job import JobFailedError, watch_job


def _rows(tasks):
    return [
        {
            "data_source": "rewardbox",
            "prompt": [{"role": "user", "content": t}],
            "agent_name": "rewardbox",
            "extra_info": {"uid": t},
        }
        for t in tasks
    ]


def _launch(tmp_path, **cfg):
    grpo = GRPOConfig(
        group_size=8, tasks_per_step=18, steps=50, finetune="full", learning_rate=1e-6
    )
    config = VerlBackendConfig(
        python="/opt/verl/bin/python", launch={"n_gpus_per_node": 4, "nnodes": 2}, **cfg
    )
    return prepare_launch(
        grpo, config, ["a/1", "b/2"], "/models/base", tmp_path, rows_fn=_rows, agent_fn=_agent
    ), config


def _agent(out_dir):
    return {
        "actor_rollout_ref.rollout.agent.default_agent_loop": "rewardbox_agent",
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(out_dir / "loops.yaml"),
    }


def test_launch_writes_rows_and_builds_the_job_entrypoint(tmp_path):
    launch, _ = _launch(tmp_path)
    assert (
        launch.rows == 2
        and pq.read_table(launch.train_path).column("agent_name").to_pylist() == ["rewardbox"] * 2
    )
    assert launch.command[:3] == ["/opt/verl/bin/python", "-m", "verl.trainer.main_ppo"]
    assert f"data.train_files={launch.train_path}" in launch.command
    assert (
        "actor_rollout_ref.rollout.n=8" in launch.command
        and "data.train_batch_size=18" in launch.command
    )
    assert "trainer.save_freq=50" in launch.command and "trainer.logger=[console]" in launch.command
    assert f"trainer.default_local_dir={launch.checkpoint_dir}" in launch.command
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=rewardbox_agent" in launch.command
    assert (
        launch.checkpoint_dir
        == tmp_path.resolve() / "checkpoints" / "verl" / "rewardbox-grpo" / launch.submission_id
    )
    assert launch.train_path == tmp_path.resolve() / "verl" / launch.submission_id / "train.parquet"
    again, _ = _launch(
        tmp_path
    )  # a new launch never resumes from (or returns) an older run's checkpoints
    assert (
        again.checkpoint_dir != launch.checkpoint_dir
        and again.submission_id != launch.submission_id
    )
    preflight, _, trainer = launch.entrypoint.partition(" && ")
    assert shlex.split(preflight) == [
        "/opt/verl/bin/python",
        "-c",
        PREFLIGHT,
        "8",
    ]  # 2 nodes x 4 GPUs
    assert shlex.split(trainer) == launch.command


def test_launch_without_preflight_and_with_extra_overrides(tmp_path):
    launch, _ = _launch(
        tmp_path,
        preflight_gpus=False,
        save_every_steps=10,
        extra_overrides={"trainer.project_name": "p", "trainer.save_freq": 5},
    )
    assert shlex.split(launch.entrypoint) == launch.command
    assert "trainer.save_freq=5" in launch.command and "trainer.project_name=p" in launch.command
    moved, _ = _launch(
        tmp_path, extra_overrides={"trainer.default_local_dir": str(tmp_path / "ckpt")}
    )
    assert moved.checkpoint_dir == tmp_path / "ckpt"  # discovery looks where verl writes


def test_the_jobs_default_python_depends_on_where_it_runs(tmp_path, monkeypatch):
    from rewardbox.training.verl.job import job_python

    monkeypatch.delenv("REWARDBOX_VERL_PYTHON", raising=False)
    cfg = VerlBackendConfig(merge_python=str(tmp_path / "absent"))
    assert job_python(cfg, local_head=False) == "python3"  # a cluster's image
    assert (
        job_python(cfg, local_head=True) == sys.executable
    )  # has Ray: the preflight runs and explains
    verl_env = tmp_path / "verl-python"
    verl_env.write_text("")
    assert job_python(VerlBackendConfig(merge_python=str(verl_env)), local_head=True) == str(
        verl_env
    )
    assert job_python(VerlBackendConfig(python="/opt/p"), local_head=True) == "/opt/p"


def test_empty_pool_and_bad_launch_settings_are_clear_errors(tmp_path):
    grpo = GRPOConfig()
    with pytest.raises(ValueError, match="training pool is empty"):
        prepare_launch(
            grpo, VerlBackendConfig(), [], "/m", tmp_path, rows_fn=_rows, agent_fn=_agent
        )
    with pytest.raises(ValueError, match="come from the pipeline"):
        VerlBackendConfig(launch={"model_path": "/x"})
    with pytest.raises(ValueError, match="n_gpus_per_nodes"):
        VerlBackendConfig(launch={"n_gpus_per_nodes": 8})  # a typo is an error, not a default


class FakeJobs:
    """A Ray job client stand-in: the log grows by one chunk per poll, then the job ends as told."""

    def __init__(
        self,
        chunks,
        end="FAILED",
        message="Job entrypoint command failed with exit code 1",
        flaky=0,
    ):
        self.chunks, self.end, self.message, self.flaky = list(chunks), end, message, flaky
        self.polls, self.stopped, self.submitted = 0, [], []

    def submit_job(self, *, entrypoint, submission_id=None, runtime_env=None, metadata=None):
        self.submitted.append((entrypoint, runtime_env))
        return submission_id

    def get_job_status(self, job_id):
        if self.flaky:
            self.flaky -= 1
            raise requests.ConnectionError("connection reset")
        if self.stopped:
            return "STOPPED"
        self.polls += 1
        return "RUNNING" if self.polls < len(self.chunks) else self.end

    def get_job_logs(self, job_id):
        return "".join(self.chunks[: self.polls])

    def get_job_info(self, job_id):
        return SimpleNamespace(message=self.message)

    def stop_job(self, job_id):
        self.stopped.append(job_id)
        return True


def test_submission_waits_for_the_heads_agent_and_never_starts_a_job_twice():
    from rewardbox.training.verl.ray_client import submit_job

    class Jobs(FakeJobs):
        def __init__(self, answers):
            super().__init__([])
            self.answers = list(answers)

        def submit_job(self, **kwargs):
            self.submitted.append(kwargs["submission_id"])
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    not_ready = RuntimeError(
        "Request failed with status code 500: No available agent to submit job, please try again later."
    )
    jobs = Jobs(
        [
            not_ready,
            requests.Timeout(
                "read timed out"
            ),  # the second attempt created the job, its answer lost
            RuntimeError(
                "Request failed with status code 400: Job with submission_id s-1 already exists."
            ),
        ]
    )
    assert submit_job(jobs, "echo", submission_id="s-1", ready_timeout_s=30) == "s-1"
    assert jobs.submitted == ["s-1"] * 3
    refused = Jobs([RuntimeError("Request failed with status code 400: runtime_env is invalid")])
    with pytest.raises(RuntimeError, match="runtime_env is invalid"):
        submit_job(refused, "echo", submission_id="s-2")
    assert refused.submitted == ["s-2"]  # a refusal is not retried


def test_watch_passes_each_line_once_even_when_split_across_polls():
    jobs = FakeJobs(
        ["step:1 - critic/score/mean:0.1\nhal", "f a line\n", "last line without newline"],
        end="SUCCEEDED",
        flaky=2,
    )  # two connection errors are retried
    lines = []
    outcome = watch_job(jobs, "j", lines.append, timeout_s=60, poll_s=0, sleep=lambda s: None)
    assert lines == ["step:1 - critic/score/mean:0.1", "half a line", "last line without newline"]
    assert outcome.status == "SUCCEEDED" and outcome.log_tail.endswith("last line without newline")
    assert jobs.stopped == []


def test_watch_stops_a_job_past_its_time_limit():
    now = iter(range(0, 1000, 10))
    jobs = FakeJobs(["x\n"] * 100)
    outcome = watch_job(
        jobs,
        "j",
        lambda line: None,
        timeout_s=25,
        poll_s=0,
        clock=lambda: next(now),
        sleep=lambda s: None,
    )
    assert outcome.status == "TIMED_OUT" and jobs.stopped == ["j"]


def test_an_interrupt_stops_the_job_then_propagates():
    jobs = FakeJobs(["step:1 - critic/score/mean:0.5\n"] * 10)

    def interrupted(_s):
        raise KeyboardInterrupt  # what a terminated run raises in the step

    with pytest.raises(KeyboardInterrupt):
        watch_job(jobs, "j", lambda line: None, timeout_s=60, poll_s=1, sleep=interrupted)
    assert jobs.stopped == ["j"]


def test_a_failed_job_fails_with_its_log_tail_and_keeps_the_progress_lines(tmp_path):
    launch, cfg = _launch(tmp_path, poll_s=0.01)
    jobs = FakeJobs(
        [
            "(TaskRunner pid=9) step:1 - critic/score/mean:0.250 - perf/throughput:10.0\n",
            "RuntimeError: no GPU: torch.cuda.is_available() is False\n",
        ]
    )
    logged = []
    with pytest.raises(JobFailedError, match="no GPU") as failed:
        run_verl_training(jobs, launch, cfg, logged.append, runtime_env={"env_vars": {"A": "1"}})
    assert "FAILED" in str(failed.value) and "exit code 1" in str(failed.value)
    assert "verl step 1: mean_reward=0.250 throughput_tokens_per_s=10.000" in logged
    # the job's SIGTERM grace is our stop timeout (Ray's default is 3 s)
    assert jobs.submitted == [
        (launch.entrypoint, {"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "60", "A": "1"}})
    ]


def test_success_without_a_checkpoint_is_an_error_and_with_one_returns_the_latest(tmp_path):
    launch, cfg = _launch(tmp_path, poll_s=0.01)
    with pytest.raises(JobFailedError, match="wrote no global_step_N/actor"):
        run_verl_training(FakeJobs(["done\n"], end="SUCCEEDED"), launch, cfg, lambda line: None)
    for step in (1, 2):
        actor = launch.checkpoint_dir / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"w")
    result = run_verl_training(
        FakeJobs(["step:2 - critic/score/mean:1.0\n"], end="SUCCEEDED"),
        launch,
        cfg,
        lambda line: None,
    )
    assert (
        result.checkpoint.step == 2
        and [s.step for s in result.steps] == [2]
        and result.log_lines == 1
    )


def test_merge_command_is_verls_model_merger():
    # verl's FSDPModelMerger through rewardbox.training.verl.merge (dtype kept, tie checked, fidelity measured)
    assert merge_command("/v/python", "/c/global_step_3/actor", "/out") == [
        "/v/python",
        "-m",
        "rewardbox.training.verl.merge",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        "/c/global_step_3/actor",
        "--target_dir",
        "/out",
        "--dtype",
        "keep",
        "--rtol",
        "0.0",
        "--atol",
        "0.0",
    ]
    assert merge_command("p", "a", "o", "bfloat16", 2**-8)[-6:] == [
        "--dtype",
        "bfloat16",
        "--rtol",
        "0.00390625",
        "--atol",
        "0.0",
    ]


def _fake_merger(tmp_path, body):
    script = tmp_path / "verl-python"
    script.write_text(f"#!{sys.executable}\nimport sys, pathlib\nargs = sys.argv[1:]\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_merge_runs_the_merger_into_a_staging_dir_then_replaces_the_output(tmp_path):
    actor, base, out = tmp_path / "global_step_2" / "actor", tmp_path / "base", tmp_path / "merged"
    actor.mkdir(parents=True)
    base.mkdir()
    (base / "chat_template.jinja").write_text("{{ x }}")
    out.mkdir()
    (out / "stale.txt").write_text("old")
    python = _fake_merger(
        tmp_path,
        "t = pathlib.Path(args[args.index('--target_dir') + 1]); t.mkdir(); "
        "(t / 'config.json').write_text(args[args.index('--local_dir') + 1])",
    )
    merged = merge_verl_checkpoint(actor, base, out, python, timeout_s=60)
    assert sorted(p.name for p in merged.iterdir()) == ["chat_template.jinja", "config.json"]
    assert (merged / "config.json").read_text() == str(actor)


def test_merge_failure_and_missing_inputs_are_clear(tmp_path):
    actor = tmp_path / "actor"
    actor.mkdir()
    failing = _fake_merger(
        tmp_path, "print('KeyError: lm_head.weight', file=sys.stderr); sys.exit(2)"
    )
    with pytest.raises(RuntimeError, match="(?s)exit 2.*lm_head"):
        merge_verl_checkpoint(actor, tmp_path, tmp_path / "out", failing)
    with pytest.raises(FileNotFoundError, match="make verl-env"):
        merge_verl_checkpoint(actor, tmp_path, tmp_path / "out", str(tmp_path / "no-python"))
    with pytest.raises(FileNotFoundError, match="no verl checkpoint"):
        merge_verl_checkpoint(tmp_path / "missing", tmp_path, tmp_path / "out", failing)
    assert not (tmp_path / "out").exists()


def test_a_real_launch_whose_context_cannot_hold_the_lengths_is_refused_before_rows_are_written(
    tmp_path,
):
    # the dry run's context rule (issue 24 item 1) applies to a real launch too: a launch is built only when
    # actor_rollout_ref.rollout.max_model_len holds data.max_prompt_length + data.max_response_length
    from rewardbox.training.verl.config import MAX_MODEL_LEN, VerlContextError

    grpo = GRPOConfig(
        group_size=8, tasks_per_step=18, steps=50, finetune="full", learning_rate=1e-6
    )
    for limit, refused in ((12287, True), (12288, False)):
        config = VerlBackendConfig(
            python="/opt/verl/bin/python",
            launch={"n_gpus_per_node": 4, "nnodes": 2},
            extra_overrides={MAX_MODEL_LEN: limit},
        )
        out = tmp_path / str(limit)
        if refused:
            with pytest.raises(VerlContextError, match=rf"{MAX_MODEL_LEN}={limit} cannot hold"):
                prepare_launch(
                    grpo, config, ["a/1"], "/models/base", out, rows_fn=_rows, agent_fn=_agent
                )
            assert not list(out.rglob("*.parquet"))  # nothing written
        else:
            launch = prepare_launch(
                grpo, config, ["a/1"], "/models/base", out, rows_fn=_rows, agent_fn=_agent
            )
            assert launch.train_path.is_file()
