"""Kubernetes object names (DNS-1123), as the API server checks them.

A namespace is a label; most other names, and API groups, are subdomains.
The archive, the tenancy rules and the command line check names alike here.
"""

from __future__ import annotations

import re

_LABEL = "[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
MAX_SUBDOMAIN = 253


def is_label(value: object) -> bool:
    """Whether ``value`` is a string that is a DNS-1123 label (at most 63 characters)."""
    return isinstance(value, str) and _LABEL_RE.fullmatch(value) is not None


def is_subdomain(value: object) -> bool:
    """Whether ``value`` is a string that is a DNS-1123 subdomain (at most 253 characters)."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_SUBDOMAIN
        and _SUBDOMAIN_RE.fullmatch(value) is not None
    )
