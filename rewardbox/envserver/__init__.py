"""An OpenEnv environment server for the embedded domains and ThinkingBox datasets.

A training loop drives episodes over OpenEnv's WebSocket protocol:
``reset(task_uid=...)`` -> observation (system prompts, query, tool schemas);
``step(action)`` -> observation (tool results or the simulated user's reply),
reward, done. Rewards come from the task's test on the terminal state (the
grading path of evaluation); infrastructure faults are reported as
``status="system_error"`` with no reward. Needs the ``env`` extra
(``pip install -e '.[env]'``, which brings ``openenv-core``).

    python -m rewardbox.envserver --domain retail --port 8000

See ``docs/environment_server.md``.
"""

try:
    import openenv.core  # noqa: F401
except ImportError as exc:  # a clear message instead of a bare "No module named 'openenv'"
    raise ImportError(
        "rewardbox.envserver needs the 'env' extra (openenv-core): pip install -e '.[env]'"
    ) from exc

from rewardbox.envserver.models import (
    RewardboxAction,
    RewardboxObservation,
    RewardboxState,
    ToolCallAction,
)

__all__ = ["RewardboxAction", "RewardboxObservation", "RewardboxState", "ToolCallAction"]
