"""``use_internal_servers: true`` (issue #25): upstream's bundled servers when ``{python}`` can import
them, rewardbox's embedded domains as well, and a message that says so when a server is missing."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from rewardbox.errors import SandboxError
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.servers_config import parse_servers_config

CLOUD_DRIVE = '''
import json
from mcp.server.mcpserver import MCPServer

server = MCPServer("cloud_drive")
FILES = {}


@server.tool(name="__reserved__init")
def reserved_init(config: dict) -> str:
    FILES.clear()
    FILES.update((config or {}).get("files") or {})
    return "{}"


@server.tool()
def list_files() -> str:
    """The file names."""
    return json.dumps(sorted(FILES))


if __name__ == "__main__":
    server.run()
'''


def test_missing_bundled_server_is_refused_with_what_use_internal_servers_means_here():
    config = parse_servers_config(
        {"use_internal_servers": True, "servers": {}}, source="servers.yaml"
    )
    assert "rewardbox_retail" in config.servers and "cloud_drive" not in config.servers

    async def start():
        await ExternalSandbox(config).start({"cloud_drive": {}}, None)

    with pytest.raises(SandboxError) as info:
        asyncio.run(start())
    message = str(info.value)
    assert message.startswith("server 'cloud_drive' is not defined in servers.yaml (defined: ")
    assert (
        "use_internal_servers adds ThinkingBox's bundled servers (tb/tools/mcp_*.py, e.g. cloud_drive) only "
        f"when the {{python}} interpreter ({sys.executable}) can import the package tb.tools"
        in message
    )


def test_bundled_tb_tools_servers_are_added_and_serve(tmp_path, monkeypatch):
    tools = tmp_path / "tb" / "tools"
    tools.mkdir(parents=True)
    (tmp_path / "tb" / "__init__.py").write_text("")
    (tools / "__init__.py").write_text("")
    (tools / "mcp_cloud_drive.py").write_text(CLOUD_DRIVE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = parse_servers_config(
        {"use_internal_servers": True, "servers": {}}, source="servers.yaml"
    )
    server = config.servers["cloud_drive"]
    assert (
        server.command == ["{python}", "-m", "tb.tools.mcp_cloud_drive"]
        and server.episodes_per_process == 1
    )
    assert "rewardbox_retail" in config.servers  # ours are added as well

    async def episode():
        sandbox = ExternalSandbox(config)
        try:
            await sandbox.start({"cloud_drive": {"files": {"a.txt": "x"}}}, ["list_files"])
            return json.loads(await sandbox.call_tool("list_files", {}))
        finally:
            await sandbox.close()

    assert asyncio.run(episode()) == ["a.txt"]
