"""What test code and the grader agree on: the name a test's code binds, and the graded result.

``TestOutcome`` (ThinkingBox's ``TestResult``) lives in grading because grading
makes it; the episode layer only carries it (``EpisodeResult.test_outcome``).
``rewardbox.episode.trajectory`` re-exports it for older imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TEST_FN_BINDING = "__tb_test_fn"
"""The name a test's code binds its test function to (upstream ``TEST_CASE_FN_NAME``)."""


@dataclass
class TestOutcome:
    """The graded result of one episode (docs/thinkingbox.md, "Test code").

    Attributes:
        result: True when the test passed.
        reward: the reward in [0, 1] (1.0 for a pass without a returned number).
        is_system_error: a grader fault, never a reward of 0 for the policy; the
            episode is retried or refilled unless ``permanent``.
        permanent: a system error that a retry cannot fix (see ``rewardbox.errors``).
        system_error_kind: ``"<component>_<cause>"`` of a system error, e.g. ``"grader_error"``.
        message: why the test failed (the assertion message) or errored.
        tb: the formatted traceback, when the test raised.
        lineno: the line of the test code that raised (1-based), when known.
        line_content: the text of that line.
        prints: what the test printed.
        metadata: what the test wrote into ``x.metadata`` plus the judge's decisions.
    """

    __test__ = False  # not a pytest class

    result: bool
    reward: float
    is_system_error: bool = False
    permanent: bool = False
    system_error_kind: str | None = None
    message: str = ""
    tb: str = ""
    lineno: int | None = None
    line_content: str = ""
    prints: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
