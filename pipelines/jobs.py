"""Jobs: the main job (every stage), re-probing, re-screening, checkpoint evaluation.

Every job carries the run tags of :func:`rewardbox.config.provenance.run_tags` (profile, config hash,
code version, git commit) and the resource tags the Postgres instance's run queue limits
concurrency on (``rewardbox/gpu_cluster`` for runs that sample from or train the local model, one
``rewardbox/*_endpoint`` tag per endpoint a run calls); see ``dagster.postgres.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import dagster as dg

MAIN_ASSETS = dg.AssetSelection.all() - dg.AssetSelection.assets("checkpoint_evaluation_results")

#: What each job's runs do, for the resource tags: (samples from the policy, trains the policy).
JOB_WORKLOADS: dict[str, tuple[bool, bool]] = {
    "main_job": (True, True),
    "reprobe_job": (True, False),
    "rescreen_job": (False, False),
    "checkpoint_evaluation_job": (True, False),
}


def build_jobs(
    tags_for: Callable[[bool, bool], Mapping[str, str]] | None = None,
) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """The project's jobs, by name.

    Args:
        tags_for: ``(samples_policy, trains) -> run tags`` for a job whose runs do that
            (``pipelines.definitions`` passes the profile's provenance tags); ``None`` for no tags.

    Returns:
        ``main_job``, ``reprobe_job``, ``rescreen_job`` and ``checkpoint_evaluation_job``.
    """

    def tags(name: str) -> dict[str, str]:
        return dict(tags_for(*JOB_WORKLOADS[name])) if tags_for else {}

    return {
        "main_job": dg.define_asset_job(
            "main_job",
            selection=MAIN_ASSETS,
            tags=tags("main_job"),
            description="Every stage on the profile's tasks: tasks -> probes -> pool -> GRPO -> evaluation -> report.",
        ),
        "reprobe_job": dg.define_asset_job(
            "reprobe_job",
            selection=dg.AssetSelection.assets("probe_results", "task_difficulty", "training_pool"),
            tags=tags("reprobe_job"),
            description="Re-probe the candidates with the current policy and rebuild the training pool.",
        ),
        "rescreen_job": dg.define_asset_job(
            "rescreen_job",
            selection=dg.AssetSelection.assets(
                "candidate_tasks", "benchmark_tasks", "screened_candidates"
            ),
            tags=tags("rescreen_job"),
            description="Reload and re-screen the task sources after they changed.",
        ),
        "checkpoint_evaluation_job": dg.define_asset_job(
            "checkpoint_evaluation_job",
            selection=dg.AssetSelection.assets("checkpoint_evaluation_results"),
            tags=tags("checkpoint_evaluation_job"),
            description="Evaluate one incoming checkpoint (a dynamic partition) on the benchmark.",
        ),
    }
