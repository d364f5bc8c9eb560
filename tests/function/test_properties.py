"""Properties over generated composites: valid ones validate upstream, any one gets an answer."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function import fn
from function.render import FatalError, render, request
from tests import builders as b
from tests import schemas

NAME = st.from_regex(r"[a-z]([-a-z0-9]{0,78}[a-z0-9])?", fullmatch=True)
NAMESPACE = st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
DURATION_OVER_10S = st.builds(
    lambda n, unit: f"{n}{unit}",
    st.integers(min_value=1, max_value=500),
    st.sampled_from(["m", "h"]),
) | st.integers(min_value=10, max_value=3600).map(lambda n: f"{n}s")
# A timeout a team may ask for: at most the input's source.maxTimeout (30m by default).
TIMEOUT = st.integers(min_value=1, max_value=30).map(lambda n: f"{n}m") | st.integers(
    min_value=10, max_value=1800
).map(lambda n: f"{n}s")
CRON = st.sampled_from(
    [
        "@hourly",
        "@daily",
        "@weekly",
        "@every 6h",
        "@every 1h30m",
        "0 */6 * * *",
        "*/15 1-5 * jan-jun mon",
        "5,10 0 1 * 0",
    ]
)
REF = st.one_of(
    st.builds(lambda v: {"branch": v}, st.sampled_from(["main", "release/1.x"])),
    st.builds(lambda v: {"tag": v}, st.sampled_from(["v1.0.0", "prod"])),
    st.builds(lambda v: {"semver": v}, st.sampled_from([">=1.0.0", "~2.1"])),
    st.builds(lambda v: {"commit": v}, st.just("a" * 40)),
)
URL = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https", "ssh"]),
    st.sampled_from(["github.com", "git.example.org:8443", "git@gitlab.com"]),
    st.from_regex(r"[a-z0-9-]{1,20}(/[a-z0-9-]{1,20}){0,2}", fullmatch=True),
)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


HEALTH_CHECK = st.builds(
    _drop_none,
    apiVersion=st.sampled_from(["example.org/v1", "v1", "acme.io/v1beta1"]),
    kind=st.sampled_from(["Thing", "ConfigMap"]),
    current=st.just("status.phase == 'Ready'"),
    failed=_optional(st.just("status.phase == 'Failed'")),
    inProgress=_optional(st.just("status.phase == 'Pending'")),
)
STAGE_NAMES = ["packages", "config", "apps"]


def _stage(names: list[str], index: int) -> st.SearchStrategy[dict[str, Any]]:
    """Stage ``index`` of ``names``, depending on some of the stages before it."""
    return st.builds(
        _drop_none,
        name=st.just(names[index]),
        path=st.sampled_from(["./packages", "./config"]),
        timeout=_optional(TIMEOUT),
        dependsOn=_optional(st.lists(st.sampled_from(names[:index]), unique=True))
        if index
        else st.none(),
        # A valid spec checks each group and kind once, as Flux requires.
        healthCheckExprs=_optional(
            st.lists(
                HEALTH_CHECK,
                max_size=2,
                unique_by=lambda c: (c["apiVersion"].rpartition("/")[0], c["kind"]),
            )
        ),
    )


STAGES = st.lists(st.sampled_from(STAGE_NAMES), min_size=1, max_size=3, unique=True).flatmap(
    lambda names: st.tuples(*(_stage(names, index) for index in range(len(names)))).map(list)
)
SUBSTITUTE_FROM = st.builds(
    lambda kind, name, optional: {"kind": kind, "name": name, "optional": optional},
    st.sampled_from(["ConfigMap", "Secret"]),
    NAMESPACE,
    st.booleans(),
)
SOURCE = st.builds(
    _drop_none,
    url=URL,
    stages=_optional(STAGES),
    substitute=_optional(
        st.dictionaries(
            st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), st.text(max_size=10)
        ).filter(
            lambda names: (
                not set(names)
                & {
                    "CONTROLPLANE_NAME",
                    "CONTROLPLANE_NAMESPACE",
                    "BACKUP_BUCKET",
                    "BACKUP_PREFIX",
                    "BACKUP_REGION",
                    "CLUSTER",
                }
            )
        )
    ),
    substituteFrom=_optional(st.lists(SUBSTITUTE_FROM, max_size=2)),
    decryption=_optional(st.builds(lambda n: {"secretRef": {"name": n}}, NAMESPACE)),
    force=_optional(st.booleans()),
    ref=_optional(REF),
    path=_optional(st.sampled_from(["./", "./clusters/prod"])),
    interval=_optional(DURATION_OVER_10S),
    timeout=_optional(st.integers(min_value=1, max_value=30).map(lambda n: f"{n}m")),
    secretRef=_optional(st.builds(lambda n: {"name": n}, NAMESPACE)),
    prune=_optional(st.booleans()),
    suspend=_optional(st.booleans()),
)
BACKUP = st.builds(
    _drop_none,
    schedule=_optional(CRON),
    ttl=_optional(DURATION_OVER_10S),
    suspend=_optional(st.booleans()),
    bucket=_optional(
        st.builds(
            _drop_none,
            name=_optional(st.from_regex(r"[a-z0-9][a-z0-9-]{1,40}[a-z0-9]", fullmatch=True)),
            region=_optional(st.sampled_from(["eu-west-1", "us-gov-west-1", "ap-southeast-2"])),
        )
    ),
)
SPEC = st.builds(
    _drop_none,
    crossplaneVersion=_optional(st.sampled_from(["2.1.4-up.2", "1.20.5-up.1", "2.2.1-up.1"])),
    channel=_optional(st.sampled_from(["Patch", "Stable", "Rapid"])),
    **{"class": _optional(st.sampled_from(["default", "large"]))},
    source=_optional(SOURCE),
    backup=_optional(BACKUP),
    restore=_optional(
        st.builds(lambda n: {"backupName": n}, NAME)
        | st.builds(lambda n: {"fromControlPlane": n}, NAME)
    ),
)
READINESS = st.sampled_from(["absent", "ready", "unready"])
OBSERVED_NAMES = [
    "instance",
    "git-repository",
    "kustomization",
    *(f"kustomization-{name}" for name in STAGE_NAMES),
    "backup-role",
    "backup-schedule",
]


def _observed(states: dict[str, str], with_arn: bool) -> list[dict[str, Any]]:
    items = []
    for name, state in states.items():
        if state == "absent":
            continue
        body = b.ready() if state == "ready" else b.not_ready()
        if name == "backup-role" and with_arn:
            body["status"]["atProvider"] = {"arn": b.ROLE_ARN}
        body["metadata"] = {"annotations": {b.COMPOSITION_RESOURCE_NAME: name}}
        items.append(body)
    return items


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=SPEC,
    name=NAME,
    namespace=st.none() | NAMESPACE,
    states=st.fixed_dictionaries(dict.fromkeys(OBSERVED_NAMES, READINESS)),
    with_arn=st.booleans(),
)
def test_every_object_rendered_from_a_valid_spec_validates_against_the_upstream_crds(
    spec: dict[str, Any],
    name: str,
    namespace: str | None,
    states: dict[str, str],
    with_arn: bool,
) -> None:
    # A legacy composite is bound to its claim (one with a source or a restore must be).
    claim = {"crossplane.io/claim-namespace": "team-b", "crossplane.io/claim-name": "ctp"}
    xr = b.composite(spec, name=name, namespace=namespace, labels=None if namespace else claim)
    objects = render(xr, _input_allowing_any_bucket_and_http(), _observed(states, with_arn))
    for obj in objects:
        assert schemas.problems(obj) == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=STAGES, name=NAME, namespace=NAMESPACE)
def test_each_stage_waits_only_for_kustomizations_composed_before_it(
    stages: list[dict[str, Any]], name: str, namespace: str
) -> None:
    xr = b.composite({"source": {**b.SOURCE, "stages": stages}}, name=name, namespace=namespace)
    instance = b.ready()
    instance["metadata"] = {"annotations": {b.COMPOSITION_RESOURCE_NAME: "instance"}}
    objects = render(xr, b.example_input(), [instance])
    by_resource = {
        obj["metadata"]["annotations"][b.COMPOSITION_RESOURCE_NAME]: obj
        for obj in objects[1:]
        if obj["kind"] == "Kustomization"
    }
    assert len(by_resource) == len(stages)
    earlier: set[str] = set()
    for stage in stages:
        kustomization = by_resource[f"kustomization-{stage['name']}"]
        needed = {ref["name"] for ref in kustomization["spec"].get("dependsOn", [])}
        assert needed <= earlier, (needed, earlier)
        earlier.add(kustomization["metadata"]["name"])
    assert len(earlier) == len(stages), "two stages share a Kustomization"


def _input_allowing_any_bucket_and_http() -> dict[str, Any]:
    """The example input opened up: what the allow-lists refuse is a property of its own."""
    function_input = b.example_input()
    function_input["backup"]["allowedBuckets"] = ["*"]
    function_input["source"] = {
        "allowedHosts": ["*"],
        "allowHTTP": True,
        "variables": {"CLUSTER": "eks-1"},
        "healthCheckExprs": [{"apiVersion": "acme.io/v1", "kind": "Database", "current": "true"}],
    }
    return function_input


# What JSON can carry: Crossplane builds every request from JSON, so no NaN or infinity.
ANYTHING = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
SPEC_KEYS = st.sampled_from(
    [
        "crossplaneVersion",
        "channel",
        "class",
        "source",
        "backup",
        "restore",
        "url",
        "ref",
        "fromControlPlane",
    ]
)
NEAR_SPEC = st.dictionaries(SPEC_KEYS, ANYTHING, max_size=5) | SPEC.flatmap(
    lambda spec: st.dictionaries(SPEC_KEYS, ANYTHING, max_size=2).map(lambda extra: spec | extra)
)


@settings(max_examples=300, deadline=None)
@given(spec=NEAR_SPEC, function_input=st.none() | ANYTHING | st.just(b.example_input()))
def test_any_spec_and_any_input_get_a_response_never_an_exception(
    spec: dict[str, Any], function_input: Any
) -> None:
    req = request(b.composite({}), None)
    req.observed.composite.resource.update({"spec": spec})
    if isinstance(function_input, dict):
        req.input.update(function_input)
    rsp = fn.run(req)
    fatal = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        assert len(fatal) == 1
        assert not rsp.desired.resources
        assert "internal error" not in fatal[0].message
    else:
        # The Instance, unless it waits for the Backups of spec.restore.fromControlPlane.
        assert "instance" in rsp.desired.resources or "restore-backups" in (
            rsp.requirements.resources
        )


def test_render_raises_a_fatal_error_with_the_functions_message() -> None:
    try:
        render(b.composite({"channel": "Beta"}), b.example_input())
    except FatalError as error:
        assert "spec.channel" in str(error)
    else:
        raise AssertionError("a bad channel must be fatal")


# Loopback, link-local (the cloud metadata address among them) and private networks.
NON_PUBLIC_NETWORKS = (
    "127.0.0.0/8",
    "169.254.0.0/16",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::1/128",
    "fe80::/10",
    "fc00::/7",
)
NON_PUBLIC_ADDRESS = st.sampled_from(NON_PUBLIC_NETWORKS).flatmap(
    lambda network: st.ip_addresses(network=network)
)
GIT_SCHEME = st.sampled_from(["http", "https", "ssh"])
REPOSITORY_PATH = st.from_regex(r"[a-z0-9-]{1,20}(/[a-z0-9-]{1,20}){0,2}", fullmatch=True)


def _in_url(address: IPv4Address | IPv6Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _git_url(scheme: str, host: str, port: int | None, path: str) -> str:
    return f"{scheme}://{host}{f':{port}' if port is not None else ''}/{path}"


@settings(max_examples=200, deadline=None)
@given(
    address=NON_PUBLIC_ADDRESS,
    scheme=st.sampled_from(["https", "ssh"]),
    port=st.none() | st.integers(min_value=1, max_value=65535),
    path=REPOSITORY_PATH,
)
def test_no_loopback_link_local_or_private_address_is_a_git_host_under_the_default_star(
    address: IPv4Address | IPv6Address, scheme: str, port: int | None, path: str
) -> None:
    url = _git_url(scheme, _in_url(address), port, path)
    with pytest.raises(FatalError) as refused:
        render(b.composite({"source": {"url": url}}), b.example_input())
    message = str(refused.value)
    assert message.startswith("spec.source.url: its host is a ")
    assert "source.allowedHosts lists it explicitly" in message
    assert _in_url(address) not in message, "the message quotes the URL's host"


@settings(max_examples=200, deadline=None)
@given(
    address=NON_PUBLIC_ADDRESS,
    scheme=GIT_SCHEME,
    port=st.integers(min_value=1, max_value=65535),
    path=REPOSITORY_PATH,
)
def test_a_host_the_input_lists_is_a_git_host_on_the_listed_port_and_no_other(
    address: IPv4Address | IPv6Address, scheme: str, port: int, path: str
) -> None:
    host = _in_url(address)
    function_input = b.example_input()
    function_input["source"] = {"allowedHosts": ["*", f"{host}:{port}"], "allowHTTP": True}
    url = _git_url(scheme, host, port, path)
    objects = render(b.composite({"source": {"url": url}}), function_input)
    assert [o["spec"]["url"] for o in objects if o["kind"] == "GitRepository"] == [url]

    elsewhere = _git_url(scheme, host, port % 65535 + 1, path)
    with pytest.raises(FatalError, match=r"source\.allowedHosts"):
        render(b.composite({"source": {"url": elsewhere}}), function_input)
