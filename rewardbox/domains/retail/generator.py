"""The retail task generator: seeded templates -> a ThinkingBox-layout dataset.

Retail is a training domain: ``testlists/benchmark.yaml`` takes about one task
in four of every template and ``candidates.yaml`` the rest. Regenerate the
checked-in dataset byte for byte with::

    python -m rewardbox.domains.retail.generator --out rewardbox/domains/retail/dataset

``generate_tasks(seed)`` (the specs; the oracle tests use them directly),
``write_dataset(out, seed)`` and ``main`` are those of ``RECIPE``
(``rewardbox.domains.dataset_writer.DatasetRecipe``).
"""

from __future__ import annotations

from rewardbox.domains.dataset_writer import DatasetRecipe
from rewardbox.domains.retail.builder import WorldBuilder
from rewardbox.domains.retail.domain import DOMAIN
from rewardbox.domains.retail.templates_depth import FAMILIES

RECIPE = DatasetRecipe(
    domain=DOMAIN,
    families=FAMILIES,
    new_builder=WorldBuilder,
    default_seed=20250615,
    agent="a customer support agent",
    user="customer",
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
