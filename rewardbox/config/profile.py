"""Profiles: every concern's config composed into one validated object, loaded from YAML once.

``load_profile("demo")`` reads ``rewardbox/config/profiles/demo.yaml``; a path
to a YAML file works too. Unknown keys are errors (``extra="forbid"``) whose
message names the key, so a typo never silently falls back to a default; a key
that was removed (``policy.temperature``) names the key that replaced it.

Each section's model lives next to the code it configures (``rewardbox.<concern>.config``);
this module only composes them, loads and validates. The old names stay importable
from here. The two environment variables of a run, ``REWARDBOX_PROFILE`` and
``REWARDBOX_DATA_DIR``, are read here and nowhere else (:func:`profile_from_env`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewardbox.episode.clean_trials import SystemErrorBound
from rewardbox.episode.config import EpisodeConfig, ExecutorConfig, UserSimulatorConfig
from rewardbox.evaluation.config import EvaluationConfig
from rewardbox.grading.config import GradingConfig
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.serving_config import ServingConfig
from rewardbox.report.config import ReportConfig
from rewardbox.sandbox.config import SandboxConfig
from rewardbox.selection.config import ProbeConfig, SelectionConfig
from rewardbox.selection.reference_config import ReferenceConfig
from rewardbox.tasks.config import CandidateLoadPolicy, TaskSource, TaskSourcesConfig
from rewardbox.tasks.schema import canonical_json
from rewardbox.training.config import GRPOConfig
from rewardbox.training.rft_config import RFTConfig
from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.guard import check_refill_bound

PROFILE_DIR = Path(__file__).parent / "profiles"
PROFILE_ENV = "REWARDBOX_PROFILE"
"""Environment variable naming the profile of a process (a name or a YAML path)."""
DATA_DIR_ENV = "REWARDBOX_DATA_DIR"
"""Environment variable that moves every artifact (overrides the profile's ``data_dir``)."""
DEFAULT_PROFILE = "demo"

__all__ = [
    "CandidateLoadPolicy",
    "EpisodeConfig",
    "EvaluationConfig",
    "ExecutorConfig",
    "GRPOConfig",
    "GradingConfig",
    "PolicyConfig",
    "ProbeConfig",
    "Profile",
    "ReferenceConfig",
    "ReportConfig",
    "SandboxConfig",
    "SelectionConfig",
    "ServingConfig",
    "SystemErrorBound",
    "TaskSource",
    "TaskSourcesConfig",
    "UserSimulatorConfig",
    "data_dir_from_env",
    "load_profile",
    "profile_from_env",
    "profile_name_from_env",
]


class Profile(BaseModel):
    """Everything a run needs. ``data_dir`` holds every artifact (``make clean-all`` removes it;
    ``make clean`` one profile's own).

    ``reference`` (absent by default: the gate is off) screens candidates with a reference
    policy before they may enter the training pool (``rewardbox.selection.reference_config``).
    ``serving`` (off by default) serves checkpoints with vLLM for probes and evaluation.
    ``rft`` (off by default) adds the warm start before GRPO (docs/warm_start.md).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    data_dir: str = "data"
    tasks: TaskSourcesConfig
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    policy: PolicyConfig
    serving: ServingConfig = Field(default_factory=ServingConfig)
    user: UserSimulatorConfig = Field(default_factory=UserSimulatorConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    reference: ReferenceConfig | None = None
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    rft: RFTConfig = Field(default_factory=RFTConfig)
    verl: VerlBackendConfig = Field(default_factory=VerlBackendConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    system_errors: SystemErrorBound = Field(default_factory=SystemErrorBound)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @model_validator(mode="after")
    def _verl_keeps_the_refill_bound(self) -> Profile:
        """``verl.extra_overrides`` may not lift ``grpo.max_refill_rounds`` (``training.verl.guard``)."""
        check_refill_bound(self.verl.extra_overrides, self.grpo.max_refill_rounds)
        return self

    @model_validator(mode="after")
    def _warm_start_needs_local_lora(self) -> Profile:
        """``rft.enabled`` needs ``grpo.backend: local`` and ``grpo.finetune: lora``: GRPO continues
        the warm start's LoRA adapter (docs/warm_start.md)."""
        if self.rft.enabled and (self.grpo.backend, self.grpo.finetune) != ("local", "lora"):
            raise ValueError(
                "rft.enabled needs grpo.backend: local and grpo.finetune: lora (GRPO continues the "
                f"warm start's LoRA adapter); got {self.grpo.backend!r} and {self.grpo.finetune!r}"
            )
        return self

    @property
    def data_path(self) -> Path:
        """``data_dir`` as an absolute path (``~`` expanded)."""
        return Path(self.data_dir).expanduser().resolve()

    @property
    def artifacts_path(self) -> Path:
        """``<data_dir>/<profile name>``: where every artifact of this profile lives."""
        return self.data_path / self.name

    def section_hash(self, *sections: str) -> str:
        """Short SHA-256 of the named sections' config (asset metadata: what produced it).

        An optional section that is absent (``reference: null``) hashes as null.
        """
        values = {s: getattr(self, s) for s in sections}
        payload = canonical_json(
            {s: v.model_dump(mode="json") if v is not None else None for s, v in values.items()}
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def profile_path(name_or_path: str | os.PathLike) -> Path:
    """The YAML file of a profile name (``demo``, ``test``) or path.

    Raises:
        FileNotFoundError: no such profile; the message lists the known names.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"profile {name_or_path!r} not found; known profiles: {known}")
    return path.resolve()


@functools.lru_cache(maxsize=32)
def _validated(path: Path, mtime_ns: int, data_dir: str | None) -> Profile:
    """The profile at ``path`` as of ``mtime_ns`` (the cache key: an edited file is read again)."""
    data = yaml.safe_load(path.read_text()) or {}
    data.setdefault("name", path.stem)
    if data_dir:
        data["data_dir"] = data_dir
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid profile:\n{exc}") from exc


def load_profile(
    name_or_path: str | os.PathLike, data_dir: str | os.PathLike | None = None
) -> Profile:
    """Load and validate a profile by name (``demo``, ``test``) or YAML path.

    The file is read and validated once per process while it is unchanged (cached by
    path and modification time); each call returns its own copy.

    Args:
        name_or_path: a profile name under ``rewardbox/config/profiles`` or a YAML path.
        data_dir: overrides the profile's ``data_dir``; None uses ``REWARDBOX_DATA_DIR``
            when it is set, else the file's value.

    Raises:
        FileNotFoundError: no such profile.
        ValueError: the YAML is invalid; the message names the file and field (a removed
            key names its replacement).
    """
    path = profile_path(name_or_path)
    override = str(data_dir) if data_dir else data_dir_from_env()
    return _validated(path, path.stat().st_mtime_ns, override).model_copy(deep=True)


def profile_from_env() -> Profile:
    """The profile this process runs with: ``REWARDBOX_PROFILE`` (default ``demo``), moved to
    ``REWARDBOX_DATA_DIR`` when it is set.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_profile`.
    """
    return load_profile(profile_name_from_env())


def profile_name_from_env() -> str:
    """``REWARDBOX_PROFILE``, or ``demo`` when it is unset."""
    return os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE


def data_dir_from_env() -> str | None:
    """``REWARDBOX_DATA_DIR``, or None when it is unset."""
    return os.environ.get(DATA_DIR_ENV) or None
