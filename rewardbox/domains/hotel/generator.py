"""The hotel task generator: seeded templates -> a ThinkingBox-layout dataset.

Hotel bookings are a training domain, like retail: about one task in four of
every template (cancellations, room changes with manager approval, loyalty
credits) is a benchmark task, the rest are training candidates. To regenerate
the checked-in files byte for byte, run::

    python -m rewardbox.domains.hotel.generator --out rewardbox/domains/hotel/dataset

``RECIPE`` (a ``rewardbox.domains.dataset_writer.DatasetRecipe``) provides
``generate_tasks(seed)``, ``write_dataset(out, seed)`` and ``main``.
"""

from __future__ import annotations

from rewardbox.domains.dataset_writer import DatasetRecipe
from rewardbox.domains.hotel.builder import WorldBuilder
from rewardbox.domains.hotel.domain import DOMAIN
from rewardbox.domains.hotel.templates_trips import ALL_FAMILIES as FAMILIES

RECIPE = DatasetRecipe(
    domain=DOMAIN,
    families=FAMILIES,
    new_builder=WorldBuilder,
    default_seed=20250910,
    agent="a company travel desk agent",
    user="traveller",
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
