"""The IT helpdesk ``Domain`` record: tables, tools, seed, policy, ungraded parts."""

from __future__ import annotations

from rewardbox.domains.base import Domain
from rewardbox.domains.helpdesk import models, seed, tools

DOMAIN = Domain.from_modules("helpdesk", models=models, seed=seed, tools=tools)
SERVER_NAME = DOMAIN.server_name
