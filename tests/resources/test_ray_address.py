"""Which cluster ``ray.init`` joins (issue 24, kind 8): the default is private whatever the environment says.

A real ``ray start --head`` runs on the machine (its own port and temp dir, stopped after), and
``RAY_ADDRESS`` points at it, as on a machine where someone started Ray: the embedded default
and ``address: local`` still start a private Ray with the configured CPUs; an explicit address
and ``auto`` join the head. Every connection records the cluster it joined.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

ray = pytest.importorskip("ray")

from rewardbox.config.profile import PROFILE_DIR, load_profile  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def _profile(tmp_path, **executor):
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["executor"] = {
        "kind": "ray",
        "num_cpus": 2,
        "workers": 1,
        "worker_num_cpus": 0.5,
        **executor,
    }
    path = tmp_path / f"ray-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


def test_init_options_by_address(tmp_path):
    from resources.ray_cluster import RayClusterResource

    default = RayClusterResource().init_options(_profile(tmp_path))
    assert (
        default["address"] == "local"
        and default["num_cpus"] == 2
        and default["include_dashboard"] is False
    )
    local = RayClusterResource().init_options(_profile(tmp_path, address="local", num_cpus=3))
    assert (
        local["address"] == "local" and local["num_cpus"] == 3
    )  # the given value: the CPU count is honoured
    for address in ("ray://head:10001", "10.0.0.5:6379", "auto"):
        joined = RayClusterResource(
            address=address, ray_init_options={"num_cpus": 4, "num_gpus": 1}
        )
        options = joined.init_options(_profile(tmp_path))
        assert (
            options["address"] == address
            and "num_cpus" not in options
            and "num_gpus" not in options
        )


@pytest.fixture(scope="module")
def ray_start_head():
    """A ``ray start --head --block`` of this test only (127.0.0.1, a free port, a temp dir); its GCS address."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    temp_dir = tempfile.mkdtemp(prefix="/tmp/rb24b")  # short: Ray's unix sockets live under it
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and head.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        assert head.poll() is None, head.communicate(timeout=10)[0][-3000:]
        time.sleep(3)  # the raylet registers after the GCS listens
        yield address
    finally:
        os.killpg(
            head.pid, signal.SIGTERM
        )  # the group this test started: the head and its Ray processes
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


class _Context:
    """What the resource uses of an asset's context: a log and the output metadata."""

    def __init__(self):
        self.metadata, self.lines = {}, []
        self.log = self

    def info(self, line):
        self.lines.append(line)

    def add_output_metadata(self, metadata):
        self.metadata.update(metadata)


def _join(profile, **resource) -> dict:
    """Connect as an asset's step does; the cluster recorded in the asset's metadata. Disconnects after."""
    from resources.ray_cluster import RayClusterResource

    context = _Context()
    with dg.build_resources({"ray_cluster": RayClusterResource(**resource)}) as resources:
        resources.ray_cluster.executor(profile, context)
        assert ray.is_initialized()
    assert not ray.is_initialized()
    return context.metadata["ray_cluster"].value


@pytest.mark.slow  # a `ray start` head and four connections: minutes on a loaded machine
def test_the_default_and_local_are_private_and_an_address_or_auto_joins_the_head(
    tmp_path, monkeypatch, ray_start_head
):
    head_port = ray_start_head.rsplit(":", 1)[1]  # Ray reports the node's own IP, not 127.0.0.1

    def port(cluster):
        return cluster["gcs_address"].rsplit(":", 1)[1]

    monkeypatch.setenv(
        "RAY_ADDRESS", ray_start_head
    )  # the given case: RAY_ADDRESS set, a `ray start` head up
    private = _join(
        _profile(tmp_path)
    )  # before: "When connecting to an existing cluster, num_cpus ... must not be provided"
    assert port(private) != head_port and private["nodes"] == 1 and private["resources"]["CPU"] == 2
    assert (
        private["requested_address"] == "local" and os.environ["RAY_ADDRESS"] == ray_start_head
    )  # restored
    local = _join(
        _profile(tmp_path, address="local", num_cpus=3)
    )  # before: timed out, and ignored num_cpus
    assert port(local) != head_port and local["resources"]["CPU"] == 3
    explicit = _join(_profile(tmp_path, address=ray_start_head))
    assert port(explicit) == head_port and explicit["resources"]["CPU"] == 1  # the head's own CPUs
    auto = _join(
        _profile(tmp_path), address="auto"
    )  # the resource's address wins over the profile's
    assert port(auto) == head_port and auto["requested_address"] == "auto"
