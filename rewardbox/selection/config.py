"""Selection config: offline difficulty probes and how their results become a training pool.

Composed by the profile under ``probe:`` and ``selection:`` (``rewardbox.config.profile.Profile``).
``SelectionConfig`` lives with the band math it validates against (``rewardbox.selection.bands``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from rewardbox.selection.bands import SelectionConfig


class FamilyScreeningConfig(BaseModel):
    """Family-level screening of the probes (``rewardbox.selection.family_screening``; docs/learning_run.md,
    "A wider teachable pool").

    Attributes:
        first: instances probed per family in the first round (>= 1).
        more: further instances probed in the second round, only for families whose pooled clean
            counts after the first are mixed (0 < c < n) (>= 0; 0 means one round).
    """

    model_config = ConfigDict(extra="forbid")

    first: int = Field(2, ge=1)
    more: int = Field(4, ge=0)


class ProbeConfig(BaseModel):
    """Offline difficulty probes: n trials of each candidate with the base policy.

    Attributes:
        trials: n, probes per candidate task.
        import_results: a ``tb infer`` JSONL file (ThinkingBox ``DecodeResult`` rows) to use
            as the probe results instead of running probes (existing probe runs feed task
            selection without re-running them).
        family_screening: None (default) probes every candidate; set, the probes run in two rounds
            per family (:class:`FamilyScreeningConfig`) and candidates never probed get no rows.
            Live probes only: an error together with ``import_results``.

    When ``family_screening`` is None it is left out of the serialised config, so profiles without it
    keep the config hashes (``Profile.section_hash``, campaign journals) they had before the field existed.
    """

    model_config = ConfigDict(extra="forbid")

    trials: int = Field(8, ge=1)
    import_results: str | None = None
    family_screening: FamilyScreeningConfig | None = None

    @model_validator(mode="after")
    def _screening_runs_live(self) -> ProbeConfig:
        if self.family_screening is not None and self.import_results:
            raise ValueError(
                "probe.family_screening chooses which candidates to probe live; it cannot apply to "
                "probe.import_results (an imported run is used as it is): drop one of the two"
            )
        return self

    @model_serializer(mode="wrap")
    def _absent_screening_left_out(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if self.family_screening is None:
            data.pop("family_screening", None)
        return data


__all__ = ["FamilyScreeningConfig", "ProbeConfig", "SelectionConfig"]
