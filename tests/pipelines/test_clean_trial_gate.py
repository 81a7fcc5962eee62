"""A campaign or screen that cannot produce clean trials fails, and nothing downstream runs on it.

Probes: an endpoint policy whose every chat request answers HTTP 500 (it passes the preflight: it
lists its model) makes every probe trial a system error; ``probe_results`` fails naming the kind and
counts, ``task_difficulty`` does not run. Screening: a ``servers.yaml`` command that does not exist
makes every screening episode a system error; ``screened_candidates`` fails naming the cause (the
missing command), not only a check's name, and ``probe_results`` does not run.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR
from tests.evaluation.test_external_end_to_end import _dataset
from tests.fixtures.dagster_resources import failure_text, test_resources

pytestmark = pytest.mark.timeout(600)
MISSING = "/nonexistent/rewardbox-no-such-server"


@dg.asset(name="base_checkpoint", group_name="model")
def no_checkpoint() -> str:
    """The endpoint policy needs no checkpoint."""
    return ""


def _materialise(profile: dict, tmp_path: Path):
    from assets import selection, tasks

    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(profile))
    wanted = {"candidate_tasks", "screened_candidates", "probe_results", "task_difficulty"}
    assets = [
        a
        for a in dg.load_assets_from_modules([tasks, selection])
        if {k.to_user_string() for k in a.keys} <= wanted
    ]
    checks = [
        c
        for c in dg.load_asset_checks_from_modules([tasks, selection])
        if {k.asset_key.to_user_string() for k in c.check_keys} <= wanted
    ]
    result = dg.materialize(
        [*assets, no_checkpoint, *checks],
        resources=test_resources(str(path), tmp_path / "data"),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    failures = {e.step_key: failure_text(e) for e in result.all_events if e.is_step_failure}
    return (
        result,
        failures,
        {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()},
    )


def _test_profile() -> dict:
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    profile["tasks"]["candidates"] = [
        {"dataset": "embedded:retail", "test_list": "testlists/candidates.yaml", "limit": 2}
    ]
    profile["probe"] = {"trials": 2}
    return profile


def test_a_probe_of_nothing_but_system_errors_fails_and_stops_its_downstream(tmp_path, fake_openai):
    fake_openai.models = [
        "agent"
    ]  # the preflight passes; every chat request then answers 500 (the default)
    profile = _test_profile()
    profile["policy"] = {
        "kind": "endpoint",
        "base_url": fake_openai.base_url,
        "model": "agent",
        "max_retries": 0,
    }
    profile["episode"]["max_system_error_retries"] = 0
    result, failures, materialised = _materialise(profile, tmp_path)
    assert not result.success and {"candidate_tasks", "screened_candidates"} <= materialised
    assert "probe_results" not in materialised and "task_difficulty" not in materialised
    message = failures["probe_results"]
    assert (
        "probe_results: the campaign could not produce clean trials: 2 of 2 task(s) have no clean trial"
        in message
    )
    assert "4 of 4 trials (100%) are system errors, above system_errors.max_frac=0.2" in message
    assert "system errors by kind: endpoint_http_5xx x4" in message and "cause: " in message
    assert fake_openai.requests  # the episodes did run: the gate judged their outcome
    assert list(
        (tmp_path / "data" / "gate" / "campaigns").rglob("shard-*.parquet")
    )  # journal kept for a rerun


def test_a_servers_yaml_command_that_does_not_exist_fails_the_screen_naming_the_cause(tmp_path):
    root = _dataset(tmp_path / "dataset")
    (root / "servers.yaml").write_text(
        yaml.safe_dump(
            {"servers": {"rewardbox_retail": {"type": "mcp-process", "command": MISSING}}}
        )
    )
    profile = _test_profile()
    source = {"dataset": str(root), "servers": "servers.yaml"}
    profile["tasks"] = {
        "candidates": [{**source, "test_list": "candidates.yaml"}],
        "benchmark": [{**source, "test_list": "benchmark.yaml"}],
    }
    profile["sandbox"] = {"kind": "external", "tool_timeout_s": 30}
    result, failures, materialised = _materialise(profile, tmp_path)
    assert not result.success and "candidate_tasks" in materialised
    assert "screened_candidates" not in materialised and "probe_results" not in materialised
    message = failures["screened_candidates"]
    assert (
        "screened_candidates: the campaign could not produce clean trials: 3 of 3 task(s) have no clean trial"
        in message
    )
    assert "system errors by kind: sandbox_" in message and MISSING in message
