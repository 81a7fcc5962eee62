"""Embedded business domains: one SQLite database per episode behind an MCP server.

Every domain has the same files (tau2-bench style): ``models.py`` (SQLAlchemy
tables), ``tools.py`` (plain functions over a session; their docstrings are the
tool descriptions the model reads; ``tools.py`` holds the read tools and the
``TOOLS`` list, ``tools_write.py`` the write tools, ``tools_common.py`` the rules
and row helpers both use), ``seed.py`` (deterministic seed rows),
``policy.md`` (the policy text), ``server.py`` (builds the MCP server),
``generator.py`` (the task generator) and ``dataset/`` (a ThinkingBox-layout
dataset). The shared machinery lives in ``base.py`` (the ``Domain`` record, tool
runner), ``database.py`` (episode database, data patch), ``golden.py`` (golden
state), ``server.py`` (the MCP server and reserved tools), ``toolkit.py`` (what
models and tools share), ``authoring.py`` (what task templates share) and
``dataset_writer.py`` (templates -> ThinkingBox dataset, byte for byte);
``registry.py`` maps server names to builders.
"""
