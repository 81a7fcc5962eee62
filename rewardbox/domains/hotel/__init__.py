"""Hotel bookings under a company travel policy: travellers, bookings, approvals, loyalty credits.

``DOMAIN`` is the ``rewardbox.domains.base.Domain`` record; ``server.build_server``
builds a fresh MCP server named ``rewardbox_hotel``.
"""
