"""What a managed resource's `spec.forProvider` asks of S3 and IAM, and what we report.

Pure functions: the S3 API's parameters from provider-aws's fields, what of it
this S3 server cannot do (said in the Ready condition and an event), and the
`status.atProvider` upjet would write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
# The lifecycle rule fields the stand-in applies; any other is reported as not applied.
_LIFECYCLE_FIELDS = frozenset(
    {
        "id",
        "status",
        "filter",
        "expiration",
        "noncurrentVersionExpiration",
        "abortIncompleteMultipartUpload",
        "prefix",
    }
)


@dataclass(frozen=True)
class Desired:
    """The S3 API parameters to apply, and what cannot be applied (empty when all can)."""

    value: Any
    not_applied: list[str] = field(default_factory=list)


def first(value: Any) -> dict[str, Any]:
    """A nested block: upjet writes it as an object or as a list of at most one."""
    if isinstance(value, list):
        return dict(value[0]) if value else {}
    return dict(value or {})


def same_json(left: Any, right: Any) -> bool:
    """Whether two JSON documents (text or parsed) are equal."""
    return bool(_parsed(left) == _parsed(right))


def _parsed(document: Any) -> Any:
    return json.loads(document) if isinstance(document, str) else document


def versioning_status(for_provider: Mapping[str, Any]) -> str:
    """Enabled or Suspended (provider-aws's `Disabled` is what a bucket never versioned has)."""
    status = str(first(for_provider.get("versioningConfiguration")).get("status") or "")
    return "Suspended" if status == "Disabled" else status


def encryption_rules(for_provider: Mapping[str, Any]) -> Desired:
    """The default encryption rules; a KMS key cannot be used, as no KMS runs here."""
    rules: list[dict[str, Any]] = []
    for rule in for_provider.get("rule") or []:
        default = first(rule.get("applyServerSideEncryptionByDefault"))
        algorithm = str(default.get("sseAlgorithm") or "")
        if algorithm in _KMS_ALGORITHMS:
            key = default.get("kmsMasterKeyId") or "the AWS managed key"
            return Desired(
                None,
                [
                    f"default encryption {algorithm} with {key} (no KMS runs beside SeaweedFS; "
                    "objects are stored without default encryption)"
                ],
            )
        rules.append(
            {
                "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm},
                "BucketKeyEnabled": bool(rule.get("bucketKeyEnabled")),
            }
        )
    return Desired(rules)


def encryption_matches(desired: list[dict[str, Any]], current: list[dict[str, Any]] | None) -> bool:
    """Whether the bucket's rules carry the desired algorithms."""
    if current is None:
        return False

    def algorithms(rules: list[dict[str, Any]]) -> list[str]:
        return [str(r["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"]) for r in rules]

    return algorithms(desired) == algorithms(current)


def public_access_block(for_provider: Mapping[str, Any]) -> dict[str, bool]:
    """The four switches of a public access block."""
    return {
        "BlockPublicAcls": bool(for_provider.get("blockPublicAcls")),
        "BlockPublicPolicy": bool(for_provider.get("blockPublicPolicy")),
        "IgnorePublicAcls": bool(for_provider.get("ignorePublicAcls")),
        "RestrictPublicBuckets": bool(for_provider.get("restrictPublicBuckets")),
    }


def lifecycle_rules(for_provider: Mapping[str, Any]) -> Desired:
    """The lifecycle rules in the S3 API's form; fields beyond expiry are reported."""
    rules: list[dict[str, Any]] = []
    not_applied: list[str] = []
    for rule in for_provider.get("rule") or []:
        name = str(rule.get("id") or "")
        converted: dict[str, Any] = {"ID": name, "Status": str(rule.get("status") or "Enabled")}
        rule_filter = first(rule.get("filter"))
        prefix = rule_filter.get("prefix", rule.get("prefix"))
        converted["Filter"] = {"Prefix": str(prefix or "")}
        if rule_filter.keys() - {"prefix"}:
            not_applied.append(f"rule {name}: filter {sorted(rule_filter.keys() - {'prefix'})}")
        expiration = first(rule.get("expiration"))
        if expiration.get("days") is not None:
            converted["Expiration"] = {"Days": int(expiration["days"])}
        noncurrent = first(rule.get("noncurrentVersionExpiration"))
        if noncurrent.get("noncurrentDays") is not None:
            converted["NoncurrentVersionExpiration"] = {
                "NoncurrentDays": int(noncurrent["noncurrentDays"])
            }
        abort = first(rule.get("abortIncompleteMultipartUpload"))
        if abort.get("daysAfterInitiation") is not None:
            converted["AbortIncompleteMultipartUpload"] = {
                "DaysAfterInitiation": int(abort["daysAfterInitiation"])
            }
        ignored = sorted(set(rule) - _LIFECYCLE_FIELDS)
        if ignored:
            not_applied.append(f"rule {name}: {', '.join(ignored)}")
        rules.append(converted)
    return Desired(rules, not_applied)


def lifecycle_matches(desired: list[dict[str, Any]], current: list[dict[str, Any]] | None) -> bool:
    """Whether the bucket's rules say what the desired ones say (the fields we set)."""
    if current is None:
        return False
    trimmed = [
        {key: rule.get(key) for key in wanted}
        for wanted, rule in zip(desired, current, strict=False)
    ]
    return len(desired) == len(current) and trimmed == desired


def without_references(for_provider: Mapping[str, Any]) -> dict[str, Any]:
    """`spec.forProvider` without its references and selectors, as upjet echoes it."""
    return {
        key: value
        for key, value in for_provider.items()
        if not key.endswith(("Ref", "Refs", "Selector"))
    }


def not_applied_message(not_applied: list[str]) -> str:
    """The sentence for the Ready condition and the event."""
    return "not applied by the S3 server: " + "; ".join(not_applied) if not_applied else ""
