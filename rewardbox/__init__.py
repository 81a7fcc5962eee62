"""rewardbox: executable checks of terminal database state as RL rewards.

The engine package. It never imports dagster; the Dagster layer lives in the
top-level packages ``assets``, ``resources``, ``sensors`` and ``pipelines``.
"""

__version__ = "0.1.0"
