"""``ReferenceConfig``: the reference-policy gate of the training pool (docs/method.md, "Reference screening").

A strong reference policy probes every screened candidate; a task may enter the
training pool only when the reference solved it. The profile's ``reference:``
section is absent by default, and then the gate is off.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardbox.policy.config import PolicyConfig


class ReferenceConfig(BaseModel):
    """Where the reference results come from and the rule a task must pass.

    Exactly one source: ``policy`` (an OpenAI-compatible endpoint probed live)
    or ``import_results`` (an existing ``tb infer`` run).

    Attributes:
        policy: an endpoint policy (``kind: endpoint``, ``base_url``, ``model``, ...;
            the fields of ``PolicyConfig``). It samples with the profile's ``episode``
            settings (``max_new_tokens``, ``temperature``), as probes do.
        import_results: a ``tb infer`` JSONL file (ThinkingBox ``DecodeResult`` rows)
            holding the reference's trials; nothing is run.
        min_clean_runs: clean runs (system errors excluded) the reference gets per
            task; live probing runs this many trials and re-runs system-error
            trials (``max_refill_rounds``). A task with fewer clean runs has no
            verdict unless its successes already reach ``min_successes``.
        min_successes: successes the counts rule needs among the first
            ``min_clean_runs`` clean runs (by trial). Default 1: solved at least once.
        posterior_threshold, posterior_q: set both to replace the counts rule by the
            posterior rule: P(p > posterior_threshold | c, n) >= posterior_q under the
            Jeffreys posterior Beta(c + 1/2, n - c + 1/2) of all clean runs (the one
            the difficulty bands use).
        max_refill_rounds: live probing only; rounds that re-run the trials still
            in system error after the episode's own retries.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: PolicyConfig | None = None
    import_results: str | None = None
    min_clean_runs: int = Field(4, ge=1)
    min_successes: int = Field(1, ge=1)
    posterior_threshold: float | None = Field(None, gt=0.0, lt=1.0)
    posterior_q: float | None = Field(None, gt=0.0, lt=1.0)
    max_refill_rounds: int = Field(2, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ReferenceConfig:
        if (self.policy is None) == (self.import_results is None):
            raise ValueError(
                "reference needs exactly one source: 'policy' (an OpenAI-compatible endpoint, "
                "kind: endpoint) or 'import_results' (a tb infer JSONL file)"
            )
        if self.policy is not None and self.policy.kind != "endpoint":
            raise ValueError(
                f"reference.policy.kind must be 'endpoint' (an OpenAI-compatible server), "
                f"got {self.policy.kind!r}; for a finished run use import_results instead"
            )
        if self.min_successes > self.min_clean_runs:
            raise ValueError(
                f"reference.min_successes ({self.min_successes}) exceeds min_clean_runs "
                f"({self.min_clean_runs}): no task could pass; lower it or run more"
            )
        if (self.posterior_threshold is None) != (self.posterior_q is None):
            raise ValueError(
                "reference.posterior_threshold and reference.posterior_q go together: set both "
                "(posterior rule) or neither (counts rule)"
            )
        return self

    @property
    def rule(self) -> str:
        """``"posterior"`` when both posterior fields are set, else ``"counts"``."""
        return "posterior" if self.posterior_q is not None else "counts"
