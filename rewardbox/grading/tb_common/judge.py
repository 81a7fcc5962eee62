"""``thinkingbox.common.judge``: the ``judge`` fixture and its exception.

``Judge`` offers ``text_yesno``, ``text_yesno_with_motivation``, ``yesno``,
``compare_yesno``, ``no_repeat``, ``evaluate_bool`` and ``drain_decisions``;
every endpoint fault is a ``JudgeException`` (a system error, never a fail).
"""

from rewardbox.grading.judge import Judge, JudgeException, escape_tags, parse_yesno

safe_tag_encode = escape_tags

__all__ = ["Judge", "JudgeException", "parse_yesno", "safe_tag_encode"]
