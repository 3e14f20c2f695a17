"""Turn off aiohttp's silent resend of a request whose connection closed before the answer.

aiohttp (3.9 and later) sends a GET, HEAD, PUT or DELETE a second time, without telling
the caller, when a kept-alive connection closes before the answer comes. The server may
have applied the first one: a registry's final upload PUT spends its session, a Kubernetes
DELETE finds nothing left the second time. Both of k8sjobs' HTTP clients have their own
retry loop that knows what is safe to repeat and counts every attempt, so the hidden one
goes: each attempt is then exactly one request on the wire.
"""

from __future__ import annotations

import aiohttp

__all__ = ["without_silent_resend"]


def without_silent_resend(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Return ``session`` with aiohttp's silent resend off (the caller retries instead).

    The switch is private to aiohttp; an aiohttp without it is left alone (no warning, no
    error), and the tests that count requests on the wire say whether it resends again.
    """
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session
