"""Provenance: which code, configuration and task set produced a run or an artifact.

Three identities, each a short SHA-256 hex digest:

- **code version** (:func:`source_version`): a hash of the *syntax tree* of the named modules'
  Python files, docstrings removed. Comments, docstrings and formatting do not change it; any
  change to what the code does does. Task datasets (``dataset/`` folders) are data, not code, and
  are left out: the task-set version and the assets' data versions cover them.
- **config hash** (:func:`profile_config_hash`): every profile section except the name and
  ``data_dir`` (where artifacts go does not change what they are).
- **task-set version** (``rewardbox.tasks.schema.task_set_version``): a hash of the tasks' uids and
  content hashes.

:func:`run_tags` turns them into the run tags that the Dagster jobs, sensors and schedule attach
to every run (see ``docs/audit.md``), plus the resource tags that the Postgres instance's
run queue limits concurrency on (``dagster.postgres.yaml``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import subprocess
from functools import cache, lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from rewardbox.config.profile import Profile
from rewardbox.tasks.schema import canonical_json, task_set_version

TAG_PROFILE = "rewardbox/profile"
TAG_CONFIG_HASH = "rewardbox/config_hash"
TAG_CODE_VERSION = "rewardbox/code_version"
TAG_TASK_SET_VERSION = "rewardbox/task_set_version"
TAG_GIT_COMMIT = "rewardbox/git_commit"
#: Present (value ``required``) on runs that run the local policy model or train it: the GPU cluster.
TAG_GPU_CLUSTER = "rewardbox/gpu_cluster"
#: ``host:port`` of the OpenAI-compatible endpoint each role calls, one tag per role (rate limits).
TAG_ENDPOINTS = {
    "policy": "rewardbox/policy_endpoint",
    "user": "rewardbox/user_endpoint",
    "judge": "rewardbox/judge_endpoint",
    "reference": "rewardbox/reference_endpoint",
}

#: The packages whose code makes up the project (the run tag's code version).
PROJECT_PACKAGES = ("rewardbox", "assets", "resources", "sensors", "pipelines")


def _module_files(module: str) -> list[Path]:
    """The ``.py`` files of a module or package (recursively), ``dataset/`` folders excluded."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module named {module!r} (code version)")
    origin = Path(spec.origin)
    if origin.name != "__init__.py":
        return [origin]
    root = origin.parent
    return sorted(p for p in root.rglob("*.py") if "dataset" not in p.relative_to(root).parts[:-1])


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


@cache
def _file_digest(path: Path, mtime_ns: int) -> str:
    source = path.read_text(encoding="utf-8")
    try:
        text = ast.dump(_strip_docstrings(ast.parse(source)), include_attributes=False)
    except SyntaxError:  # hash the bytes: a file that does not parse is still a change
        text = source
    return hashlib.sha256(text.encode()).hexdigest()


def source_version(*modules: str) -> str:
    """Code version of the named modules: a hash of their syntax trees without docstrings.

    Args:
        modules: importable names, e.g. ``"rewardbox.evaluation"`` (a package: every ``.py`` file
            under it) or ``"assets.tasks"`` (one file). Looked up without being imported, except
            that a dotted name imports its parent package.

    Returns:
        12 hex characters; equal for two trees whose code differs only in comments, docstrings or
        layout.

    Raises:
        ModuleNotFoundError: a name does not resolve to a module.
    """
    digest = hashlib.sha256()
    for module in modules:
        for path in _module_files(module):
            digest.update(f"{module}:{path.name}:".encode())
            digest.update(_file_digest(path, path.stat().st_mtime_ns).encode())
    return digest.hexdigest()[:12]


def project_code_version() -> str:
    """Code version of the whole project (:data:`PROJECT_PACKAGES`)."""
    return source_version(*PROJECT_PACKAGES)


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The checkout's commit (``<sha>`` or ``<sha>-dirty``), or ``None`` outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def profile_config_hash(profile: Profile) -> str:
    """Short SHA-256 of every profile section except ``name`` and ``data_dir`` (16 hex)."""
    payload = canonical_json(profile.model_dump(mode="json", exclude={"name", "data_dir"}))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def benchmark_version(profile: Profile) -> str:
    """The task-set version of the profile's benchmark (loads the benchmark's task files)."""
    from rewardbox.tasks.sources import load_benchmark

    return task_set_version(load_benchmark(profile.tasks).tasks)


def endpoints(profile: Profile) -> dict[str, str]:
    """``host:port`` of each OpenAI-compatible endpoint the profile calls, by role (policy, user, judge,
    reference: the screening policy of ``profile.reference``)."""
    reference = profile.reference.policy if profile.reference is not None else None
    urls = {
        "policy": profile.policy.base_url if profile.policy.kind == "endpoint" else None,
        "user": profile.user.base_url if profile.user.kind == "endpoint" else None,
        "judge": profile.grading.judge_base_url,
        "reference": reference.base_url if reference else None,
    }
    return {
        role: urlsplit(url).netloc for role, url in urls.items() if url and urlsplit(url).netloc
    }


def run_tags(
    profile: Profile,
    *,
    task_set_version: str | None = None,
    samples_policy: bool = True,
    trains: bool = False,
) -> dict[str, str]:
    """The provenance and resource tags of a run with ``profile``.

    Args:
        profile: the profile the run uses.
        task_set_version: the benchmark task-set version, when known.
        samples_policy: the run samples from the policy (probes, evaluations, rollouts).
        trains: the run trains the policy (always on the local model, so on the GPU cluster).

    Returns:
        Tag name -> value, all strings (Dagster run tags): profile, config hash, code version,
        task-set version, git commit when known, ``rewardbox/gpu_cluster`` when the run trains or
        samples from the local model, and one endpoint tag per role that calls an endpoint. Never
        contains secrets: profiles name the environment variables that hold API keys, not the keys.
    """
    tags = {
        TAG_PROFILE: profile.name,
        TAG_CONFIG_HASH: profile_config_hash(profile),
        TAG_CODE_VERSION: project_code_version(),
    }
    if task_set_version:
        tags[TAG_TASK_SET_VERSION] = task_set_version
    commit = git_commit()
    if commit:
        tags[TAG_GIT_COMMIT] = commit
    if trains or (samples_policy and profile.policy.kind == "local"):
        tags[TAG_GPU_CLUSTER] = "required"
    hosts = endpoints(profile)
    if not samples_policy:
        hosts.pop("policy", None)
        hosts.pop("reference", None)
    tags |= {TAG_ENDPOINTS[role]: host for role, host in hosts.items()}
    return tags
