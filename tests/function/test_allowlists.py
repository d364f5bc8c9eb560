"""The operator's allow-lists of existing buckets and git hosts, judged without resolving names."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from function import allowlists

ANY = ("*",)


@dataclass(frozen=True)
class UrlCase:
    reason: str
    url: str
    refusal: str | None  # a fragment of the refusal; None when the URL is allowed
    allowed_hosts: tuple[str, ...] = ANY
    allow_http: bool = False


URL_CASES = [
    UrlCase("A public host is allowed under *.", "https://github.com/acmeorg/x", None),
    UrlCase("A public host over ssh is allowed under *.", "ssh://git@gitlab.com/acmeorg/x", None),
    UrlCase("A public IPv4 address is allowed under *.", "https://8.8.8.8/acmeorg/x", None),
    UrlCase("A name's trailing dot changes nothing.", "https://github.com./acmeorg/x", None),
    UrlCase("Plain http is refused by default.", "http://github.com/acmeorg/x", "plain http"),
    UrlCase(
        "Plain http is allowed when the input says so.",
        "http://github.com/acmeorg/x",
        None,
        allow_http=True,
    ),
    UrlCase("Loopback is refused under *.", "https://127.0.0.53/x", "a loopback address"),
    UrlCase("IPv6 loopback is refused under *.", "https://[::1]:8443/x", "a loopback address"),
    UrlCase("localhost is refused under *.", "https://localhost:3000/x", "a loopback name"),
    UrlCase("A name below localhost is loopback.", "https://git.localhost/x", "a loopback name"),
    UrlCase("The cloud metadata address is refused.", "https://169.254.169.254/x", "a link-local"),
    UrlCase("IPv6 link-local is refused.", "https://[fe80::1%25eth0]/x", "a link-local address"),
    UrlCase("10/8 is refused.", "https://10.96.0.10/x", "a private address"),
    UrlCase("172.16/12 is refused.", "https://172.31.255.1/x", "a private address"),
    UrlCase("192.168/16 is refused.", "https://192.168.1.1/x", "a private address"),
    UrlCase("fc00::/7 is refused.", "https://[fd00:ec2::254]/x", "a private address"),
    UrlCase(
        "An IPv4-mapped IPv6 address is judged as its IPv4 address.",
        "https://[::ffff:127.0.0.1]/x",
        "a loopback address",
    ),
    UrlCase(
        "A NAT64 address is judged as the IPv4 address it reaches.",
        "https://[64:ff9b::a9fe:a9fe]/x",
        "a link-local address",
    ),
    UrlCase("The unspecified address is refused.", "https://0.0.0.0/x", "an unspecified address"),
    UrlCase("Shared address space (CGNAT) is refused.", "https://100.64.0.1/x", "reserved"),
    UrlCase(
        "A shortened IPv4 form is refused: inet_aton reads 127.1 as loopback.",
        "https://127.1/x",
        "a numeric host in another form",
    ),
    UrlCase(
        "A decimal IPv4 form is refused.", "https://2130706433/x", "a numeric host in another form"
    ),
    UrlCase(
        "A hexadecimal IPv4 form is refused.", "https://0x7f.1/x", "a numeric host in another form"
    ),
    UrlCase("A name without a dot is refused.", "https://gitea/x", "a name without a dot"),
    UrlCase("*.svc is refused.", "https://gitea.platform.svc/x", "cluster-internal"),
    UrlCase("*.cluster.local is refused.", "https://a.b.svc.cluster.local/x", "cluster-internal"),
    UrlCase("*.internal is refused.", "https://metadata.google.internal/x", "cluster-internal"),
    UrlCase(
        "A %-escaped host is refused: Go decodes it into another host.",
        "https://127%2e0.0.1/x",
        "must be a DNS name in ASCII",
    ),
    UrlCase("A host not in ASCII is refused.", "https://gít.example/x", "punycode"),
    UrlCase(
        "A listed loopback host and port is allowed, over http when the input says so.",
        "http://127.0.0.1:3000/acmeorg/x.git",
        None,
        allowed_hosts=("127.0.0.1:3000",),
        allow_http=True,
    ),
    UrlCase(
        "A listed host on another port is refused.",
        "https://127.0.0.1:3001/x",
        "not one the function input's source.allowedHosts allows",
        allowed_hosts=("127.0.0.1:3000",),
    ),
    UrlCase(
        "A listed host on another port is refused under * too, being loopback.",
        "https://127.0.0.1:3001/x",
        "a loopback address",
        allowed_hosts=("*", "127.0.0.1:3000"),
    ),
    UrlCase(
        "A port in a pattern matches the scheme's default port.",
        "https://git.acme.example/x",
        None,
        allowed_hosts=("git.acme.example:443",),
    ),
    UrlCase(
        "ssh's default port is 22, not https's.",
        "ssh://git@git.acme.example/x",
        "not one",
        allowed_hosts=("git.acme.example:443",),
    ),
    UrlCase(
        "*.domain allows names below the domain, at any depth, even cluster-internal ones.",
        "https://gitea.platform.svc.cluster.local/x",
        None,
        allowed_hosts=("*.svc.cluster.local",),
    ),
    UrlCase(
        "*.domain does not allow the domain itself.",
        "https://svc.cluster.local/x",
        "not one",
        allowed_hosts=("*.svc.cluster.local",),
    ),
    UrlCase(
        "*.domain does not allow a name that only ends in the same letters.",
        "https://evilacme.example/x",
        "not one",
        allowed_hosts=("*.acme.example",),
    ),
    UrlCase(
        "An IPv6 pattern matches the address however it is written.",
        "https://[fd00:0:0::1]/x",
        None,
        allowed_hosts=("[fd00::1]",),
    ),
    UrlCase(
        "Listing hosts instead of * refuses every public host not listed.",
        "https://github.com/x",
        "not one",
        allowed_hosts=("git.acme.example",),
    ),
    UrlCase("An empty list allows no host at all.", "https://github.com/x", "not one", ()),
]


@pytest.mark.parametrize("case", URL_CASES, ids=lambda case: case.reason)
def test_a_git_url_is_allowed_or_refused_by_its_scheme_and_host(case: UrlCase) -> None:
    try:
        allowlists.check_source_url(case.url, case.allowed_hosts, allow_http=case.allow_http)
    except ValueError as error:
        assert case.refusal is not None, f"{case.reason}: refused: {error}"
        assert case.refusal in str(error), case.reason
    else:
        assert case.refusal is None, f"{case.reason}: allowed"


@dataclass(frozen=True)
class PatternCase:
    reason: str
    pattern: str
    valid: bool


HOST_PATTERN_CASES = [
    PatternCase("* alone is any public host.", "*", True),
    PatternCase("A DNS name.", "git.acme.example", True),
    PatternCase("A DNS name with a port.", "git.acme.example:8443", True),
    PatternCase("A wildcard for the names below a domain.", "*.svc.cluster.local", True),
    PatternCase("An IPv4 address with a port.", "127.0.0.1:3000", True),
    PatternCase("An IPv6 address in brackets with a port.", "[fd00::1]:22", True),
    PatternCase("A name without a dot.", "gitea", True),
    PatternCase("Upper case is refused.", "Git.Acme.Example", False),
    PatternCase("A wildcard inside a name is refused.", "git.*.example", False),
    PatternCase("A wildcard with a port but no domain is refused.", "*:443", False),
    PatternCase("Two wildcards are refused.", "*.*.example", False),
    PatternCase("A wildcard over addresses is refused.", "*.0.0.1", False),
    PatternCase("A shortened IPv4 form is refused.", "127.1", False),
    PatternCase("Port 0 is refused.", "git.acme.example:0", False),
    PatternCase("A port above 65535 is refused.", "git.acme.example:65536", False),
    PatternCase("An IPv6 address without brackets is refused.", "fd00::1", False),
    PatternCase("Brackets around no address are refused.", "[git.acme.example]", False),
    PatternCase("A scheme is refused: allowHTTP says which schemes.", "https://github.com", False),
    PatternCase("An empty label is refused.", "git..example", False),
]


@pytest.mark.parametrize("case", HOST_PATTERN_CASES, ids=lambda case: case.reason)
def test_a_host_pattern_is_checked_when_the_input_is_parsed(case: PatternCase) -> None:
    try:
        allowlists.check_host_pattern(case.pattern)
    except ValueError as error:
        assert not case.valid, f"{case.reason}: {error}"
        assert repr(case.pattern) in str(error)
    else:
        assert case.valid, case.reason


BUCKET_PATTERN_CASES = [
    PatternCase("An exact bucket name.", "acme-shared-ctp-backups", True),
    PatternCase("A prefix and *.", "acme-shared-*", True),
    PatternCase("? for one character.", "acme-shared-?", True),
    PatternCase("Upper case is refused: S3 names are lower case.", "Acme-*", False),
    PatternCase("[ is no wildcard here: refused.", "acme-[ab]", False),
    PatternCase("An empty pattern is refused.", "", False),
    PatternCase("Longer than a bucket name can be is refused.", "a" * 64, False),
]


@pytest.mark.parametrize("case", BUCKET_PATTERN_CASES, ids=lambda case: case.reason)
def test_a_bucket_pattern_is_checked_when_the_input_is_parsed(case: PatternCase) -> None:
    try:
        allowlists.check_bucket_pattern(case.pattern)
    except ValueError:
        assert not case.valid, case.reason
    else:
        assert case.valid, case.reason


@dataclass(frozen=True)
class BucketCase:
    reason: str
    name: str
    patterns: tuple[str, ...]
    allowed: bool


BUCKET_CASES = [
    BucketCase("No pattern allows no bucket.", "acme-shared", (), False),
    BucketCase("An exact name allows that bucket.", "acme-shared", ("acme-shared",), True),
    BucketCase("A pattern matches the whole name.", "acme-shared-x", ("acme-shared",), False),
    BucketCase("* matches any run of characters.", "acme-shared-x.y", ("acme-*",), True),
    BucketCase("* matches nothing too.", "acme-", ("acme-*",), True),
    BucketCase("The pattern is anchored at the start.", "x-acme-shared", ("acme-*",), False),
    BucketCase("? matches exactly one character.", "acme-12", ("acme-?",), False),
    BucketCase("One matching pattern of several is enough.", "b-1", ("a-*", "b-*"), True),
]


@pytest.mark.parametrize("case", BUCKET_CASES, ids=lambda case: case.reason)
def test_an_existing_bucket_is_allowed_only_by_a_pattern_matching_its_whole_name(
    case: BucketCase,
) -> None:
    assert allowlists.bucket_allowed(case.name, case.patterns) is case.allowed
