"""The hosts a hosted control plane's kubeconfig may name (``ControlPlaneHosts``): pure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.kubeconfig import ControlPlaneHosts, HostPatternError, KubeconfigError

SPACE = "https://spaces.example.com:6443"


@dataclass(frozen=True)
class HostCase:
    reason: str
    patterns: tuple[str, ...]
    server: str
    allowed: bool
    space: str | None = SPACE


HOST_CASES = [
    HostCase(
        "With no patterns the Space's own host is allowed.", (), "https://spaces.example.com", True
    ),
    HostCase(
        "With no patterns any port of the Space's host is allowed.",
        (),
        "https://spaces.example.com:8443/apis/spaces.upbound.io/k8s",
        True,
    ),
    HostCase("With no patterns another host is refused.", (), "https://evil.example.com", False),
    HostCase(
        "A subdomain of the Space's host is another host.",
        (),
        "https://a.spaces.example.com",
        False,
    ),
    HostCase("Without the Space's host and patterns nothing is allowed.", (), SPACE, False, None),
    HostCase(
        "An exact pattern allows its host on any port.",
        ("cp.example.com",),
        "https://cp.example.com:9443",
        True,
    ),
    HostCase(
        "Patterns replace the Space's host.",
        ("cp.example.com",),
        "https://spaces.example.com",
        False,
    ),
    HostCase(
        "A pattern with a port allows only that port.",
        ("cp.example.com:443",),
        "https://cp.example.com:6443",
        False,
    ),
    HostCase(
        "The https default port is 443.",
        ("cp.example.com:443",),
        "https://cp.example.com/k8s",
        True,
    ),
    HostCase(
        "A wildcard allows one label under its domain.",
        ("*.example.com",),
        "https://cp-1.example.com",
        True,
    ),
    HostCase(
        "A wildcard allows no deeper name.",
        ("*.example.com",),
        "https://a.b.example.com",
        False,
    ),
    HostCase(
        "A wildcard does not allow its domain itself.",
        ("*.example.com",),
        "https://example.com",
        False,
    ),
    HostCase(
        "A name that only ends like the domain is another domain.",
        ("*.example.com",),
        "https://cp.evilexample.com",
        False,
    ),
    HostCase(
        "Host names compare without case and a trailing dot.",
        ("CP.Example.com",),
        "https://cp.example.COM.:443",
        True,
    ),
    HostCase("An IP address pattern.", ("10.0.0.1:6443",), "https://10.0.0.1:6443", True),
    HostCase("IPv6 in brackets.", ("[::1]",), "https://[::1]:6443", True),
    HostCase(
        "A user in the URL does not hide another host.",
        ("cp.example.com",),
        "https://cp.example.com@evil.example.com",
        False,
    ),
    HostCase(
        "Plain http is refused whatever the host.",
        ("cp.example.com",),
        "http://cp.example.com",
        False,
    ),
    HostCase(
        "Several values, comma or space separated.",
        ("a.example.com, b.example.com c.example.com",),
        "https://c.example.com",
        True,
    ),
]


@pytest.mark.parametrize("case", HOST_CASES, ids=lambda case: case.reason)
def test_a_control_plane_server_is_allowed_only_on_an_allowed_host(case: HostCase) -> None:
    hosts = ControlPlaneHosts.of(case.patterns)
    if case.allowed:
        hosts.check(case.server, space_server=case.space)
        return
    with pytest.raises(KubeconfigError) as refused:
        hosts.check(case.server, space_server=case.space)
    message = str(refused.value)
    assert message.startswith("kubeconfig: "), case.reason
    # The rule, never the host the kubeconfig names.
    assert "evil" not in message and "cp.example" not in message, message


@dataclass(frozen=True)
class RuleCase:
    reason: str
    patterns: tuple[str, ...]
    server: str
    space: str | None
    rule: str


RULE_CASES = [
    RuleCase(
        "A refusal under the default names the Space's host as the rule.",
        (),
        "https://evil.example.com",
        SPACE,
        "allowed: the Space's own host",
    ),
    RuleCase(
        "A refusal under patterns names the flag.",
        ("cp.example.com",),
        "https://evil.example.com",
        SPACE,
        "allowed: --allowed-controlplane-host",
    ),
    RuleCase(
        "With nothing allowed the message says what the operator can set.",
        (),
        "https://evil.example.com",
        None,
        "the operator set no --allowed-controlplane-host",
    ),
]


@pytest.mark.parametrize("case", RULE_CASES, ids=lambda case: case.reason)
def test_a_refusal_names_the_rule(case: RuleCase) -> None:
    with pytest.raises(KubeconfigError, match=case.rule):
        ControlPlaneHosts.of(case.patterns).check(case.server, space_server=case.space)


@pytest.mark.parametrize(
    "pattern",
    [
        "https://cp.example.com",
        "cp.example.com/path",
        "user@cp.example.com",
        "cp.example.com:http",
        "cp.example.com:0",
        "cp.example.com:70000",
        "*.com",
        "*",
        "a.*.example.com",
        "cp_1.example.com",
        "cp.example.com?x",
    ],
)
def test_a_pattern_that_is_not_a_host_is_refused(pattern: str) -> None:
    with pytest.raises(HostPatternError, match="is not a host pattern"):
        ControlPlaneHosts.of([pattern])


@dataclass(frozen=True)
class PublishedCase:
    reason: str
    patterns: tuple[str, ...]
    published: str | None
    server: str
    allowed: bool
    rule: str = ""


HOST_CLUSTER = "https://10.96.0.1:443"
PUBLISHED_CASES = [
    PublishedCase(
        "The ingress host a Space publishes admits its control planes beside a host-cluster "
        "kubeconfig.",
        (),
        "spaces.example.com:8443",
        "https://spaces.example.com:8443/apis/spaces.upbound.io/v1beta1/namespaces/g/"
        "controlplanes/c/k8s",
        True,
    ),
    PublishedCase(
        "A published port is the only port allowed.",
        (),
        "spaces.example.com:8443",
        "https://spaces.example.com:9443/k8s",
        False,
        "the ingress host the Space publishes",
    ),
    PublishedCase(
        "A published host replaces the Space API's host: the host cluster is not a router.",
        (),
        "spaces.example.com",
        "https://10.96.0.1/k8s",
        False,
        "the ingress host the Space publishes",
    ),
    PublishedCase(
        "Without a published host the Space API's host is the default, as before.",
        (),
        None,
        "https://10.96.0.1:8443/k8s",
        True,
    ),
    PublishedCase(
        "The operator's patterns win over what the Space publishes.",
        ("cp.example.org",),
        "spaces.example.com",
        "https://spaces.example.com/k8s",
        False,
        "--allowed-controlplane-host",
    ),
]


@pytest.mark.parametrize("case", PUBLISHED_CASES, ids=lambda case: case.reason)
def test_the_default_host_is_what_the_space_publishes(case: PublishedCase) -> None:
    from provider.kubeconfig import HostPattern

    hosts = ControlPlaneHosts.of(case.patterns)
    published = HostPattern.parse(case.published) if case.published else None
    if case.allowed:
        hosts.check(case.server, space_server=HOST_CLUSTER, published=published)
        return
    with pytest.raises(KubeconfigError) as refused:
        hosts.check(case.server, space_server=HOST_CLUSTER, published=published)
    assert f"(allowed: {case.rule})" in str(refused.value), case.reason
