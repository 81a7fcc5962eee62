"""The retail ``Domain`` record: tables, tools, seed, policy, ungraded parts."""

from __future__ import annotations

from rewardbox.domains.base import Domain
from rewardbox.domains.retail import models, seed, tools

DOMAIN = Domain.from_modules("retail", models=models, seed=seed, tools=tools)
SERVER_NAME = DOMAIN.server_name
