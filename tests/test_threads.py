"""The thread policy (rewardbox.threads) is applied in every process that runs the model, and graders stay single-threaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewardbox import threads
from rewardbox.threads import WAIT_POLICY_ENV, apply_thread_policy, single_thread_env

ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in WAIT_POLICY_ENV and not k.endswith("_NUM_THREADS")
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_openmp_reads_the_passive_wait_policy_in_a_fresh_model_process():
    # OMP_DISPLAY_ENV makes the OpenMP runtime print the values it read when torch loaded it
    env = _clean_env() | {"OMP_DISPLAY_ENV": "TRUE"}
    code = (
        "import sys, rewardbox; assert 'torch' not in sys.modules; import torch; torch.mm(torch.ones(64, 64), "
        "torch.ones(64, 64)); from rewardbox.threads import apply_thread_policy; p = apply_thread_policy(1); "
        "print('POLICY', p.threads, p.wait_policy, p.wait_policy_applied)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "POLICY 1 PASSIVE True" in out.stdout
    assert (
        "OMP_WAIT_POLICY = 'PASSIVE'" in out.stderr
    )  # the runtime itself read it (libgomp's display)


def test_a_user_wait_policy_wins_and_late_torch_is_reported():
    env = _clean_env() | {"OMP_WAIT_POLICY": "ACTIVE"}
    code = (
        "import torch, rewardbox.threads as t; p = t.apply_thread_policy(1); "
        "print('POLICY', p.wait_policy, p.wait_policy_applied)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "POLICY ACTIVE False" in out.stdout


def test_auto_takes_more_threads_only_when_measurably_faster(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a user's count would win over "auto"
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    try:
        monkeypatch.setattr(threads, "_probe_seconds", lambda n, rows=8, **_: {1: 1.0, 2: 0.95}[n])
        policy = apply_thread_policy("auto")
        assert (policy.threads, policy.chosen_by, policy.probe_s) == (
            1,
            "measured",
            {1: 1.0, 2: 0.95},
        )
        monkeypatch.setattr(threads, "_probe_seconds", lambda n, rows=8, **_: {1: 1.0, 2: 0.55}[n])
        assert apply_thread_policy("auto").threads == 2 == torch.get_num_threads()
        assert threads.current_thread_policy().threads == 2
        with pytest.raises(ValueError, match="num_threads"):
            apply_thread_policy(0)
    finally:
        torch.set_num_threads(before)


def test_local_policy_applies_the_thread_policy(tmp_path, monkeypatch):
    import asyncio

    import torch

    from rewardbox.policy.local import LocalPolicy
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    before = torch.get_num_threads()
    seen = []
    real = threads.apply_thread_policy
    monkeypatch.setattr(
        "rewardbox.policy.local.apply_thread_policy",
        lambda n, dtype=None, shared=True: (
            seen.append((n, dtype, shared)) or real(n, dtype, shared)
        ),
    )
    policy = LocalPolicy(write_tiny_checkpoint(tmp_path / "ckpt"), num_threads=1)
    unshared = LocalPolicy(
        write_tiny_checkpoint(tmp_path / "ckpt2"), num_threads=1, shared_prefix=False
    )
    asyncio.run(unshared.aclose())
    try:
        assert seen == [(1, policy.dtype, True), (1, policy.dtype, False)]
        assert torch.get_num_threads() == 1
        assert policy.thread_policy.threads == 1 and policy.thread_policy.wait_policy == "PASSIVE"
        assert policy.dtype == torch.float32 or policy.dtype == torch.bfloat16
    finally:
        asyncio.run(policy.aclose())
        torch.set_num_threads(before)


def test_the_non_local_trainee_applies_the_thread_policy(tmp_path, monkeypatch):
    from rewardbox.config.profile import load_profile
    from rewardbox.training import local as training_local
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    seen = []
    monkeypatch.setattr(training_local, "apply_thread_policy", lambda n: seen.append(n))
    profile = load_profile("test")
    training_local._trainee(
        profile.grpo, profile.policy, write_tiny_checkpoint(tmp_path / "ckpt"), [], lambda *a: None
    )
    assert seen == ["auto"]


def test_grading_workers_run_single_threaded_with_passive_waits():
    from rewardbox.grading.testrunner import _Worker

    env = single_thread_env({"PATH": "/bin", "OMP_NUM_THREADS": "8"})
    assert (
        env["OMP_NUM_THREADS"] == "1"
        and env["OMP_WAIT_POLICY"] == "PASSIVE"
        and env["PATH"] == "/bin"
    )
    worker = _Worker()
    try:
        environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
        assert b"OMP_NUM_THREADS=1" in environ and b"OMP_WAIT_POLICY=PASSIVE" in environ
    finally:
        worker.stop(kill=True)


def test_auto_keeps_the_users_omp_num_threads_in_a_fresh_process():
    """OMP_NUM_THREADS=1 set by the user: "auto" (the default) must not measure and raise it."""
    code = (
        "import rewardbox, torch; from rewardbox.threads import apply_thread_policy\n"
        "p = apply_thread_policy('auto'); print('POLICY', p.threads, p.chosen_by, p.probe_s)\n"
        "q = apply_thread_policy(2); print('CONFIG', q.threads, q.chosen_by)"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "POLICY 1 environment {}" in out.stdout
    assert (
        "CONFIG 2 config" in out.stdout
    )  # an explicit config count still wins over the environment


def test_auto_probes_log2_team_sizes_not_every_core_count(monkeypatch):
    import torch

    assert threads.candidate_team_sizes(1) == [1] and threads.candidate_team_sizes(2) == [1, 2]
    assert threads.candidate_team_sizes(6) == [1, 2, 4, 6]
    assert threads.candidate_team_sizes(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 96)
    probed = []
    monkeypatch.setattr(
        threads, "_probe_seconds", lambda n, rows=8, **_: probed.append(n) or 1.0 / min(n, 4)
    )
    try:
        policy = apply_thread_policy("auto")
        sizes = [1, 2, 4, 8, 16, 32, 64, 96]
        assert probed == [n for n in sizes for _ in ("decode", "wide")] and policy.threads == 4
        # 8+ not 15 % faster than 4
    finally:
        torch.set_num_threads(before)


def test_auto_keeps_a_wider_team_for_prefill_and_the_update_than_for_decode_steps(monkeypatch):
    """Issue #28's kind: "auto" timed only a decode-shaped matmul (8 rows), where a second thread barely
    pays for its wake-up, so it kept one thread for everything, prefill and the update included (on this
    2-core machine "auto" chose 1 thread idle and loaded). Wide calls now get their own measured team."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    timings = {8: {1: 1.0, 2: 0.95}, threads.WIDE_ROWS: {1: 1.0, 2: 0.55}}
    monkeypatch.setattr(threads, "_probe_seconds", lambda n, rows=8, **_: timings[rows][n])
    try:
        policy = apply_thread_policy("auto")
        assert (policy.threads, policy.wide_threads) == (1, 2)
        assert torch.get_num_threads() == 1
        with threads.wide_team():
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        assert apply_thread_policy(1).wide_threads == 1  # a fixed count is used for every call
        with threads.wide_team():
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_prefill_runs_with_the_wide_team_and_decode_steps_with_the_decode_team(monkeypatch):
    import asyncio

    import torch

    from rewardbox.policy.batching import Pending
    from tests.policy.test_running import _request, _tiny_policy, tiny_model

    before = torch.get_num_threads()
    monkeypatch.setattr(
        threads, "_APPLIED", threads.ThreadPolicy(1, "PASSIVE", True, "measured", {}, 2, {})
    )
    policy = _tiny_policy(tiny_model())
    seen = []
    policy.model.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append((kw["input_ids"].shape[1] > 1, torch.get_num_threads())),
        with_kwargs=True,
    )
    torch.set_num_threads(1)
    loop = asyncio.new_event_loop()
    try:
        pending = Pending(_request(1), None, loop.create_future(), loop, 0.0)
        policy._queue.put(pending)
        policy._tick()
        while policy._slots:
            policy._tick()
    finally:
        loop.close()
        torch.set_num_threads(before)
    assert (True, 2) in seen and (False, 1) in seen  # prefill wide, decode steps narrow
    assert all(n == (2 if wide else 1) for wide, n in seen)


