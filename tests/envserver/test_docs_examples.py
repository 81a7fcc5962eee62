"""The environment server's documented examples: every task uid the docs name exists, every Python block
parses, and the Python client example runs as written against a real server, printing what the doc says."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "openenv.core", reason="the environment server needs the 'env' extra (openenv-core)"
)

from rewardbox.tasks.config import TaskSource
from rewardbox.tasks.sources import load_sources

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "environment_server.md"
UID = re.compile(r"\b[A-Za-z0-9_]+\.py:test_[A-Za-z0-9_]+")
PLACEHOLDERS = {"file.py:test_name"}  # the format's own name, not a task
DOC_URL = "http://127.0.0.1:8000"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def named_uids() -> dict[str, set[str]]:
    """uid -> files that name it, over README.md, docs/ and the package's docstrings."""
    files = [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "rewardbox").rglob("*.py")),
    ]
    found: dict[str, set[str]] = {}
    for path in files:
        for uid in set(UID.findall(path.read_text(encoding="utf-8"))) - PLACEHOLDERS:
            found.setdefault(uid, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_task_uid_the_docs_name_exists():
    domains = [
        p.name for p in (REPO / "rewardbox" / "domains").iterdir() if (p / "__init__.py").exists()
    ]
    loaded = load_sources([TaskSource(dataset=f"embedded:{d}") for d in domains], "candidate")
    named = named_uids()
    assert (
        "retail_address.py:test_retail_address_change_01" in named
    )  # the scan sees the doc's example
    missing = {
        uid: files for uid, files in named.items() if uid not in {t.uid for t in loaded.tasks}
    }
    assert not missing, f"task uids named in the docs that no embedded domain has: {missing}"


def test_every_python_block_of_the_doc_parses():
    blocks = python_blocks(DOC)
    assert len(blocks) >= 2
    for block in blocks:
        ast.parse(block)


def test_the_python_client_example_runs_as_written(served):
    block = next(b for b in python_blocks(DOC) if "RewardboxEnv(base_url=" in b)
    assert DOC_URL in block
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.replace(DOC_URL, served.url), str(DOC), "exec"), {})  # noqa: S102 - the doc's own code
    lines = out.getvalue().splitlines()
    assert "find_customer" in lines[0]
    assert (
        "ana.diaz@mail.test" in lines[1] or "CUS-" in lines[1]
    )  # the tool's output names the customer
    assert lines[-1] == "True 0.0 finished"  # as the doc's comment says: no address was changed
