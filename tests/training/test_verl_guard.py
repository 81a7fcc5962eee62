"""``verl.extra_overrides`` that would lift the refill bound are refused when the profile loads (issue 24, kind 6)."""

from __future__ import annotations

import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR, load_profile
from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.guard import REFILL_KEY, flat_overrides, refill_bound_problems
from rewardbox.training.verl.job import prepare_launch
from rewardbox.training.verl.sampler import SAMPLER_NAME, SAMPLER_PATH


def _profile(tmp_path, overrides, rounds=2):
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["grpo"] = {**data["grpo"], "backend": "verl", "max_refill_rounds": rounds}
    data["verl"] = {"extra_overrides": overrides}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_given_override_zero_is_refused_when_the_profile_loads(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"max_num_gen_batches=0: the refill bound is grpo.max_refill_rounds \+ 1 = 3"
        r" \(<= 0 is no bound at all in verl",
    ):
        load_profile(_profile(tmp_path, {REFILL_KEY: 0}))


@pytest.mark.parametrize(
    "overrides",
    [
        {REFILL_KEY: -1},  # negative: verl's "no limit" too
        {REFILL_KEY: 4},  # beyond our bound (3)
        {REFILL_KEY: 1000},
        {REFILL_KEY: None},  # null
        {REFILL_KEY: True},  # a bool is not a count (True == 1 in Python)
        {f"++{REFILL_KEY}": 0},  # Hydra's force-add prefix
        {"algorithm.filter_groups": {"max_num_gen_batches": 0}},  # a dict value on the parent node
        {"algorithm": {"filter_groups": {"max_num_gen_batches": 9}}},
        {"algorithm.filter_groups": None},  # the whole node replaced
        {
            "trainer.v1.sampler.custom_sampler.path": None
        },  # verl's own buffer, which ignores the bound
        {"trainer.v1.sampler.custom_sampler": None},
        {"trainer.v1.sampler.sampler_kwargs.max_num_gen_batches": 0},
        {"++trainer.v1.sampler.sampler_kwargs": {"train_batch_size": 1}},
        {"trainer.v1.sampler": None},
    ],
)
def test_every_override_that_lifts_or_loosens_the_bound_is_refused(tmp_path, overrides):
    assert refill_bound_problems(overrides, 2)
    with pytest.raises(ValueError, match="verl.extra_overrides sets"):
        load_profile(_profile(tmp_path, overrides))


def test_overrides_that_keep_the_bound_load(tmp_path):
    kept = {
        REFILL_KEY: 3,
        "trainer.v1.sampler.custom_sampler.path": SAMPLER_PATH,
        "trainer.v1.sampler.custom_sampler.name": SAMPLER_NAME,
        "trainer.save_freq": 5,
        "trainer.v1.sampler.sync_refill_failed_groups": True,  # a sibling, not the bound
        "algorithm.filter_groups.metric": "reward",
    }
    assert refill_bound_problems(kept, 2) == []
    assert load_profile(_profile(tmp_path, kept)).verl.extra_overrides == kept
    assert load_profile(_profile(tmp_path, {REFILL_KEY: 1}, rounds=0)).grpo.max_refill_rounds == 0


def test_several_problems_are_all_named_and_flattening_is_hydras():
    problems = refill_bound_problems(
        {REFILL_KEY: 0, "trainer.v1.sampler.custom_sampler.name": "X"}, 1
    )
    assert len(problems) == 2 and "custom_sampler.name='X'" in problems[1]
    assert flat_overrides({"++a.b": {"c": 1, "d": {"e": 2}}, "f": {}}) == {
        "a.b.c": 1,
        "a.b.d.e": 2,
        "f": {},
    }


def test_the_launch_refuses_too_when_the_config_did_not_come_from_a_profile(tmp_path):
    cfg = VerlBackendConfig(
        extra_overrides={REFILL_KEY: 0}
    )  # built directly, never validated with grpo
    with pytest.raises(ValueError, match="the refill bound is grpo.max_refill_rounds"):
        prepare_launch(
            GRPOConfig(),
            cfg,
            ["a/1"],
            "/models/base",
            tmp_path,
            rows_fn=lambda tasks: [{"prompt": "x"}],
            agent_fn=lambda d: {},
        )