def test_the_decode_probe_is_a_decode_layer_with_its_attention_in_the_models_dtype(monkeypatch):
    """Issue #28's kind: the decode probe timed 8-row matmuls alone, where a second thread barely pays,
    so "auto" kept one thread; at a 1,100-token context the attention is most of a decode step and
    nearly halves on two cores (97 -> 61 ms per bf16 step of 8 rows, idle 2-core machine). The probe
    now runs a decode layer, attention included, in the dtype the model decodes in."""
    import torch
    import torch.nn.functional as F

    calls = []
    real_sdpa, real_linear = F.scaled_dot_product_attention, F.linear
    monkeypatch.setattr(
        F,
        "scaled_dot_product_attention",
        lambda q, k, v, **kw: (
            calls.append(("sdpa", q.shape, k.shape, q.dtype, kw["attn_mask"].shape))
            or real_sdpa(q, k, v, **kw)
        ),
    )
    monkeypatch.setattr(
        F,
        "linear",
        lambda x, w: calls.append(("linear", x.shape, w.shape, x.dtype)) or real_linear(x, w),
    )
    from rewardbox.policy import attention

    real_shared = attention.shared_prefix_attention
    monkeypatch.setattr(
        attention,
        "shared_prefix_attention",
        lambda module, q, k, v, mask, scaling, prefixes: (
            calls.append(("shared", q.shape, k.shape, q.dtype, mask.shape, prefixes[0].length))
            or real_shared(module, q, k, v, mask, scaling, prefixes)
        ),
    )
    threads.decode_layer_workload(torch.bfloat16)()
    shared = [c for c in calls if c[0] in ("sdpa", "shared")]
    linear = [c for c in calls if c[0] == "linear"]
    assert shared == [
        ("shared", (8, 9, 1, 64), (8, 3, 100, 64), torch.bfloat16, (8, 1, 1, 100), 1000)
    ]  # SmolLM2-135M: 9 query heads, 3 key/value heads; 1,000 of 1,100 keys a shared prefix
    assert [c[2] for c in linear] == [
        (576, 576),
        (192, 576),
        (192, 576),
        (576, 576),
        (1536, 576),
        (1536, 576),
        (576, 1536),
    ] and {c[3] for c in linear} == {torch.bfloat16}
    calls.clear()
    # fp32, smaller, no shared prefix: SDPA over every key, shapes follow
    threads.decode_layer_workload(shape={"keys": 16, "rows": 2, "shared": 0})()
    assert ("sdpa", (2, 3, 3, 64), (2, 3, 16, 64), torch.float32, (2, 1, 1, 16)) in calls

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    seen = []
    monkeypatch.setattr(
        threads,
        "_probe_seconds",
        lambda n, rows=8, dtype=None, shared=True: (
            seen.append((n, rows, dtype, shared)) or {1: 1.0, 2: 0.6}[n]
        ),
    )
    try:
        policy = apply_thread_policy("auto", torch.bfloat16)
        assert (policy.threads, policy.probe_dtype, policy.probe_shared) == (2, "bfloat16", True)
        assert (1, 8, torch.bfloat16, True) in seen and (2, 8, torch.bfloat16, True) in seen
        assert apply_thread_policy("auto").probe_dtype == "float32"
        # policy.shared_prefix: false probes a copy of the prefix per row
        seen.clear()
        assert (
            apply_thread_policy("auto", torch.bfloat16, shared_prefix=False).probe_shared is False
        )
        assert (1, 8, torch.bfloat16, False) in seen and (2, 8, torch.bfloat16, False) in seen
    finally:
        torch.set_num_threads(before)


