"""servers.yaml per task source: the external sandbox serves the union of every configured file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rewardbox.config.profile import Profile
from rewardbox.runtime.compose import build_sandbox, profile_servers_config
from rewardbox.sandbox.servers_config import (
    ServersConfigError,
    internal_servers,
    merge_servers_configs,
    parse_servers_config,
)

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"


def _proc(module: str, **env) -> dict:
    return {"type": "mcp-process", "command": f"{{python}} -m {module}", "env": env}


def _write(path: Path, servers: dict, **extra) -> Path:
    path.write_text(yaml.safe_dump({"servers": servers, **extra}))
    return path


def _profile(servers_yaml: str | None, *sources: dict) -> Profile:
    return Profile.model_validate(
        {
            "name": "union",
            "tasks": {"candidates": list(sources) or [{"dataset": str(DATASET)}], "benchmark": []},
            "sandbox": {"kind": "external", "servers_yaml": servers_yaml, "tool_timeout_s": 7},
            "policy": {"kind": "null"},
            "report": {"price_table": {"version": "t", "models": {}}},
        }
    )


def test_merge_is_a_union_and_identical_duplicates_are_fine():
    a = parse_servers_config(
        {"servers": {"shop": _proc("shop"), "search": _proc("search")}}, "a.yaml"
    )
    b = parse_servers_config(
        {"servers": {"search": _proc("search"), "mail": _proc("mail")}}, "b.yaml"
    )
    merged = merge_servers_configs([a, b])
    assert sorted(merged.servers) == ["mail", "search", "shop"]
    assert merged.source == "a.yaml + b.yaml" and merged.use_internal_servers is False


def test_a_name_defined_twice_differently_is_a_config_error_naming_both_files():
    a = parse_servers_config({"servers": {"shop": _proc("shop")}}, "a.yaml")
    b = parse_servers_config({"servers": {"shop": _proc("shop", TOKEN="x")}}, "b.yaml")
    with pytest.raises(
        ServersConfigError,
        match=r"b\.yaml \(field 'servers\.shop'\): server 'shop' is already "
        r"defined differently in a\.yaml",
    ):
        merge_servers_configs([a, b])


def test_internal_servers_yield_to_an_explicit_definition():
    explicit = _proc("my_retail")
    a = parse_servers_config({"use_internal_servers": True}, "a.yaml")
    b = parse_servers_config({"servers": {"rewardbox_retail": explicit}}, "b.yaml")
    for order in ([a, b], [b, a]):
        merged = merge_servers_configs(order)
        assert merged.servers["rewardbox_retail"].command == explicit["command"]
        assert set(internal_servers()) <= set(merged.servers) and merged.use_internal_servers


def test_profile_union_reads_the_profile_file_and_each_source_file(tmp_path):
    dataset = tmp_path / "ds"
    dataset.mkdir()
    _write(dataset / "servers.yaml", {"shop": _proc("shop")})
    profile_file = _write(tmp_path / "profile_servers.yaml", {"search": _proc("search")})
    source = {"dataset": str(dataset), "servers": "servers.yaml"}  # relative to the dataset
    config = profile_servers_config(
        _profile(str(profile_file), source, dict(source))
    )  # same file twice: read once
    assert sorted(config.servers) == ["search", "shop"]
    assert config.source == f"{profile_file.resolve()} + {(dataset / 'servers.yaml').resolve()}"

    factory = build_sandbox(_profile(None, source))
    assert list(factory.config.servers) == ["shop"] and factory.timeouts.tool_s == 7


def test_profile_union_errors(tmp_path):
    with pytest.raises(ValueError, match="needs sandbox.servers_yaml or a 'servers' file"):
        build_sandbox(_profile(None))
    a = _write(tmp_path / "a.yaml", {"shop": _proc("shop")})
    b = _write(tmp_path / "b.yaml", {"shop": _proc("other_shop")})
    with pytest.raises(ServersConfigError, match=r"b\.yaml \(field 'servers\.shop'\).*a\.yaml"):
        build_sandbox(_profile(str(a), {"dataset": str(DATASET), "servers": str(b)}))
    with pytest.raises(ServersConfigError, match=r"missing\.yaml: cannot read"):
        profile_servers_config(_profile(None, {"dataset": str(DATASET), "servers": "missing.yaml"}))
