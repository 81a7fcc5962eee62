"""Our stand-in for ``thinkingbox.common``: the names ThinkingBox test code imports.

Inside grading, :func:`rewardbox.grading.context.install_thinkingbox_shim`
registers this package as ``thinkingbox.common`` and each entry of
:data:`SUBMODULES` as ``thinkingbox.common.<name>``, so test files written for
the upstream harness run unchanged (docs/thinkingbox.md, "Test code"). The
module layout and the names follow the upstream package's test-facing surface;
the code is ours. Not mirrored (a test importing it is a permanent system
error): the session-proxy client (``SessionClientFixture``), LLM sessions, the
hydrator and the CLI.
"""

from rewardbox.grading.tb_common import chat_types, config_types, judge, rubrics_judge
from rewardbox.grading.tb_common.chat_types import TestContext, ToolCallResponse
from rewardbox.grading.tb_common.judge import Judge, JudgeException

__rewardbox_shim__ = True

SUBMODULES = {
    "chat_types": chat_types,
    "judge": judge,
    "rubrics_judge": rubrics_judge,
    "config_types": config_types,
}
"""``thinkingbox.common.<name>`` -> the module that stands in for it."""

__all__ = ["Judge", "JudgeException", "TestContext", "ToolCallResponse", "SUBMODULES"]
