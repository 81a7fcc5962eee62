"""Selection config: offline difficulty probes and how their results become a training pool.

Composed by the profile under ``probe:`` and ``selection:`` (``rewardbox.config.profile.Profile``).
``SelectionConfig`` lives with the band math it validates against (``rewardbox.selection.bands``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rewardbox.selection.bands import SelectionConfig


class ProbeConfig(BaseModel):
    """Offline difficulty probes: n trials of each candidate with the base policy.

    Attributes:
        trials: n, probes per candidate task.
        import_results: a ``tb infer`` JSONL file (ThinkingBox ``DecodeResult`` rows) to use
            as the probe results instead of running probes (existing probe runs feed task
            selection without re-running them).
    """

    model_config = ConfigDict(extra="forbid")

    trials: int = Field(8, ge=1)
    import_results: str | None = None


__all__ = ["ProbeConfig", "SelectionConfig"]
