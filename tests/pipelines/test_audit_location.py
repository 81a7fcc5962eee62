"""The audit prints what an asset made (``location``) beside where the IO manager stored its output.

The pickle IO manager writes its own ``path`` metadata over an asset's, so a checkpoint asset that
recorded its directory as ``path`` showed the 53-byte pickle instead (found by a new user's audit of
``merged_checkpoint``); assets record ``location`` instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg

from pipelines.audit import render, trace

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkpoint_s_directory_survives_the_io_manager_and_is_audited(tmp_path):
    made = tmp_path / "checkpoints" / "merged"
    made.mkdir(parents=True)

    @dg.asset(name="merged_checkpoint")
    def merged_checkpoint(context) -> str:
        context.add_output_metadata({"location": dg.MetadataValue.path(str(made))})
        return str(made)

    instance = dg.DagsterInstance.ephemeral()
    io = dg.FilesystemIOManager(base_dir=str(tmp_path / "objects"))
    assert dg.materialize(
        [merged_checkpoint], resources={"io_manager": io}, instance=instance
    ).success
    node = trace(instance, "merged_checkpoint")
    assert node.location == str(made)
    assert node.path == str(tmp_path / "objects" / "merged_checkpoint")
    lines = list(render(node))
    assert f"  location {made}" in lines and f"  stored {node.path}" in lines


def test_no_asset_records_its_own_path_metadata_for_the_io_manager_to_overwrite():
    for module in sorted((ROOT / "assets").glob("*.py")):
        keys = [
            node.value
            for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, ast.Dict)
            for node in node.keys
            if isinstance(node, ast.Constant)
        ]
        assert "path" not in keys, f"{module.name}: record `location`, not `path`"


def test_a_misspelt_asset_is_named_with_its_likely_spelling():
    from pipelines.audit import not_found

    known = ["base_checkpoint", "merged_checkpoint", "probe_results"]
    message = not_found("merged_checkpiont", known, "/h")
    assert "did you mean merged_checkpoint?" in message
    message = not_found("grpo_checkpoint_x", known, "/h")
    assert "has no materialisation" in message and "probe_results" in message
    assert "none yet" in not_found("probe_results", [], "/h")


def test_a_materialisation_read_at_several_levels_is_shown_once(tmp_path):
    @dg.asset(name="base_checkpoint")
    def base_checkpoint() -> str:
        return "base"

    @dg.asset(name="grpo_checkpoint")
    def grpo_checkpoint(base_checkpoint: str) -> str:
        return base_checkpoint + "+adapter"

    @dg.asset(name="merged_checkpoint")
    def merged_checkpoint(base_checkpoint: str, grpo_checkpoint: str) -> str:
        return grpo_checkpoint

    instance = dg.DagsterInstance.ephemeral()
    io = dg.FilesystemIOManager(base_dir=str(tmp_path / "objects"))
    assets = [base_checkpoint, grpo_checkpoint, merged_checkpoint]
    assert dg.materialize(assets, resources={"io_manager": io}, instance=instance).success
    lines = list(render(trace(instance, "merged_checkpoint")))
    heads = [line.strip().split()[0] for line in lines if "data_version=" in line]
    assert sorted(heads) == [
        "base_checkpoint",
        "base_checkpoint",
        "grpo_checkpoint",
        "merged_checkpoint",
    ]
    assert sum("(shown above)" in line for line in lines) == 1
    assert sum(line.strip().startswith("run ") for line in lines) == 3
