"""The operator's allow-lists: the existing buckets and the git hosts a composite may name.

Teams write composites, so ``spec.backup.bucket.name`` and ``spec.source.url``
are untrusted. The function input says what they may name:

- ``backup.allowedBuckets``: shell-style patterns of existing buckets, matched
  against the whole name and case-sensitively (S3 names are lower case); ``*``
  is any run of characters, ``?`` one character, nothing else is special. None
  by default, so a composite can only back up into the dedicated bucket the
  function composes for it.
- ``source.allowedHosts``: git host patterns. ``*`` allows any public host;
  ``host``, ``*.domain`` (any name below the domain, at any depth, not the
  domain itself) and ``[IPv6]``, each optionally with ``:port`` (matched against
  the URL's port, or its scheme's default: 443, 80 or 22), allow what they
  name, public or not. Loopback, link-local, private and other non-public
  addresses, and cluster-internal names (``localhost``, names without a dot,
  ``*.svc``, ``*.local`` such as ``*.svc.cluster.local``, ``*.internal``,
  ``*.localdomain``, ``*.home.arpa``), are allowed only by a pattern other than
  ``*``. ``source.allowHTTP`` allows plain ``http://`` URLs; https and ssh only
  by default.

Pure: a host is judged by its text alone and never resolved. A public name
whose DNS answer is a private address cannot be caught without resolving it
(and the answer may change after the check), which is why Flux's egress must
still be held by the operator's NetworkPolicy. No message quotes the URL: its
user-info part may hold a user name.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address
from urllib.parse import urlsplit

ANY_PUBLIC_HOST = "*"
DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22}
# Names that only resolve inside a cluster, a cloud network or a home network.
# Names without a dot are cluster-internal too: the pod's DNS search path
# turns them into Services.
INTERNAL_SUFFIXES = ("svc", "local", "internal", "localdomain", "home.arpa")
LOOPBACK_NAME = "localhost"
# IPv6 prefixes that carry an IPv4 address in their last 32 bits (RFC 6052's NAT64).
_NAT64 = IPv6Network("64:ff9b::/96")

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_DNS_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_HOST_PATTERN = re.compile(
    r"(?:\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<wildcard>\*\.)?(?P<name>[a-z0-9_.-]+))(?::(?P<port>[0-9]{1,5}))?"
)
_BUCKET_PATTERN = re.compile(r"[a-z0-9.?*-]{1,63}")

HOST_FORM = (
    "its host must be a DNS name in ASCII (punycode for international names) or an IP address"
)
PLAIN_HTTP = (
    "plain http is refused unless the function input's source.allowHTTP is true; "
    "use an https or ssh URL"
)
NOT_LISTED = "its host is not one the function input's source.allowedHosts allows"


def check_bucket_pattern(text: str) -> str:
    """Check one ``backup.allowedBuckets`` pattern; return it unchanged."""
    if not _BUCKET_PATTERN.fullmatch(text):
        msg = (
            "must be a bucket name pattern of at most 63 characters: lowercase letters, "
            f"digits, '.', '-' and the wildcards * and ? (got {text!r})"
        )
        raise ValueError(msg)
    return text


def bucket_allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether ``name`` matches one of the patterns, as a whole and case-sensitively."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True)
class HostPattern:
    """One ``source.allowedHosts`` pattern other than ``*``."""

    host: str  # a DNS name or IPv4 address in lower case, or an IPv6 address, compressed
    below: bool  # ``*.host``: the names below ``host``, not ``host`` itself
    port: int | None  # None: any port

    def matches(self, host: str, port: int) -> bool:
        """Whether the pattern allows ``host`` (normalised by ``url_host``) on ``port``."""
        if self.port is not None and self.port != port:
            return False
        if self.below:
            return host.endswith(f".{self.host}")
        if ":" in self.host:
            address = _address(host)
            return address is not None and address.compressed == self.host
        return host == self.host


# Parsed on every composition of a composite with a source: once per pattern instead.
@functools.lru_cache(maxsize=256)
def parse_host_pattern(text: str) -> HostPattern:
    """Parse a host pattern: ``host``, ``*.domain`` or ``[IPv6]``, each with an optional ``:port``.

    Raises:
        ValueError: the text is no such pattern.
    """
    shape = _HOST_PATTERN.fullmatch(text)
    port = int(shape["port"]) if shape and shape["port"] else None
    if shape is None or (port is not None and not 0 < port < 65536):
        raise ValueError(_pattern_rule(text))
    if shape["ipv6"]:
        try:
            return HostPattern(IPv6Address(shape["ipv6"]).compressed, below=False, port=port)
        except ValueError:
            raise ValueError(_pattern_rule(text)) from None
    name = shape["name"]
    if len(name) > 253 or not _DNS_NAME.fullmatch(name):
        raise ValueError(_pattern_rule(text))
    if _ends_in_number(name):
        # An IPv4 address: exact, in its plain dotted form.
        try:
            IPv4Address(name)
        except ValueError:
            raise ValueError(_pattern_rule(text)) from None
        if shape["wildcard"]:
            raise ValueError(_pattern_rule(text))
    return HostPattern(name, below=bool(shape["wildcard"]), port=port)


def check_host_pattern(text: str) -> str:
    """Check one ``source.allowedHosts`` pattern (``*`` too); return it unchanged."""
    if text != ANY_PUBLIC_HOST:
        parse_host_pattern(text)
    return text


def _pattern_rule(text: str) -> str:
    return (
        "must be *, a host, *.domain or [IPv6 address], the last three optionally "
        f"with :port, in lower case (got {text!r})"
    )


def check_source_url(url: str, allowed_hosts: Sequence[str], *, allow_http: bool) -> None:
    """Refuse a git URL (already checked by ``rules.check_git_url``) the allow-lists refuse.

    Judged without resolving the host: see the module's docstring.

    Raises:
        ValueError: stating the rule, never quoting the URL.
    """
    parts = urlsplit(url)
    if parts.scheme == "http" and not allow_http:
        raise ValueError(PLAIN_HTTP)
    host = url_host(parts.hostname or "")
    if host is None:
        raise ValueError(HOST_FORM)
    port = DEFAULT_PORTS[parts.scheme] if parts.port is None else parts.port
    patterns = [parse_host_pattern(p) for p in allowed_hosts if p != ANY_PUBLIC_HOST]
    if any(pattern.matches(host, port) for pattern in patterns):
        return
    if ANY_PUBLIC_HOST not in allowed_hosts:
        raise ValueError(NOT_LISTED)
    kind = non_public(host)
    if kind is not None:
        msg = (
            f"its host is {kind}: such a host is allowed only when the function input's "
            "source.allowedHosts lists it explicitly (by an entry other than *)"
        )
        raise ValueError(msg)


def url_host(hostname: str) -> str | None:
    """A URL's host (as ``urlsplit`` gives it) without a trailing dot; None if it is no host.

    A host is a DNS name in ASCII or an IP address. Go's URL parser, which
    Flux uses, decodes ``%`` escapes in a host; none is allowed here, so what
    is judged is what Flux connects to.
    """
    host = hostname.removesuffix(".")
    if ":" in host:
        return host if _address(host) is not None else None
    if len(host) > 253 or not _DNS_NAME.fullmatch(host):
        return None
    return host


def non_public(host: str) -> str | None:
    """What kind of non-public host ``host`` (normalised by ``url_host``) is; None when public."""
    address = _address(host)
    if address is not None:
        return _non_public_address(address)
    if _ends_in_number(host):
        # 127.1, 2130706433 and 0x7f.1 are all 127.0.0.1 to inet_aton.
        return "a numeric host in another form than a plain IPv4 address"
    if host == LOOPBACK_NAME or host.endswith(f".{LOOPBACK_NAME}"):
        return "a loopback name"
    if "." not in host:
        return "a name without a dot (a cluster-internal Service)"
    if any(host.endswith(f".{suffix}") for suffix in INTERNAL_SUFFIXES):
        return "a cluster-internal or private name"
    return None


def _non_public_address(address: IPv4Address | IPv6Address) -> str | None:
    if isinstance(address, IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return _non_public_address(embedded)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_private:
        return "a private address"
    if address.is_multicast or not address.is_global:
        return "a reserved address"
    return None


def _embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 address reaches."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _address(host: str) -> IPv4Address | IPv6Address | None:
    try:
        return ip_address(host)
    except ValueError:
        return None


def _ends_in_number(name: str) -> bool:
    """Whether the last label is a number, as URL parsers decide to read an IPv4 address."""
    return bool(_NUMERIC_LABEL.fullmatch(name.rpartition(".")[2]))
