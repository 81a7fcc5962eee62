"""Jobs: the main job (every stage), re-probing, re-screening, checkpoint evaluation."""

from __future__ import annotations

import dagster as dg

MAIN_ASSETS = dg.AssetSelection.all() - dg.AssetSelection.assets("checkpoint_evaluation_results")

main_job = dg.define_asset_job(
    "main_job", selection=MAIN_ASSETS,
    description="Every stage on the profile's tasks: tasks -> probes -> pool -> GRPO -> evaluation -> report.",
)
reprobe_job = dg.define_asset_job(
    "reprobe_job", selection=dg.AssetSelection.assets("probe_results", "task_difficulty", "training_pool"),
    description="Re-probe the candidates with the current policy and rebuild the training pool.",
)
rescreen_job = dg.define_asset_job(
    "rescreen_job", selection=dg.AssetSelection.assets("candidate_tasks", "benchmark_tasks", "screened_candidates"),
    description="Reload and re-screen the task sources after they changed.",
)
checkpoint_evaluation_job = dg.define_asset_job(
    "checkpoint_evaluation_job", selection=dg.AssetSelection.assets("checkpoint_evaluation_results"),
    description="Evaluate one incoming checkpoint (a dynamic partition) on the benchmark.",
)
