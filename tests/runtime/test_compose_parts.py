"""``rewardbox.runtime.compose.campaign_parts``: the explicit parts below runtime, and the sandbox report hook."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.domains import registry
from rewardbox.episode.budget import TurnBudgetError, check_policy_budget
from rewardbox.episode.parts import CampaignParts
from rewardbox.runtime import compose
from rewardbox.runtime.stages import SandboxReports
from rewardbox.tasks.thinkingbox import load_dataset


def test_campaign_parts_carry_the_profile_sections_and_pickle_for_ray_workers():
    profile = load_profile("test")
    parts = compose.campaign_parts(profile, SandboxReports())
    assert isinstance(parts, CampaignParts)
    assert parts.episode == profile.episode and parts.executor == profile.executor
    lifted = parts.with_episode(max_agent_turns=profile.episode.max_agent_turns + 7)
    assert lifted.episode.max_agent_turns == profile.episode.max_agent_turns + 7
    assert (
        parts.episode.max_agent_turns == profile.episode.max_agent_turns
    )  # a copy, the original unchanged
    factory = pickle.loads(
        pickle.dumps(lifted.runner_factory())
    )  # what a Ray executor ships to its workers
    assert factory.keywords["episode"].max_agent_turns == lifted.episode.max_agent_turns


def test_the_runner_gets_the_parts_episode_config():
    profile = load_profile("test")
    parts = compose.campaign_parts(profile).with_episode(max_agent_turns=41)

    async def main():
        async with parts.runner_factory()(object()) as runner:
            return runner.config.max_agent_turns

    assert asyncio.run(main()) == 41


class ReportingFactory:
    """A sandbox factory with a per-server report, as ``ExternalSandboxFactory`` has."""

    def __init__(self, report):
        self._report, self.closed = report, False

    def __call__(self):
        raise AssertionError("no episode runs in this test")

    def report(self):
        return self._report

    async def aclose(self):
        self.closed = True


def test_the_sandbox_report_reaches_the_stage_when_a_runner_closes(monkeypatch):
    reports = [
        {
            "retail": {"start": "template", "reuse": "trusted"},
            "(pool)": {"spawned": 2, "reused": 5},
        },
        {
            "retail": {"reuse": "retired", "retired": "state differs"},
            "(pool)": {"spawned": 1, "reused": 0},
        },
    ]
    factories = iter(ReportingFactory(r) for r in reports)
    monkeypatch.setattr(compose, "build_sandbox", lambda profile: next(factories))
    collected = SandboxReports()
    parts = compose.campaign_parts(load_profile("test"), collected)

    async def open_and_close():
        async with parts.runner_factory()(object()):
            pass

    asyncio.run(open_and_close())
    asyncio.run(open_and_close())
    assert collected.metadata() == {
        "sandbox_servers": {
            "retail": {"start": "template", "reuse": "retired", "retired": "state differs"},
            "(pool)": {"spawned": 3, "reused": 5},
        }
    }
    assert SandboxReports().metadata() == {}


def test_the_budget_check_reads_the_episode_config_not_a_profile():
    class Sampler:
        samples_from_a_model = True

    deep = [
        t
        for t in load_dataset(registry.dataset_dir("retail")).tasks
        if len(t.golden_interactions()) >= 3
    ][:1]
    episode = load_profile("test").episode.model_copy(
        update={"max_agent_turns": 1, "max_agent_steps_per_user_turn": 1}
    )
    with pytest.raises(TurnBudgetError):
        check_policy_budget(Sampler(), episode, deep)
    check_policy_budget(object(), episode, deep)  # a scripted policy is exempt
