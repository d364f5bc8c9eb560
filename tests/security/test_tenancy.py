"""What a team's Backup may point at (issue 12, items 2 and 8): the pure rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.backup.controllers.backups import storage_spec
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError, check_key, check_prefix


@dataclass
class PrefixCase:
    reason: str
    namespace: str
    prefix: str
    allowed: bool


PREFIXES = [
    PrefixCase(
        "the namespace and one name, as the function writes it", "team-a", "team-a/myctp/", True
    ),
    PrefixCase("a dotted name is one DNS-1123 name", "team-a", "team-a/my.ctp/", True),
    PrefixCase("another namespace's prefix reaches its archives", "team-a", "team-b/myctp/", False),
    PrefixCase("a namespace that only starts the same is another", "team", "team-a/myctp/", False),
    PrefixCase("the namespace alone would cover every name of it", "team-a", "team-a/", False),
    PrefixCase("an empty prefix is the whole bucket", "team-a", "", False),
    PrefixCase("a deeper prefix is not the layout", "team-a", "team-a/myctp/more/", False),
    PrefixCase(
        "no trailing slash would share keys with longer names", "team-a", "team-a/myctp", False
    ),
    PrefixCase("a climb out is not a name", "team-a", "team-a/../team-b/", False),
    PrefixCase("upper case is not a Kubernetes name", "team-a", "team-a/MyCtp/", False),
    PrefixCase("an empty name is not a name", "team-a", "team-a//", False),
]


@pytest.mark.parametrize("case", PREFIXES, ids=lambda c: c.reason)
def test_a_backup_prefix_must_be_its_own_namespace_then_one_name(case: PrefixCase) -> None:
    if case.allowed:
        check_prefix(case.namespace, case.prefix)
        return
    with pytest.raises(TenancyError) as refused:
        check_prefix(case.namespace, case.prefix)
    assert str(refused.value) == (
        f"spec.storage.prefix must be {case.namespace}/<name>/ "
        "(its own namespace, then one DNS-1123 name)"
    )


@dataclass
class KeyCase:
    reason: str
    key: str
    allowed: bool


KEYS = [
    KeyCase("an archive directly under the prefix", "team-a/myctp/b-1.tar.gz", True),
    KeyCase("another namespace's archive", "team-b/myctp/b-1.tar.gz", False),
    KeyCase("an archive deeper down", "team-a/myctp/x/b-1.tar.gz", False),
    KeyCase("something that is not an archive", "team-a/myctp/b-1.yaml", False),
    KeyCase("the prefix alone", "team-a/myctp/", False),
]


@pytest.mark.parametrize("case", KEYS, ids=lambda c: c.reason)
def test_a_recorded_archive_key_must_be_directly_under_the_prefix(case: KeyCase) -> None:
    if case.allowed:
        check_key("team-a/myctp/", case.key)
    else:
        with pytest.raises(TenancyError, match=r"status\.location\.key must be an archive"):
            check_key("team-a/myctp/", case.key)


@dataclass
class EndpointCase:
    reason: str
    operator: list[str]
    endpoint: str
    refusal: str  # empty: allowed


ENDPOINTS = [
    EndpointCase("no endpoint is AWS's own, always allowed", [], "", ""),
    EndpointCase(
        "an endpoint the operator did not list is refused",
        [],
        "https://evil.example",
        "not one of the endpoints the operator allows",
    ),
    EndpointCase(
        "a listed https endpoint", ["https://s3.internal:9000"], "https://S3.internal:9000/", ""
    ),
    EndpointCase(
        "plain http is refused unless listed as http",
        ["https://s3.internal"],
        "http://s3.internal",
        "must use https",
    ),
    EndpointCase(
        "plain http the operator listed explicitly",
        ["http://127.0.0.1:8333"],
        "http://127.0.0.1:8333",
        "",
    ),
    EndpointCase(
        "another port of a listed host is another endpoint",
        ["https://s3.internal"],
        "https://s3.internal:8443",
        "not one of the endpoints",
    ),
    EndpointCase(
        "user info in the endpoint is refused",
        ["https://s3.internal"],
        "https://me:pw@s3.internal",
        "without a path or user",
    ),
    EndpointCase(
        "a path could address another service behind the host",
        ["https://s3.internal"],
        "https://s3.internal/other",
        "without a path or user",
    ),
    EndpointCase(
        "a scheme other than http(s) is refused",
        ["https://s3.internal"],
        "file:///etc/passwd",
        "must be an https://host[:port] URL",
    ),
    EndpointCase(
        "the environment form: a list separated by spaces or commas",
        ["https://a.internal, https://b.internal"],
        "https://b.internal",
        "",
    ),
]


@pytest.mark.parametrize("case", ENDPOINTS, ids=lambda c: c.reason)
def test_a_backup_endpoint_must_be_one_the_operator_allows(case: EndpointCase) -> None:
    policy = EndpointPolicy.of(case.operator)
    if not case.refusal:
        policy.check(case.endpoint)
        return
    with pytest.raises(TenancyError) as refused:
        policy.check(case.endpoint)
    assert str(refused.value).startswith("spec.storage.endpoint ")
    assert case.refusal in str(refused.value)
    assert "pw" not in str(refused.value)


@pytest.mark.parametrize(
    "entry",
    ["s3.internal", "ftp://s3.internal", "https://s3.internal/path", "https://u:p@s3.internal"],
)
def test_an_operator_entry_that_is_not_an_origin_is_a_usage_error(entry: str) -> None:
    with pytest.raises(TenancyError, match="allowed S3 endpoint"):
        EndpointPolicy.of([entry])


def test_the_role_is_assumed_with_the_backups_namespace_as_external_id() -> None:
    spec = storage_spec({"bucket": "b", "roleArn": "arn:aws:iam::1:role/r"}, "team-a")
    assert spec.external_id == "team-a"


@pytest.mark.parametrize(
    ("storage", "method"),
    [
        ({"bucket": "b", "roleArn": "arn:aws:iam::1:role/r"}, "AssumeRole"),
        ({"bucket": "b", "roleArn": "arn:aws:iam::1:role/r", "assumeRoleWith": ""}, "AssumeRole"),
        (
            {"bucket": "b", "roleArn": "arn:aws:iam::1:role/r", "assumeRoleWith": "WebIdentity"},
            "WebIdentity",
        ),
    ],
    ids=[
        "a storage without assumeRoleWith chains with AssumeRole, as before the field",
        "an empty assumeRoleWith chains with AssumeRole, the CRD's default",
        "WebIdentity is passed on to the writer as written",
    ],
)
def test_the_writer_is_told_how_to_reach_the_role(storage: dict[str, str], method: str) -> None:
    spec = storage_spec(storage, "team-a")
    assert (spec.assume_role_with, spec.external_id) == (method, "team-a")
