"""Profiles: every concern's config in one validated object, loaded from YAML.

``load_profile("demo")`` reads ``rewardbox/config/profiles/demo.yaml``; a path
to a YAML file works too. Unknown keys are errors (``extra="forbid"``) whose
message names the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rewardbox.episode.config import EpisodeConfig, ExecutorConfig
from rewardbox.metrics.cost import PriceTable
from rewardbox.policy.config import PolicyConfig
from rewardbox.selection import SelectionConfig
from rewardbox.tasks.schema import canonical_json
from rewardbox.training.config import GRPOConfig
from rewardbox.training.verl_backend_config import VerlBackendConfig

PROFILE_DIR = Path(__file__).parent / "profiles"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSource(_Strict):
    """One dataset: ``embedded:<domain>`` or a ThinkingBox dataset directory.

    Attributes:
        dataset: ``embedded:retail`` or a path (relative to the working directory).
        test_list: optional YAML test list (relative paths resolve against the dataset).
        servers: optional ThinkingBox ``servers.yaml`` for this dataset's tool servers
            (absolute, relative to the working directory, else to the dataset). With
            ``sandbox.kind: external`` every source's file and ``sandbox.servers_yaml``
            are merged into one config: server names are global, and a name defined
            twice with different definitions is a config error naming both files
            (``rewardbox.evaluation.services.profile_servers_config``). Other kinds ignore it.
        name: dataset (domain) name reported in tables; defaults to the directory name.
        limit: keep only the first ``limit`` tasks of this source (list order), for small profiles.
    """

    dataset: str
    test_list: str | None = None
    servers: str | None = None
    name: str | None = None
    limit: int | None = Field(None, ge=1)


class CandidateLoadPolicy(_Strict):
    """What loading the candidate task set does when task files fail to load.

    The benchmark has no such setting: it is always strict (any task that fails
    to load fails the load), because a benchmark that silently shrinks changes
    what every later evaluation measures.

    Attributes:
        on_error: ``fail`` (default): any broken task file, or any listed task
            that does not load, fails the load and names every file and line.
            ``skip``: broken tasks are left out and reported, as long as their
            share stays within ``max_skipped_frac``.
        max_skipped_frac: with ``skip``, the largest share (0-1) of the
            candidate tasks that may fail to load; above it the load fails.
            The share is failed / (loaded + failed), counting each listed uid
            that did not load, or each broken file or test of a whole-dataset
            source. A source that cannot be read at all always fails the load.
    """

    on_error: Literal["fail", "skip"] = "fail"
    max_skipped_frac: float = Field(0.1, ge=0.0, le=1.0)


class TaskSourcesConfig(_Strict):
    """Candidates (training) and benchmark (evaluation only) task sources.

    The benchmark's tasks never enter a training pool: candidates are filtered
    by uid and task identity against them, and a blocking check proves it.
    ``candidate_loading`` sets what a broken candidate task file does; the
    benchmark (and every ``exclude_only`` release) always fails on one.

    Attributes:
        exclude_only: evaluation-only releases that are not the benchmark: their
            tasks are loaded only to be kept out of training (same rule as the
            benchmark), never screened nor evaluated.
        domains: ``{scenario: domain}``; a task's domain is its scenario's entry,
            else the scenario name itself (docs/thinkingbox.md, "Domains").
    """

    candidates: list[TaskSource]
    benchmark: list[TaskSource]
    exclude_only: list[TaskSource] = []
    domains: dict[str, str] = {}
    max_candidates: int | None = Field(None, ge=1)
    max_benchmark: int | None = Field(None, ge=1)
    candidate_loading: CandidateLoadPolicy = Field(default_factory=CandidateLoadPolicy)


class SandboxConfig(_Strict):
    """Tool backends: in-process embedded servers, external MCP servers, or a Session Proxy.

    Attributes:
        kind: ``inprocess`` (embedded domains in this process), ``external`` (one
            MCP process per server per episode, or ``mcp-remote`` endpoints), or
            ``proxy`` (a running ThinkingBox Session Proxy at ``proxy_url``).
        servers_yaml: external only; a ThinkingBox ``servers.yaml``, merged with
            each task source's ``servers`` file (one of them must be set).
        proxy_url: proxy only; e.g. ``http://127.0.0.1:7111``.
        tool_timeout_s: external only; limit of one tool call, seconds (a hung
            call is a system error).
    """

    kind: Literal["inprocess", "external", "proxy"] = "inprocess"
    servers_yaml: str | None = None
    proxy_url: str | None = None
    tool_timeout_s: float = Field(30.0, gt=0)


class UserSimulatorConfig(_Strict):
    """``scripted`` answers from the task's user_context; ``endpoint`` uses an LLM."""

    kind: Literal["scripted", "endpoint"] = "scripted"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.3

    @field_validator("model")
    @classmethod
    def _needs_model(cls, v, info):
        if info.data.get("kind") == "endpoint" and not (v and info.data.get("base_url")):
            raise ValueError("user.kind=endpoint needs user.base_url and user.model")
        return v


class GradingConfig(_Strict):
    """Test execution pool and the optional yes/no judge endpoint."""

    workers: int = Field(2, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key_env: str = "OPENAI_API_KEY"

    def judge_config(self) -> dict | None:
        if not self.judge_base_url:
            return None
        return {"base_url": self.judge_base_url, "model": self.judge_model or "judge",
                "api_key_env": self.judge_api_key_env}


class ProbeConfig(_Strict):
    """Offline difficulty probes: n trials of each candidate with the base policy.

    Attributes:
        trials: n, probes per candidate task.
        import_results: a ``tb infer`` JSONL file (ThinkingBox ``DecodeResult`` rows) to use
            as the probe results instead of running probes (existing probe runs feed task
            selection without re-running them).
    """

    trials: int = Field(8, ge=1)
    import_results: str | None = None


class EvaluationConfig(_Strict):
    """Benchmark evaluation: every task x k trials."""

    trials: int = Field(20, ge=1)


class ReportConfig(_Strict):
    k_values: list[int] = [1, 2, 4, 8, 20]
    price_table: PriceTable = Field(default_factory=lambda: PriceTable(
        version="unpriced", models={"*": {"usd_per_1m_input_tokens": 0.0, "usd_per_1m_cached_input_tokens": 0.0,
                                          "usd_per_1m_output_tokens": 0.0}}))


class Profile(_Strict):
    """Everything a run needs. ``data_dir`` holds every artifact (``make clean`` removes it)."""

    name: str
    data_dir: str = "data"
    tasks: TaskSourcesConfig
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    policy: PolicyConfig
    user: UserSimulatorConfig = Field(default_factory=UserSimulatorConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    verl: VerlBackendConfig = Field(default_factory=VerlBackendConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    def section_hash(self, *sections: str) -> str:
        """Short SHA-256 of the named sections' config (asset metadata: what produced it)."""
        payload = canonical_json({s: getattr(self, s).model_dump(mode="json") for s in sections})
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def load_profile(name_or_path: str | os.PathLike) -> Profile:
    """Load and validate a profile by name (``demo``, ``test``) or YAML path.

    Raises:
        FileNotFoundError: no such profile.
        ValueError: the YAML is invalid; the message names the file and field.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"profile {name_or_path!r} not found; known profiles: {known}")
    data = yaml.safe_load(path.read_text()) or {}
    data.setdefault("name", path.stem)
    if os.environ.get("REWARDBOX_DATA_DIR"):
        data["data_dir"] = os.environ["REWARDBOX_DATA_DIR"]
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid profile:\n{exc}") from exc
