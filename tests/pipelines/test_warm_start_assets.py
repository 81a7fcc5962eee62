"""The warm start's assets in Dagster: ``rft_checkpoint`` and its merge on the test profile (scripted
policy, real episodes, a tiny config-built model), metadata included."""

from __future__ import annotations

import dagster as dg
import polars as pl
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM

from rewardbox.config.profile import PROFILE_DIR, load_profile
from rewardbox.episode.run import run_trials
from rewardbox.policy import build_policy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.tasks.sources import load_candidates
from tests.runtime.test_warm_start import tiny_base  # noqa: F401  (the fixture)


def test_rft_checkpoint_and_its_merge_materialise_with_their_metadata(tiny_base, tmp_path):  # noqa: F811
    from assets import warm_start
    from resources.rewardbox import RewardboxResource

    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    path = tmp_path / "warm.yaml"
    # lr 2e-2: at 5e-2 the last step overshot in some runs (tests/runtime/test_warm_start.py)
    path.write_text(yaml.safe_dump(data | {"rft": {"epochs": 3, "learning_rate": 2e-2}}))
    profile = load_profile(path)
    pool = load_candidates(profile.tasks).tasks[:3]
    probe, _ = run_trials(
        pool, 2, build_policy(profile.policy), campaign_parts(profile), keep_results=False
    )

    @dg.asset(name="training_pool")
    def training_pool() -> list:
        return pool

    @dg.asset(name="base_checkpoint")
    def base_checkpoint() -> str:
        return str(tiny_base)

    @dg.asset(name="probe_results")
    def probe_results() -> pl.DataFrame:
        return probe

    result = dg.materialize(
        [
            training_pool,
            base_checkpoint,
            probe_results,
            warm_start.rft_checkpoint,
            warm_start.rft_merged_checkpoint,
        ],
        resources={"rewardbox": RewardboxResource(profile=str(path), data_dir=str(tmp_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    metadata = result.asset_materializations_for_node("rft_checkpoint")[0].metadata
    successes = probe.filter(pl.col("passed").fill_null(False)).height
    assert metadata["trained"].value is True
    assert metadata["probe_successes"].value == metadata["reproduced"].value == successes
    assert metadata["logprob_after"].value > metadata["logprob_before"].value
    assert len(metadata["epoch_nll"].value) == profile.rft.epochs
    adapter = result.output_for_node("rft_checkpoint")
    merged = result.output_for_node("rft_merged_checkpoint")
    assert adapter.endswith("rft_adapter") and merged.endswith("rft_merged")
    import torch

    ids = torch.tensor([[1, 2, 3, 4]])
    base = AutoModelForCausalLM.from_pretrained(tiny_base)
    with torch.no_grad():
        expected = PeftModel.from_pretrained(base, adapter)(input_ids=ids).logits
        got = AutoModelForCausalLM.from_pretrained(merged)(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-5)
