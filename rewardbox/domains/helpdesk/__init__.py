"""IT helpdesk: access requests and approvers, password resets, device replacement, ticket escalation.

The held-out (out-of-distribution) benchmark domain: every task is a benchmark
task. ``DOMAIN`` is the ``rewardbox.domains.base.Domain`` record;
``server.build_server`` builds a fresh MCP server named ``rewardbox_helpdesk``.
"""
