"""Retail order support: customers, orders, returns, refunds and support tickets.

``DOMAIN`` is the ``rewardbox.domains.base.Domain`` record; ``server.build_server``
builds a fresh MCP server named ``rewardbox_retail``.
"""
