"""The hotel ``Domain`` record: tables, tools, seed, policy, ungraded parts."""

from __future__ import annotations

from pathlib import Path

from rewardbox.domains.base import Domain
from rewardbox.domains.hotel.models import METADATA, UNGRADED
from rewardbox.domains.hotel.seed import seed_rows
from rewardbox.domains.hotel.tools import READONLY_TOOLS, TOOLS

SERVER_NAME = "rewardbox_hotel"
POLICY_PATH = Path(__file__).with_name("policy.md")

DOMAIN = Domain(
    name="hotel",
    server_name=SERVER_NAME,
    metadata=METADATA,
    tools=TOOLS,
    seed_rows=seed_rows,
    policy_text=POLICY_PATH.read_text(encoding="utf-8").strip(),
    ungraded=UNGRADED,
    readonly_tools=READONLY_TOOLS,
)
