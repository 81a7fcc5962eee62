"""Live reference probes against a fake OpenAI-compatible endpoint: refills, exhausted refills, resume."""

from __future__ import annotations

import polars as pl

from rewardbox.config.profile import load_profile
from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.episode.journal import CampaignJournal
from rewardbox.policy.factory import build_policy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.reference import reference_verdicts
from rewardbox.selection.reference_config import ReferenceConfig
from rewardbox.selection.reference_probes import probe_reference, remaining_system_errors
from rewardbox.tasks.sources import load_candidates
from tests.fixtures.fake_reference import FakeReference


def _setup(tmp_path):
    profile = load_profile("test")
    profile = profile.model_copy(
        update={
            "data_dir": str(tmp_path),
            "episode": profile.episode.model_copy(
                update={"max_system_error_retries": 0, "concurrency": 2}
            ),
        }
    )
    tasks = sorted(load_candidates(profile.tasks).tasks, key=lambda t: t.uid)[:3]
    return profile, tasks


def _config(base_url: str, **fields) -> ReferenceConfig:
    policy = {
        "kind": "endpoint",
        "base_url": base_url,
        "model": "reference",
        "max_retries": 0,
        "max_timeout_retries": 0,
    }
    return ReferenceConfig(policy=policy, min_clean_runs=2, max_refill_rounds=2, **fields)


def test_system_errors_are_rerun_until_clean_or_out_of_rounds(tmp_path):
    profile, (flaky, wrong, broken) = _setup(tmp_path)
    fake = FakeReference(
        [flaky, wrong, broken],
        solvable={flaky.uid, broken.uid},
        flaky={flaky.uid},
        broken={broken.uid},
    )
    try:
        config = _config(fake.base_url)
        run = probe_reference(
            [flaky, wrong, broken], config, build_policy(config.policy), campaign_parts(profile)
        )
    finally:
        fake.close()
    rows = run.rows
    assert rows.select("uid", "trial").rows() == sorted(
        (t.uid, i) for t in (flaky, wrong, broken) for i in range(2)
    )
    by_uid = {uid: group for (uid,), group in rows.group_by("uid")}
    assert by_uid[flaky.uid]["passed"].to_list() == [True, True]  # its 503 was re-run, not scored
    assert by_uid[wrong.uid]["passed"].to_list() == [False, False]
    assert (
        by_uid[broken.uid]["system_error"].is_not_null().all()
    )  # still in error after both rounds
    assert (run.refill_rounds, run.refilled_system_errors) == (
        2,
        1 + 2 + 2,
    )  # round 1: 1 + 2 keys, round 2: 2
    assert remaining_system_errors(rows) == 2
    verdicts = dict(reference_verdicts(rows, config).select("uid", "verdict").iter_rows())
    assert verdicts == {flaky.uid: "passed", wrong.uid: "failed", broken.uid: "incomplete"}


def test_a_resumed_probe_reruns_only_what_has_no_clean_row(tmp_path):
    profile, tasks = _setup(tmp_path)
    journal = CampaignJournal.open(tmp_path / "journal", ROW_SCHEMA)
    fake = FakeReference(tasks, solvable={tasks[0].uid})
    try:
        config = _config(fake.base_url)
        first = probe_reference(
            tasks, config, build_policy(config.policy), campaign_parts(profile), journal=journal
        )
        requests_first = len(fake.requests)
        second = probe_reference(
            tasks, config, build_policy(config.policy), campaign_parts(profile), journal=journal
        )
    finally:
        fake.close()
    assert (
        requests_first > 0 and len(fake.requests) == requests_first
    )  # every key already clean: nothing re-run
    assert second.rows.equals(first.rows) and second.refill_rounds == 0
    assert first.rows.filter(pl.col("passed"))["uid"].unique().to_list() == [tasks[0].uid]
