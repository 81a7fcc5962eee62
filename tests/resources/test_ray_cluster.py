"""The Ray cluster resource: local default never starts Ray; ``executor.kind: ray`` runs assets on Ray."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

ray = pytest.importorskip("ray")

from rewardbox.config.profile import PROFILE_DIR, load_profile  # noqa: E402
from rewardbox.episode.executor import LocalExecutor  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _ray_profile(tmp_path, **executor):
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["executor"] = {
        "kind": "ray",
        "num_cpus": 2,
        "workers": 1,
        "worker_num_cpus": 0.5,
        **executor,
    }
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_local_profile_gets_the_local_executor_and_never_starts_ray():
    from resources.ray_cluster import RayClusterResource

    with dg.build_resources({"ray_cluster": RayClusterResource()}) as resources:
        executor = resources.ray_cluster.executor(load_profile("test"))
        assert isinstance(executor, LocalExecutor) and executor.concurrency == 4
        assert not ray.is_initialized()


def test_init_options_address_runtime_env_and_embedded_cpus(tmp_path):
    from resources.ray_cluster import RayClusterResource

    profile = load_profile(
        _ray_profile(tmp_path, runtime_env={"env_vars": {"A": "1"}, "working_dir": "."})
    )
    embedded = RayClusterResource().init_options(profile)
    assert (
        embedded["address"] == "local" and embedded["num_cpus"] == 2
    )  # private, whatever RAY_ADDRESS says and embedded["include_dashboard"] is False
    assert embedded["runtime_env"] == {"env_vars": {"A": "1"}, "working_dir": "."}
    remote = RayClusterResource(
        address="ray://head:10001", runtime_env={"env_vars": {"B": "2"}}
    ).init_options(profile)
    assert (
        remote["address"] == "ray://head:10001" and "num_cpus" not in remote
    )  # a cluster has its own CPUs
    assert remote["runtime_env"]["env_vars"] == {
        "B": "2"
    }  # the resource's runtime_env wins key by key


def test_ray_profile_screens_on_ray_and_the_resource_shuts_ray_down(tmp_path):
    """A real materialisation of ``benchmark_tasks`` (screening) on embedded Ray; teardown disconnects."""
    from assets import evaluation, model, report, selection, tasks, training
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    modules = [tasks, model, selection, training, evaluation, report]
    resources = {
        "rewardbox": RewardboxResource(profile=str(_ray_profile(tmp_path)), data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(
        temp_dir=str(tmp_path / "home")
    ) as instance:  # a live instance of its own
        result = dg.materialize(
            [*dg.load_assets_from_modules(modules), *dg.load_asset_checks_from_modules(modules)],
            selection="benchmark_tasks",
            resources=resources,
            instance=instance,
        )
    assert result.success
    assert result.get_asset_materialization_events()[0].materialization.metadata["tasks"].value == 6
    assert not ray.is_initialized()  # the resource's cleanup disconnected (ray.shutdown)
