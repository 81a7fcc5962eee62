"""The IT helpdesk task generator: seeded templates -> a ThinkingBox-layout dataset.

Helpdesk is the held-out, out-of-distribution benchmark domain: none of its
tasks is a training candidate, so ``testlists/benchmark.yaml`` and
``testlists/all.yaml`` both list every task. Regenerate with::

    python -m rewardbox.domains.helpdesk.generator --out rewardbox/domains/helpdesk/dataset

``generate_tasks``, ``write_dataset`` and ``main`` come from ``RECIPE``, the
domain's ``rewardbox.domains.dataset_writer.DatasetRecipe``.
"""

from __future__ import annotations

from rewardbox.domains.dataset_writer import DatasetRecipe
from rewardbox.domains.helpdesk.builder import WorldBuilder
from rewardbox.domains.helpdesk.domain import DOMAIN
from rewardbox.domains.helpdesk.templates import FAMILIES

RECIPE = DatasetRecipe(
    domain=DOMAIN,
    families=FAMILIES,
    new_builder=WorldBuilder,
    default_seed=20250310,
    agent="an IT helpdesk agent",
    user="employee",
    held_out=True,
    description=__doc__.splitlines()[0],
)
DEFAULT_SEED, generate_tasks, write_dataset, main = (
    RECIPE.default_seed,
    RECIPE.generate_tasks,
    RECIPE.write_dataset,
    RECIPE.main,
)

if __name__ == "__main__":
    main()