def test_the_real_decode_probe_times_each_candidate_team_in_each_dtype():
    import torch

    before = torch.get_num_threads()
    try:
        for dtype in (torch.float32, torch.bfloat16):
            for team in threads.candidate_team_sizes(min(threads.usable_cores(), 2)):
                for shared in (True, False):
                    seconds = threads._probe_seconds(
                        team, repeats=1, rows=2, dtype=dtype, shared=shared
                    )
                    assert 0 < seconds < 60 and torch.get_num_threads() == team
    finally:
        torch.set_num_threads(before)


def test_restore_thread_policy_brings_back_the_teams_another_policy_replaced(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        first = apply_thread_policy(1)
        apply_thread_policy(2)
        threads.restore_thread_policy(first)
        assert threads.current_thread_policy() is first and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_worker_thread_decodes_with_its_own_team_whatever_another_thread_set(tmp_path):
    """torch keeps an OpenMP team size per thread, and a thread takes the process-wide count at its
    first parallel op: a worker whose first step came while another thread had widened the team (the
    trainer's wide_team(), a benchmark) decoded with that count for good, and a later change from
    another thread never reached it (the first decode_team benchmark compared 1 thread with 1). The
    worker now applies ``decode_threads`` itself at every turn."""
    import asyncio

    import torch

    from rewardbox.policy.base import ChatRequest
    from rewardbox.policy.local import LocalPolicy
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    before = torch.get_num_threads()
    policy = LocalPolicy(write_tiny_checkpoint(tmp_path / "ckpt"), num_threads=1)
    teams = []
    layer = policy.model.model.layers[0]
    layer.register_forward_pre_hook(
        lambda _m, args: teams.append((args[0].shape[1], torch.get_num_threads()))
    )
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[], max_new_tokens=3)
    try:
        torch.set_num_threads(2)  # another thread's count when the worker first runs
        asyncio.run(policy.complete(request))
        assert {n for width, n in teams if width == 1} == {1}  # decode steps: the policy's team
        teams.clear()
        policy.decode_threads = 2  # from this thread; the worker applies it at its next turn
        torch.set_num_threads(1)
        asyncio.run(policy.complete(request))
        assert {n for width, n in teams if width == 1} == {2}
    finally:
        asyncio.run(policy.aclose())
        torch.set_num_threads(before)


def test_the_decode_probe_times_the_layout_the_policy_decodes_with(monkeypatch):
    """``policy.shared_prefix: false`` keeps a copy of the prefix in every row, so its probe times that."""
    shapes = []
    monkeypatch.setattr(
        threads,
        "decode_layer_workload",
        lambda dtype, shape: shapes.append(shape) or (lambda: None),
    )
    threads._probe_seconds(1, repeats=1, shared=False)
    threads._probe_seconds(1, repeats=1)
    assert shapes == [
        {"rows": 8, "shared": 0},
        {"rows": 8, "shared": threads.DECODE_SHAPE["shared"]},
    ]
