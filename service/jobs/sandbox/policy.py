"""Who may send C, decided once for the API and the workers alike.

User C (sources or libraries in a codegen document) is compiled and then run on this machine,
so it is accepted only where both hold: the operator allows it (RELAYCC_ALLOW_USER_C, which
when unset allows it only on a service with API keys) and jobs run in the sandbox. Without a
sandbox it is refused with the reason, never run with less isolation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.jobs.sandbox import bwrap

if TYPE_CHECKING:
    from service.settings import Settings


def user_c_refusal(settings: Settings) -> str | None:
    """Why this service refuses user C, or None when it accepts it."""
    if not settings.user_c_allowed():
        if settings.allow_user_c is None:
            return "this service has no API keys, and an open service compiles no client's C " \
                   "(set RELAYCC_ALLOW_USER_C=true to allow it)"
        return "this service does not compile them (RELAYCC_ALLOW_USER_C=false)"
    if settings.sandbox == "off":
        return "jobs run without the sandbox here (RELAYCC_SANDBOX=off), and user C needs it"
    available = bwrap.probe()
    if not available.ok:
        return f"user C needs the sandbox, and this machine has none: {available.reason}"
    return None


def sandbox_status(settings: Settings) -> tuple[bool, str]:
    """Whether jobs run in the sandbox here, and what to tell an operator about it."""
    if settings.sandbox == "off":
        return False, "turned off (RELAYCC_SANDBOX=off): jobs run in forked children; user C is refused"
    available = bwrap.probe()
    if available.ok:
        return True, available.reason
    return False, f"{available.reason}; jobs run in forked children and user C is refused"
