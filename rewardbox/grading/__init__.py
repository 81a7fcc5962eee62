"""Grading: canonical terminal state, the reward rule (``reward``), the test runner and the judge.

Nothing is imported here: ``rewardbox.grading.reward`` is imported by generated test files inside
the upstream harness, where only the standard library can be counted on.
"""
