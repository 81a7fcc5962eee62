"""The IT helpdesk task families, from one explicit call to policy traps.

A family is one parametrised template (``templates_access`` for password resets
and access requests, ``templates_support`` for devices, tickets, values to tell
and several actions) with its test file, difficulty and number of variants.
``FAMILIES`` fixes the order in which tasks are numbered and written.
"""

from __future__ import annotations

from rewardbox.domains.authoring import Family
from rewardbox.domains.helpdesk import templates_access as access
from rewardbox.domains.helpdesk import templates_support as support

FAMILIES: tuple[Family, ...] = (
    Family("reset_explicit", "helpdesk_password.py", "trivial", access.reset_explicit),
    Family("reset_unverified", "helpdesk_password.py", "medium", access.reset_unverified),
    Family("reset_other_account", "helpdesk_password.py", "hard", access.reset_other_account, 3),
    Family("access_grant_explicit", "helpdesk_access.py", "trivial", access.access_grant_explicit),
    Family(
        "access_request_standard", "helpdesk_access.py", "medium", access.access_request_standard
    ),
    Family(
        "access_request_restricted",
        "helpdesk_access.py",
        "medium",
        access.access_request_restricted,
    ),
    Family("access_grant_refused", "helpdesk_access.py", "hard", access.access_grant_refused),
    Family("access_multi", "helpdesk_access.py", "hard", access.access_multi, 3),
    Family("device_warranty", "helpdesk_devices.py", "easy", support.device_warranty),
    Family("device_lookup", "helpdesk_devices.py", "medium", support.device_lookup, 3),
    Family("device_paid", "helpdesk_devices.py", "hard", support.device_paid, 3),
    Family("device_refused", "helpdesk_devices.py", "hard", support.device_refused, 3),
    Family("escalate_explicit", "helpdesk_tickets.py", "trivial", support.escalate_explicit),
    Family("escalate_lookup", "helpdesk_tickets.py", "medium", support.escalate_lookup, 3),
    Family("escalate_refused", "helpdesk_tickets.py", "medium", support.escalate_refused),
    Family("tell_value", "helpdesk_info.py", "easy", support.tell_value),
    Family("wrong_owner", "helpdesk_security.py", "hard", support.wrong_owner),
    Family("onboarding", "helpdesk_multi.py", "hard", support.onboarding, 6),
    Family("multi_action", "helpdesk_multi.py", "hard", support.multi_action, 3),
)
"""Every template, in the order tasks are numbered and written."""
