"""What a team's Backup may point at: its own prefix, and endpoints the operator allows.

Teams write Backups and BackupSchedules, so their ``spec.storage`` is untrusted:

- The prefix must be ``<namespace>/<name>/``: the first segment is the Backup's own
  namespace, the second one DNS-1123 name (the function writes the composite's
  name), nothing else. Two namespaces can then never share a key, and a Backup
  can never name, overwrite or delete another namespace's archive, whichever
  bucket and role it names. The role it assumes is bound to the namespace as
  well (the namespace is the ExternalId of every sts:AssumeRole call).
- The endpoint is empty (AWS's own, or what the operator set in the standard
  ``AWS_ENDPOINT_URL*`` variables) or one the operator listed with
  ``--allowed-s3-endpoint``. An ``http://`` endpoint is only allowed when the
  operator listed it so, scheme and all: https is the default.

Pure: no S3, no Kubernetes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from provider.runtime import dns


class TenancyError(ValueError):
    """A storage setting a team may not use; the message names the field and the rule."""


def check_prefix(namespace: str, prefix: str, where: str = "spec.storage.prefix") -> None:
    """Refuse a prefix that is not ``<namespace>/<name>/`` for the object's own namespace.

    Raises:
        TenancyError: naming the field and the rule.
    """
    head, _, rest = prefix.partition("/")
    name, slash, tail = rest.partition("/")
    if head != namespace or not slash or tail or not dns.is_subdomain(name):
        msg = f"{where} must be {namespace}/<name>/ (its own namespace, then one DNS-1123 name)"
        raise TenancyError(msg)


def check_key(prefix: str, key: str, where: str = "status.location.key") -> None:
    """Refuse an archive key that is not directly under ``prefix``.

    Raises:
        TenancyError: naming the field and the rule.
    """
    rest = key.removeprefix(prefix)
    if not prefix or rest == key or "/" in rest or not rest.endswith(".tar.gz"):
        msg = f"{where} must be an archive directly under spec.storage.prefix"
        raise TenancyError(msg)


def _origin(url: str) -> str | None:
    """``scheme://host[:port]`` in lower case, or None when ``url`` is more than an origin."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    return f"{parts.scheme}://{parts.hostname.lower()}" + (f":{port}" if port else "")


@dataclass(frozen=True)
class EndpointPolicy:
    """The S3 endpoints the operator allows a Backup's ``spec.storage.endpoint`` to name."""

    allowed: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, endpoints: Iterable[str]) -> EndpointPolicy:
        """The operator's list (flags or environment), each an origin URL.

        Raises:
            TenancyError: an entry is not ``http(s)://host[:port]``.
        """
        allowed = set()
        for endpoint in endpoints:
            for item in endpoint.replace(",", " ").split():
                origin = _origin(item)
                if origin is None:
                    msg = (
                        f"allowed S3 endpoint {item!r} must be https://host[:port] "
                        "(or http://host[:port] to allow plain http)"
                    )
                    raise TenancyError(msg)
                allowed.add(origin)
        return cls(frozenset(allowed))

    def check(self, endpoint: str, where: str = "spec.storage.endpoint") -> None:
        """Refuse an endpoint the operator has not allowed; empty means AWS's own.

        Raises:
            TenancyError: naming the field and the rule.
        """
        if not endpoint:
            return
        origin = _origin(endpoint)
        if origin is None:
            msg = f"{where} must be an https://host[:port] URL, without a path or user"
            raise TenancyError(msg)
        if origin in self.allowed:
            return
        if origin.startswith("http://"):
            msg = f"{where} must use https (the operator has not allowed this http endpoint)"
            raise TenancyError(msg)
        msg = f"{where} is not one of the endpoints the operator allows (--allowed-s3-endpoint)"
        raise TenancyError(msg)
