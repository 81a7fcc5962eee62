"""Which assets and checks the graph holds: the warm start's only when the profile enables it.

With ``rft.enabled`` (docs/warm_start.md) ``assets/warm_start.py`` adds ``rft_checkpoint``,
``rft_merged_checkpoint`` and ``rft_evaluation_results`` and replaces ``grpo_checkpoint`` (started from
the warm start's adapter) and ``reliability_report`` (three arms) by its versions of the same name.
Off (the default, every shipped profile), the graph is exactly the one without the warm start.
"""

from __future__ import annotations

import dagster as dg

from assets import evaluation, model, report, selection, tasks, training

BASE_MODULES = (tasks, model, selection, training, evaluation, report)
REPLACED_BY_WARM_START = frozenset({"grpo_checkpoint", "reliability_report"})


def asset_definitions(warm_start: bool) -> tuple[list, list]:
    """``(assets, asset checks)`` of the graph, with the warm start's when ``warm_start``."""
    assets = list(dg.load_assets_from_modules(list(BASE_MODULES)))
    checks = list(dg.load_asset_checks_from_modules(list(BASE_MODULES)))
    if not warm_start:
        return assets, checks
    from assets import warm_start as warm

    kept = [a for a in assets if not {k.to_user_string() for k in a.keys} & REPLACED_BY_WARM_START]
    return (
        kept + list(dg.load_assets_from_modules([warm])),
        checks + list(dg.load_asset_checks_from_modules([warm])),
    )
