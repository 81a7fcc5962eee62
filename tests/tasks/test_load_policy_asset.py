"""A candidate set that fails its load policy fails the asset and keeps the last good output."""

from __future__ import annotations

import shutil

import dagster as dg
import yaml

from rewardbox.config.profile import PROFILE_DIR
from rewardbox.tasks.sources import resolve_dataset


def test_failed_load_keeps_the_last_good_materialization(tmp_path):
    from assets.tasks import candidate_tasks
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    hotel = tmp_path / "hotel"
    shutil.copytree(resolve_dataset("embedded:hotel"), hotel)
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    for source in [*profile["tasks"]["candidates"], *profile["tasks"]["benchmark"]]:
        if source["dataset"] == "embedded:hotel":
            source.update(dataset=str(hotel), name="hotel")
    profile_path = tmp_path / "broken_hotel.yaml"
    profile_path.write_text(yaml.safe_dump(profile))
    resources = {
        "rewardbox": RewardboxResource(profile=str(profile_path), data_dir=str(tmp_path / "data")),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    stored = tmp_path / "objects" / "candidate_tasks"
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home"), set_dagster_home=False) as instance:
        good = dg.materialize([candidate_tasks], resources=resources, instance=instance)
        assert good.success and len(good.output_for_node("candidate_tasks")) == 10
        before = (stored.read_bytes(), stored.stat().st_mtime_ns)

        path = hotel / "test_case" / "hotel_cancel.py"
        lines = path.read_text().split("\n")
        lineno = next(i for i, line in enumerate(lines, 1) if "validate_database(x, SRV)" in line)
        lines[lineno - 1] += " ((("
        path.write_text("\n".join(lines))
        bad = dg.materialize(
            [candidate_tasks], resources=resources, instance=instance, raise_on_error=False
        )

        assert not bad.success
        failure = bad.get_step_failure_events()[0].step_failure_data.error.cause
        assert (
            "TaskSetLoadError" in failure.cls_name
            and f"{path}:{lineno}: not valid Python" in failure.message
        )
        assert (
            stored.read_bytes(),
            stored.stat().st_mtime_ns,
        ) == before  # the last good output is kept
        latest = instance.get_latest_materialization_event(dg.AssetKey("candidate_tasks"))
        assert latest.run_id == good.run_id  # and it is still the current materialization
