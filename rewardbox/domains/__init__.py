"""Embedded business domains: one SQLite database per episode behind an MCP server.

Every domain has the same files (tau2-bench style): ``models.py`` (SQLAlchemy
tables), ``tools.py`` (plain functions over a session; their docstrings are the
tool descriptions the model reads), ``seed.py`` (deterministic seed rows),
``policy.md`` (the policy text), ``server.py`` (builds the MCP server),
``generator.py`` (the task generator) and ``dataset/`` (a ThinkingBox-layout
dataset). The shared machinery lives in ``base.py`` (database, data patch, tool
runner, golden state) and ``server.py`` (the MCP server and reserved tools);
``registry.py`` maps server names to builders.
"""
