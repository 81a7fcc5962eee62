"""rewardbox: executable checks of terminal database state as RL rewards.

The engine package. It never imports dagster; the Dagster layer lives in the
top-level packages ``assets``, ``resources``, ``sensors`` and ``pipelines``.
"""

__version__ = "0.1.0"

# OpenMP reads its wait policy once, when torch loads it: set it before any rewardbox module imports torch
# (rewardbox.threads, docs/performance.md "Threads").
from rewardbox.threads import set_wait_policy_env as _set_wait_policy_env  # noqa: E402

_set_wait_policy_env()
