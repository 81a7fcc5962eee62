"""The hotel ``Domain`` record: tables, tools, seed, policy, ungraded parts."""

from __future__ import annotations

from rewardbox.domains.base import Domain
from rewardbox.domains.hotel import models, seed, tools

DOMAIN = Domain.from_modules("hotel", models=models, seed=seed, tools=tools)
SERVER_NAME = DOMAIN.server_name
