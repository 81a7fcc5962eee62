"""The Ray job lifecycle against a real local Ray job server (issue 24, kind 7).

One Ray head (its dashboard is the job server) serves the module. A :class:`BlinkingProxy`
between our client and the job server makes it stop answering, as a dashboard that blinks.
The jobs are small Python scripts (no verl): what is under test is the lifecycle, not the trainer.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
import threading
import time
from urllib.parse import urlparse

import pytest

ray = pytest.importorskip("ray")

from rewardbox.training.verl.ray_client import job_client, stop_job  # noqa: E402
from rewardbox.training.verl.ray_job import LOST_CONTACT, START_TIMED_OUT, watch_job  # noqa: E402
from tests.resources.blinking_proxy import BlinkingProxy  # noqa: E402

pytestmark = pytest.mark.timeout(300)

COUNT = (
    "import time\nfor i in range({n}):\n    print('line', i, flush=True)\n    time.sleep({pause})\n"
)
SAVES_ON_SIGTERM = textwrap.dedent("""
    import pathlib, signal, sys, time
    out = pathlib.Path(sys.argv[1])
    def save(signum, frame):
        time.sleep(4)  # a checkpoint that takes longer than Ray's default 3 s grace
        out.write_text("saved")
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    print("ready", flush=True)
    while True:
        time.sleep(0.2)
""")


@pytest.fixture(scope="module")
def job_address():
    from resources.ray_cluster import _free_port

    context = ray.init(
        num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=_free_port()
    )
    yield f"http://{context.dashboard_url}"
    ray.shutdown()


@pytest.fixture
def proxy(job_address):
    url = urlparse(job_address)
    blinking = BlinkingProxy(url.hostname, url.port)
    yield blinking
    blinking.close()


def _python(script: str, *args: str) -> str:
    return shlex.join([sys.executable, "-c", script, *args])


def _submit(client, entrypoint: str, **kwargs) -> str:
    return client.submit_job(entrypoint=entrypoint, **kwargs)


def _wait_for(client, job_id: str, wanted: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if (
            wanted in client.get_job_logs(job_id).splitlines()
        ):  # a whole line: the log also echoes the script
            return
        time.sleep(0.2)
    raise AssertionError(f"{wanted!r} never appeared in the log of {job_id}")


def test_a_five_second_blink_is_waited_out_and_the_job_is_never_stopped(job_address, proxy):
    direct = job_client(job_address)
    job_id = _submit(direct, _python(COUNT.format(n=24, pause=0.5)))
    _wait_for(direct, job_id, "line 2")
    client = job_client(proxy.address, request_timeout_s=2)
    lines: list[str] = []

    def blink():
        time.sleep(1.0)
        proxy.down()
        time.sleep(5.0)  # the given value: ~5 s without an answer
        proxy.up()

    threading.Thread(target=blink, daemon=True).start()
    outcome = watch_job(
        client, job_id, lines.append, timeout_s=120, poll_s=0.3, contact_timeout_s=20
    )
    assert outcome.status == "SUCCEEDED", outcome
    assert [line for line in lines if line.startswith("line ")] == [
        f"line {i}" for i in range(24)
    ]  # none lost


def test_contact_lost_past_the_timeout_leaves_the_job_running_and_re_attaching_follows_it(
    job_address, proxy
):
    direct = job_client(job_address)
    job_id = _submit(direct, _python(COUNT.format(n=30, pause=0.3)))
    _wait_for(direct, job_id, "line 1")
    client = job_client(proxy.address, request_timeout_s=1)
    proxy.down()
    start = time.monotonic()
    outcome = watch_job(
        client, job_id, lambda line: None, timeout_s=120, poll_s=0.3, contact_timeout_s=3
    )
    assert outcome.status == LOST_CONTACT and time.monotonic() - start < 15
    assert str(direct.get_job_status(job_id)) == "RUNNING"  # not stopped: we only lost contact
    proxy.up()
    lines: list[str] = []
    again = watch_job(
        job_client(proxy.address), job_id, lines.append, timeout_s=120, poll_s=0.3
    )  # re-attach by id
    assert again.status == "SUCCEEDED" and "line 29" in lines


def test_stop_returns_after_the_job_ended_and_its_checkpoint_on_sigterm_was_saved(
    job_address, tmp_path
):
    client = job_client(job_address)
    for grace, saved in (("10", True), (None, False)):  # ours (stop_timeout_s) vs Ray's default 3 s
        out = tmp_path / f"saved-{grace}"
        env = {"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": grace}} if grace else None
        job_id = _submit(client, _python(SAVES_ON_SIGTERM, str(out)), runtime_env=env)
        _wait_for(client, job_id, "ready")
        start = time.monotonic()
        final = stop_job(client, job_id, wait_s=30)
        assert final in ("STOPPED", "SUCCEEDED", "FAILED"), (
            final
        )  # a terminal status, not a request sent
        assert out.exists() is saved, (grace, time.monotonic() - start)
        if saved:
            assert time.monotonic() - start >= 4  # it waited for the handler, not 0.02 s
    running = _submit(client, _python(COUNT.format(n=100, pause=0.5)))
    _wait_for(client, running, "line 0")
    assert stop_job(client, running, wait_s=30) == "STOPPED"
    assert str(client.get_job_status(running)) == "STOPPED"


def test_a_job_stuck_pending_is_stopped_at_its_start_timeout(job_address):
    client = job_client(job_address)
    job_id = _submit(
        client, "echo never", entrypoint_num_gpus=1
    )  # this CPU cluster has no GPU: PENDING forever
    start = time.monotonic()
    outcome = watch_job(
        client,
        job_id,
        lambda line: None,
        timeout_s=48 * 3600,
        poll_s=0.3,
        start_timeout_s=3,
        stop_timeout_s=5,
    )
    assert (
        outcome.status == START_TIMED_OUT and time.monotonic() - start < 30
    )  # not the 48 h job limit
    assert f"Ray job {job_id} was still PENDING after the 3 s start limit" in outcome.message
    # Ray 2.60 cannot stop a job whose supervisor actor was never scheduled (its stop is a call on that
    # actor); the outcome says what the stop achieved, whichever it was
    final = str(client.get_job_status(job_id))
    assert f"stop: {final}" in outcome.message, (final, outcome.message)
