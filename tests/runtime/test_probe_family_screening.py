"""``probe.family_screening`` wired into the probe stage (issue #23, "A wider teachable pool without leaks").

Real episodes (the embedded retail domain, the in-process sandbox, the real grader) with a scripted
policy that solves chosen tasks and does nothing on the others, so which families are mixed is known in
advance. The policy records every episode it starts (uid and trial from the first request's seed), so
"each (uid, trial) runs once" and "the resume does not replay round 1" are observed, not assumed.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.domains import registry
from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.episode.clean_trials import UncleanCampaignError
from rewardbox.errors import EndpointError
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.runtime.probe import probe
from rewardbox.runtime.select import training_pool
from rewardbox.runtime.stages import StageIO
from rewardbox.selection import task_difficulty
from rewardbox.selection.config import FamilyScreeningConfig
from rewardbox.tasks.thinkingbox import load_dataset

ADDRESS = [f"retail_address.py:test_retail_address_change_0{k}" for k in range(1, 5)]
CANCEL = [f"retail_cancel.py:test_retail_cancel_explicit_0{k}" for k in range(1, 5)]


class Chosen:
    """Golden replay on ``solves``, the null agent elsewhere; ``crash_on`` raises (a killed run),
    ``down_on`` is an endpoint outage (a system error). ``started`` is shared across instances."""

    name = "chosen"

    def __init__(self, started, base_seed, solves=(), crash_on=(), down_on=()):
        self.started, self.base_seed = started, base_seed
        self.solves, self.crash_on, self.down_on = set(solves), set(crash_on), set(down_on)
        self.closed = 0

    async def complete(self, request: ChatRequest) -> Completion:
        uid = request.task.uid
        if not any(m.get("role") == "assistant" for m in request.messages):
            self.started.append((uid, request.seed - self.base_seed))
        if uid in self.crash_on:
            raise RuntimeError("the probe process was killed")
        if uid in self.down_on:
            raise EndpointError("503 from the test endpoint")
        policy = GoldenReplayPolicy() if uid in self.solves else NullPolicy()
        return await policy.complete(request)

    async def aclose(self) -> None:
        self.closed += 1


class Lent:
    """A :class:`StageIO` lending ``make_policy`` (counted) and a local data directory."""

    def __init__(self, root, make):
        self.root, self.make, self.built = root, make, []

    def path(self, *parts):
        out = self.root.joinpath(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    @contextmanager
    def serve(self, profile, checkpoint, log):
        yield profile.policy

    def make_policy(self, checkpoint, config):
        self.built.append(self.make())
        return self.built[-1]

    def io(self) -> StageIO:
        return StageIO(
            path=self.path, log=lambda line: None, serve=self.serve, make_policy=self.make_policy
        )


@pytest.fixture(scope="module")
def candidates():
    """Two families of four: address_change (the first instance solvable) and cancel_explicit."""
    by_uid = {t.uid: t for t in load_dataset(registry.dataset_dir("retail")).tasks}
    return [by_uid[u] for u in ADDRESS + CANCEL]


def screening_profile(first=2, more=1):
    profile = load_profile("test")
    profile.episode.max_system_error_retries = 0
    profile.probe.trials = 2
    profile.probe.family_screening = (
        FamilyScreeningConfig(first=first, more=more) if first is not None else None
    )
    return profile


def keys(uids, trials=2):
    return sorted((u, t) for u in uids for t in range(trials))


def test_round_two_probes_only_the_mixed_family_and_every_trial_runs_once(candidates, tmp_path):
    profile, started = screening_profile(), []
    lent = Lent(tmp_path, lambda: Chosen(started, profile.episode.seed, solves=[ADDRESS[0]]))
    run = probe(profile, candidates, "ckpt", "input-1", lent.io())
    # round 1: two of each family; address_change is mixed (1st solved, 2nd not), cancel_explicit
    # all-fail; round 2: one more address_change instance only
    probed = ADDRESS[:3] + CANCEL[:2]
    assert sorted(started) == keys(probed) and len(started) == len(set(started)) == 10
    assert sorted(run.rows.select("uid", "trial").iter_rows()) == keys(probed)
    assert run.rows.schema == ROW_SCHEMA and run.rows.sort("uid", "trial").equals(run.rows)
    assert dict(run.rows.group_by("uid").agg(pl.col("passed").sum()).iter_rows()) == {
        **{u: 0 for u in probed},
        ADDRESS[0]: 2,
    }
    assert len(lent.built) == 1 and lent.built[0].closed == 1  # one policy for both rounds
    meta = run.metadata
    assert meta["family_screening"] == {
        "first": 2,
        "more": 1,
        "families": 2,
        "families_mixed": 1,
        "mixed_families": ["retail/address_change"],
        "tasks_probed_round_1": 4,
        "tasks_probed_round_2": 1,
        "candidates": 8,
        "candidates_unprobed": 3,
    }
    assert meta["tasks"] == 5 and meta["episodes"] == 10
    # the gate checked the probed tasks only: three candidates have no row and it still passed
    assert meta["clean_trial_gate"]["problems"] == [] and meta["clean_trial_gate"]["trials"] == 10
    assert not list((tmp_path / "campaigns").iterdir())  # journal discarded after the gate

    # downstream: a difficulty row per probed task only, and a pool drawn from those
    difficulty = task_difficulty(run.rows, profile.selection)
    assert sorted(difficulty["uid"]) == sorted(probed)
    pool = training_pool(profile, difficulty, run.rows.clear(), candidates).extra
    assert {t.uid for t in pool} <= set(probed)


def test_a_run_killed_in_round_two_resumes_without_replaying_round_one(candidates, tmp_path):
    profile, killed, resumed = screening_profile(), [], []
    base = profile.episode.seed
    crashing = Lent(tmp_path, lambda: Chosen(killed, base, [ADDRESS[0]], crash_on=[ADDRESS[2]]))
    with pytest.raises(RuntimeError, match="killed"):
        probe(profile, candidates, "ckpt", "input-1", crashing.io())
    round_one = keys(ADDRESS[:2] + CANCEL[:2])
    assert sorted(set(killed) - {(ADDRESS[2], 0), (ADDRESS[2], 1)}) == round_one
    assert list((tmp_path / "campaigns").iterdir())  # the journal survived the crash

    rerun = Lent(tmp_path, lambda: Chosen(resumed, base, solves=[ADDRESS[0]]))
    run = probe(profile, candidates, "ckpt", "input-1", rerun.io())
    assert sorted(resumed) == keys([ADDRESS[2]])  # round 1 came from the journal
    assert sorted(run.rows.select("uid", "trial").iter_rows()) == keys(ADDRESS[:3] + CANCEL[:2])
    assert run.metadata["family_screening"]["tasks_probed_round_2"] == 1


def test_the_gate_names_probed_tasks_without_a_clean_trial_never_unprobed_ones(
    candidates, tmp_path
):
    profile, started = screening_profile(), []
    down = Lent(
        tmp_path,
        lambda: Chosen(started, profile.episode.seed, [ADDRESS[0]], down_on=[CANCEL[1]]),
    )
    with pytest.raises(UncleanCampaignError) as caught:
        probe(profile, candidates, "ckpt", "input-1", down.io())
    verdict = caught.value.verdict
    assert verdict.tasks_without_clean_trial == [CANCEL[1]]
    assert verdict.trials == 10 and verdict.system_errors == 2
    assert "1 of 5 task(s) have no clean trial" in str(caught.value)


def test_without_the_field_every_candidate_is_probed_as_before(candidates, tmp_path):
    """Absent ``family_screening``: every candidate x trial, no screening metadata; the rows equal a
    screening whose first round already covers every instance (the same trials, seeds and outcomes)."""
    tasks = candidates[:2] + candidates[4:6]
    outcome = ["uid", "trial", "passed", "reward", "termination_reason", "turns"]
    runs = {}
    for first in (None, 4):
        profile, started = screening_profile(first=first), []
        make = partial(Chosen, started, profile.episode.seed, [ADDRESS[0]])
        lent = Lent(tmp_path / str(first), make)
        runs[first] = (probe(profile, tasks, "ckpt", "input-1", lent.io()), started)
    plain, plain_started = runs[None]
    assert sorted(plain_started) == keys(t.uid for t in tasks)
    assert "family_screening" not in plain.metadata and plain.metadata["tasks"] == 4
    assert plain.rows.select(outcome).equals(runs[4][0].rows.select(outcome))
    assert runs[4][0].metadata["family_screening"]["candidates_unprobed"] == 0
