"""Task-set config: where candidate and benchmark tasks come from, and what a broken file does.

Composed by the profile under ``tasks:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class GeneratedSource(BaseModel):
    """Training-only instances drawn from an embedded domain's family templates (``rewardbox.tasks.generated``).

    Attributes:
        domain: the embedded domain whose ``DatasetRecipe`` draws them.
        seed: the training seed (the shipped dataset's seed is refused).
        per_family: instances per family.
        families: family names (``Family.name``); every non-held-out family when None.
    """

    model_config = ConfigDict(extra="forbid")

    domain: str
    seed: int
    per_family: int = Field(ge=1)
    families: list[str] | None = None


class TaskSource(BaseModel):
    """One dataset: ``embedded:<domain>`` or a ThinkingBox dataset directory.

    Attributes:
        dataset: ``embedded:retail`` or a path (relative to the working directory).
        test_list: optional YAML test list; a relative path that exists from the working directory
            is used as is (the `learn` profile's lists), any other resolves against the dataset.
        servers: optional ThinkingBox ``servers.yaml`` for this dataset's tool servers
            (absolute, relative to the working directory, else to the dataset). With
            ``sandbox.kind: external`` every source's file and ``sandbox.servers_yaml``
            are merged into one config: server names are global, and a name defined
            twice with different definitions is a config error naming both files
            (``rewardbox.runtime.compose.profile_servers_config``). Other kinds ignore it.
        name: dataset (domain) name reported in tables; defaults to the directory name.
        limit: keep only the first ``limit`` tasks of this source (list order), for small profiles.
        generate: candidates only: ``dataset`` is a directory that loading (re)writes with these
            generated training-only tasks (byte-identical files are kept); any of them that
            shares a uid or content hash with a held-out task fails the load.
    """

    model_config = ConfigDict(extra="forbid")

    dataset: str
    test_list: str | None = None
    servers: str | None = None
    name: str | None = None
    limit: int | None = Field(None, ge=1)
    generate: GeneratedSource | None = None


class CandidateLoadPolicy(BaseModel):
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

    model_config = ConfigDict(extra="forbid")

    on_error: Literal["fail", "skip"] = "fail"
    max_skipped_frac: float = Field(0.1, ge=0.0, le=1.0)


class TaskSourcesConfig(BaseModel):
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
        max_candidates, max_benchmark: keep at most this many tasks of each set.
    """

    model_config = ConfigDict(extra="forbid")

    candidates: list[TaskSource]
    benchmark: list[TaskSource]
    exclude_only: list[TaskSource] = []
    domains: dict[str, str] = {}
    max_candidates: int | None = Field(None, ge=1)
    max_benchmark: int | None = Field(None, ge=1)
    candidate_loading: CandidateLoadPolicy = Field(default_factory=CandidateLoadPolicy)
