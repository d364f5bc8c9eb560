"""sandbox.spacefront: the Space's TLS front, with real kube-apiservers behind it.

Two hosted control planes (API servers on the session's etcd) sit behind one
front; every client the platform uses talks to them through it: the official
Python client, kubectl (client-go), the provider's own client, and plain HTTP
for the edges (status codes, a watch as it streams).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from provider import kube
from provider import kubeconfig as kubeconfig_allowlist
from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.kubectl import KUBECTL_BIN, kubectl
from sandbox.spacefront import (
    TOKEN_EXCHANGE_PATH,
    CloudAuth,
    SpaceFront,
    bearer_token,
    forwarded_headers,
    parse_route,
)

A = ("team-a", "ctp1")
B = ("team-b", "ctp2")


# --- pure parts ------------------------------------------------------------------


@dataclass
class RouteCase:
    reason: str
    path: str
    expected: tuple[str, str, str] | None


ROUTES = [
    RouteCase(
        "a path below a control plane's prefix",
        "/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c/k8s/api/v1/namespaces",
        ("g", "c", "/api/v1/namespaces"),
    ),
    RouteCase(
        "the bare prefix is the API server's root",
        "/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c/k8s",
        ("g", "c", "/"),
    ),
    RouteCase(
        "percent-encoding is kept for the API server to decode",
        "/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c/k8s/api/v1/x%2Fy",
        ("g", "c", "/api/v1/x%2Fy"),
    ),
    RouteCase(
        "another version of the Spaces API is not routed",
        "/apis/spaces.upbound.io/v1alpha1/namespaces/g/controlplanes/c/k8s/api",
        None,
    ),
    RouteCase(
        "a control plane path without /k8s is the Spaces API, not a control plane",
        "/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c",
        None,
    ),
    RouteCase(
        "a prefix that only starts like /k8s is not it",
        "/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c/k8sx/api",
        None,
    ),
    RouteCase("the front's own root", "/", None),
]


@pytest.mark.parametrize("case", ROUTES, ids=lambda case: case.reason)
def test_a_request_path_names_its_control_plane_and_the_path_below_it(case: RouteCase) -> None:
    route = parse_route(case.path)
    found = None if route is None else (route.group, route.name, route.rest)
    assert found == case.expected


@dataclass
class TokenCase:
    reason: str
    header: str | None
    expected: str | None


TOKENS = [
    TokenCase("a bearer token", "Bearer abc.def", "abc.def"),
    TokenCase("the scheme in any case", "bearer abc", "abc"),
    TokenCase("no header", None, None),
    TokenCase("basic authentication is no token", "Basic dXNlcjpwYXNz", None),
    TokenCase("an empty bearer token", "Bearer  ", None),
]


@pytest.mark.parametrize("case", TOKENS, ids=lambda case: case.reason)
def test_the_token_is_read_from_a_bearer_authorization_header(case: TokenCase) -> None:
    assert bearer_token(case.header) == case.expected


def test_hop_by_hop_headers_and_those_connection_names_are_not_forwarded() -> None:
    headers = [
        ("Content-Type", "application/json"),
        ("Connection", "keep-alive, X-Private"),
        ("X-Private", "1"),
        ("Transfer-Encoding", "chunked"),
        ("Authorization", "Bearer t"),
        ("Accept", "application/json"),
    ]
    kept = forwarded_headers(
        headers, frozenset({"connection", "transfer-encoding", "authorization"})
    )
    assert list(kept.items()) == [
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    ]


# --- against real API servers --------------------------------------------------------


@pytest.fixture(scope="module")
def planes(kube_etcd: Etcd) -> Iterator[dict[tuple[str, str], APIServer]]:
    """Two hosted control planes' API servers, for the whole module."""
    with APIServerFactory(kube_etcd) as factory:
        yield {A: factory(name="ctp1"), B: factory(name="ctp2")}


@pytest.fixture
def front(planes: dict[tuple[str, str], APIServer]) -> Iterator[SpaceFront]:
    """A Space front with both control planes registered."""
    with SpaceFront() as space_front:
        for (group, name), server in planes.items():
            space_front.register(group, name, server)
        yield space_front


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def credentials(kubeconfig: str) -> kubeconfig_allowlist.Credentials:
    """The kubeconfig's server, CA and token, read by the provider's allow-list."""
    return kubeconfig_allowlist.parse(yaml.safe_load(kubeconfig))


def tls_trusting(kubeconfig: str) -> ssl.SSLContext:
    ca = credentials(kubeconfig).ca_pem
    assert ca is not None
    return ssl.create_default_context(cadata=ca)


def call(
    kubeconfig: str,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    content_type: str = "application/json",
    token: str | None = None,
) -> Answer:
    """One request through the front as the kubeconfig's user (or with ``token``)."""
    found = credentials(kubeconfig)
    server = found.server.removeprefix("https://")
    host, _, prefix = server.partition("/")
    connection = http.client.HTTPSConnection(host, context=tls_trusting(kubeconfig), timeout=30)
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if (token or found.token) is not None:
        headers["Authorization"] = f"Bearer {token or found.token}"
    try:
        connection.request(
            method, f"/{prefix}{path}" if prefix else path, body=body, headers=headers
        )
        response = connection.getresponse()
        return Answer(response.status, response.getheader("Content-Type") or "", response.read())
    finally:
        connection.close()


def python_client(kubeconfig: str) -> Any:
    """The official client's CoreV1Api from a kubeconfig's text."""
    api = config.new_client_from_config_dict(yaml.safe_load(kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def admin(server: APIServer) -> Any:
    """The official client straight at the API server, as its admin."""
    return client.CoreV1Api(config.new_client_from_config(str(server.kubeconfig_path)))  # type: ignore[no-untyped-call]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_the_kubeconfig_is_the_one_a_space_writes_and_the_provider_allow_list_accepts_it(
    front: SpaceFront,
) -> None:
    secret = front.connection_secret(*A)
    assert set(secret) == {"kubeconfig", "kubeconfig-incluster"}
    for text in secret.values():
        found = credentials(text)
        assert found.server == (
            f"{front.url}/apis/spaces.upbound.io/v1beta1/namespaces/team-a/controlplanes/ctp1/k8s"
        )
        assert found.token
        assert found.client_certificate_pem is None
        assert found.ca_pem == front.ca_pem.decode()
    document = yaml.safe_load(secret["kubeconfig"])
    assert document["current-context"] == "team-a-ctp1"
    assert base64.b64decode(document["clusters"][0]["cluster"]["certificate-authority-data"]) == (
        front.ca_pem
    )


def test_the_official_client_lists_namespaces_through_the_front(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer]
) -> None:
    names = {ns.metadata.name for ns in python_client(front.kubeconfig(*A)).list_namespace().items}
    direct = {ns.metadata.name for ns in admin(planes[A]).list_namespace().items}
    assert "default" in names
    assert names == direct


@dataclass
class PatchCase:
    reason: str
    content_type: str
    patch: dict[str, Any]
    expected: dict[str, str]


PATCHES = [
    PatchCase(
        "a JSON merge patch",
        "application/merge-patch+json",
        {"data": {"b": "2"}},
        {"a": "1", "b": "2"},
    ),
    PatchCase(
        "a strategic merge patch",
        "application/strategic-merge-patch+json",
        {"data": {"a": "changed"}},
        {"a": "changed"},
    ),
    PatchCase(
        "a server-side apply, YAML in the body",
        "application/apply-patch+yaml",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"c": "3"}},
        {"a": "1", "c": "3"},
    ),
]


@pytest.mark.parametrize("case", PATCHES, ids=lambda case: case.reason)
def test_the_official_client_creates_and_patches_a_config_map_through_the_front(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer], case: PatchCase
) -> None:
    core = python_client(front.kubeconfig(*A))
    name = unique("patched")
    core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"a": "1"}})
    patch = dict(case.patch)
    if case.content_type.startswith("application/apply-patch"):
        patch["metadata"] = {"name": name}
    core.patch_namespaced_config_map(
        name, "default", patch, field_manager="spacefront-test", _content_type=case.content_type
    )
    # Through the front and straight at the API server: the same object, in the right place.
    assert core.read_namespaced_config_map(name, "default").data == case.expected
    assert admin(planes[A]).read_namespaced_config_map(name, "default").data == case.expected


@dataclass
class VerbCase:
    reason: str
    method: str
    path: str
    body: dict[str, Any] | None
    status: int


def config_map(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    }


VERBS = [
    VerbCase(
        "POST creates",
        "POST",
        "/api/v1/namespaces/default/configmaps",
        config_map("verbs", "created"),
        201,
    ),
    VerbCase(
        "POST of an existing object: the API server's conflict passes through",
        "POST",
        "/api/v1/namespaces/default/configmaps",
        config_map("verbs", "again"),
        409,
    ),
    VerbCase(
        "PUT replaces",
        "PUT",
        "/api/v1/namespaces/default/configmaps/verbs",
        config_map("verbs", "replaced"),
        200,
    ),
    VerbCase("GET reads", "GET", "/api/v1/namespaces/default/configmaps/verbs", None, 200),
    VerbCase("DELETE deletes", "DELETE", "/api/v1/namespaces/default/configmaps/verbs", None, 200),
    VerbCase(
        "GET of what is gone: not found passes through",
        "GET",
        "/api/v1/namespaces/default/configmaps/verbs",
        None,
        404,
    ),
]


def test_every_verb_and_its_status_passes_through_the_front(front: SpaceFront) -> None:
    kubeconfig = front.kubeconfig(*B)
    seen = []
    for case in VERBS:
        body = None if case.body is None else json.dumps(case.body).encode()
        answer = call(kubeconfig, case.method, case.path, body=body)
        assert answer.content_type == "application/json", case.reason
        seen.append((case.reason, answer.status))
    assert seen == [(case.reason, case.status) for case in VERBS]


def test_a_watch_streams_through_the_front_and_sees_an_event(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer]
) -> None:
    kubeconfig = front.kubeconfig(*A)
    found = credentials(kubeconfig)
    host, _, prefix = found.server.removeprefix("https://").partition("/")
    namespace = unique("watched")
    admin(planes[A]).create_namespace({"metadata": {"name": namespace}})
    connection = http.client.HTTPSConnection(host, context=tls_trusting(kubeconfig), timeout=30)
    try:
        connection.request(
            "GET",
            f"/{prefix}/api/v1/namespaces/{namespace}/configmaps?watch=true&timeoutSeconds=60",
            headers={"Authorization": f"Bearer {found.token}"},
        )
        # The API server answers a watch's headers at once and the events as they happen:
        # only after the answer has begun is there something to see.
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Transfer-Encoding") == "chunked"
        admin(planes[A]).create_namespaced_config_map(namespace, {"metadata": {"name": "seen"}})
        event = json.loads(response.readline())
    finally:
        connection.close()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "seen")


def test_a_large_list_comes_through_whole(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer]
) -> None:
    namespace = unique("large")
    direct = admin(planes[A])
    direct.create_namespace({"metadata": {"name": namespace}})
    for index in range(4):
        direct.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"big-{index}"}, "data": {"blob": "x" * 700_000}}
        )
    answer = call(front.kubeconfig(*A), "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert len(answer.body) > 2_800_000
    assert [len(item["data"]["blob"]) for item in answer.json()["items"]] == [700_000] * 4


@pytest.mark.skipif(not KUBECTL_BIN.is_file(), reason="kubectl is not built: run tools/build.sh")
def test_kubectl_a_go_client_reads_through_the_front(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer], tmp_path: Path
) -> None:
    namespace = unique("kubectl")
    admin(planes[A]).create_namespace({"metadata": {"name": namespace}})
    path = tmp_path / "kubeconfig"
    path.write_text(front.kubeconfig(*A))
    output = kubectl(path, f"--cache-dir={tmp_path / 'cache'}", "get", "namespaces", "-o", "name")
    assert f"namespace/{namespace}" in output.split()


@pytest.mark.skipif(not KUBECTL_BIN.is_file(), reason="kubectl is not built: run tools/build.sh")
def test_kubectl_applies_server_side_through_the_front(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer], tmp_path: Path
) -> None:
    name = unique("applied")
    path = tmp_path / "kubeconfig"
    path.write_text(front.kubeconfig(*B))
    manifest = json.dumps(config_map(name, "from-kubectl"))
    kubectl(
        path,
        f"--cache-dir={tmp_path / 'cache'}",
        "apply",
        "--server-side",
        "--field-manager=spacefront-test",
        "-f",
        "-",
        stdin=manifest,
    )
    assert admin(planes[B]).read_namespaced_config_map(name, "default").data == {
        "v": "from-kubectl"
    }


def test_the_front_offers_http_1_1_only_so_client_go_does_not_speak_http_2(
    front: SpaceFront,
) -> None:
    context = tls_trusting(front.kubeconfig(*A))
    context.set_alpn_protocols(["h2", "http/1.1"])
    connection = http.client.HTTPSConnection(front.url.removeprefix("https://"), context=context)
    try:
        connection.connect()
        assert isinstance(connection.sock, ssl.SSLSocket)
        assert connection.sock.selected_alpn_protocol() == "http/1.1"
    finally:
        connection.close()


def test_the_provider_client_reads_through_the_front(front: SpaceFront) -> None:
    async def namespaces() -> list[str]:
        cluster = await kube.Cluster.from_kubeconfig(
            kube.load_kubeconfig_text(front.kubeconfig(*A))
        )
        try:
            found = await cluster.request("GET", "/api/v1/namespaces")
        finally:
            await cluster.close()
        return [item["metadata"]["name"] for item in found["items"]]

    assert "default" in asyncio.run(namespaces())


@dataclass
class RefusedCase:
    reason: str
    token: str | None


REFUSED = [
    RefusedCase("no token at all", None),
    RefusedCase("a token the front never issued", "not-a-token"),
    RefusedCase("the token of another control plane", "token-of-B"),
    RefusedCase("a token with letters no issued token has", "t\u00f8ken"),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case.reason)
def test_a_request_without_the_control_planes_token_is_refused_as_the_api_server_would(
    front: SpaceFront, case: RefusedCase
) -> None:
    kubeconfig = front.kubeconfig(*A)
    document = yaml.safe_load(kubeconfig)
    if case.token == "token-of-B":
        document["users"][0]["user"]["token"] = credentials(front.kubeconfig(*B)).token
    elif case.token is None:
        del document["users"][0]["user"]["token"]
    else:
        document["users"][0]["user"]["token"] = case.token
    answer = call(yaml.safe_dump(document), "GET", "/api/v1/namespaces")
    assert answer.status == 401
    assert answer.content_type == "application/json"
    status = answer.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)


def test_a_rotated_token_replaces_the_old_one(front: SpaceFront) -> None:
    old = front.kubeconfig(*A)
    new = front.rotate_token(*A)
    assert credentials(new).token != credentials(old).token
    assert call(old, "GET", "/api/v1/namespaces").status == 401
    assert call(new, "GET", "/api/v1/namespaces").status == 200


def test_a_rotated_ca_fails_the_old_kubeconfig_and_verifies_the_new_one(front: SpaceFront) -> None:
    old = {key: front.kubeconfig(*key) for key in (A, B)}
    new = front.rotate_ca()
    assert set(new) == {A, B}
    for key in (A, B):
        assert credentials(new[key]).ca_pem != credentials(old[key]).ca_pem
        with pytest.raises(ssl.SSLCertVerificationError):
            call(old[key], "GET", "/api/v1/namespaces")
        assert call(new[key], "GET", "/api/v1/namespaces").status == 200


def test_each_prefix_reaches_its_own_control_plane(
    front: SpaceFront, planes: dict[tuple[str, str], APIServer]
) -> None:
    marks = {key: unique(f"only-in-{key[1]}") for key in planes}
    for key, server in planes.items():
        admin(server).create_namespace({"metadata": {"name": marks[key]}})
    for key in planes:
        names = {
            item["metadata"]["name"]
            for item in call(front.kubeconfig(*key), "GET", "/api/v1/namespaces").json()["items"]
        }
        assert {mark for mark in marks.values() if mark in names} == {marks[key]}


def test_an_unregistered_control_plane_is_not_found(front: SpaceFront) -> None:
    kubeconfig = front.kubeconfig(*B)
    front.unregister(*B)
    answer = call(kubeconfig, "GET", "/api/v1/namespaces")
    assert answer.status == 404
    assert answer.json()["reason"] == "NotFound"
    with pytest.raises(KeyError):
        front.kubeconfig(*B)


def test_the_spaces_own_api_is_served_at_the_root_of_the_same_host_with_its_own_token(
    planes: dict[tuple[str, str], APIServer],
) -> None:
    space_server, control_plane = planes[A], planes[B]
    mark = unique("only-in-the-space")
    admin(space_server).create_namespace({"metadata": {"name": mark}})
    with SpaceFront() as space_front:
        space = space_front.register_space(space_server)
        ctp = space_front.register(*B, control_plane)
        assert credentials(space).server == space_front.url
        names = {
            item["metadata"]["name"]
            for item in call(space, "GET", "/api/v1/namespaces").json()["items"]
        }
        assert mark in names
        # A control plane's token does not reach the Space, nor the Space's a control plane.
        assert call(space, "GET", "/api/v1/namespaces", token=credentials(ctp).token).status == 401
        assert call(ctp, "GET", "/api/v1/namespaces", token=credentials(space).token).status == 401
        # The provider's default allow-list (the Space's own host) admits the control plane.
        kubeconfig_allowlist.ControlPlaneHosts.of([]).check(
            credentials(ctp).server, space_server=credentials(space).server
        )


def test_a_front_on_its_own_address_publishes_that_host_and_its_ca(
    planes: dict[tuple[str, str], APIServer],
) -> None:
    with SpaceFront("127.0.0.2") as router:
        ctp = router.register(*A, planes[A])
        published = router.ingress_public()
        assert published["ingress-host"] == router.host
        assert router.host.startswith("127.0.0.2:")
        assert published["ingress-ca"].encode() == router.ca_pem
        assert credentials(ctp).server.startswith(f"https://{published['ingress-host']}/")
        assert call(ctp, "GET", "/api/v1/namespaces").status == 200


def exchanged(front: SpaceFront, token: str, organization: str = "acme") -> Answer:
    form = urllib.parse.urlencode(
        [
            ("audience", "upbound:spaces:api"),
            ("audience", "upbound:spaces:controlplanes"),
            ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:id_token"),
            ("subject_token", token),
            ("scope", f"upbound:org:{organization}"),
        ]
    ).encode()
    return call(
        front.space_kubeconfig(),
        "POST",
        TOKEN_EXCHANGE_PATH,
        body=form,
        content_type="application/x-www-form-urlencoded",
        token=token,
    )


def test_a_cloud_front_takes_organisation_tokens_until_they_expire_and_refuses_watches(
    planes: dict[tuple[str, str], APIServer],
) -> None:
    auth = CloudAuth(token_lifetime=1.0)
    with SpaceFront("127.0.0.3", cloud=auth) as cloud:
        space = cloud.register_space(planes[A])
        ctp = cloud.register(*B, planes[B])
        assert exchanged(cloud, "not-the-robot").status == 401
        assert exchanged(cloud, auth.robot_token, "another-org").status == 403
        answer = exchanged(cloud, auth.robot_token)
        assert answer.status == 200
        issued = answer.json()
        assert issued["expires_in"] == 1
        access = issued["access_token"]
        # One organisation token reaches the Space and every control plane.
        assert call(space, "GET", "/api/v1/namespaces", token=access).status == 200
        assert call(ctp, "GET", "/api/v1/namespaces", token=access).status == 200
        # The robot's own token and a control plane's static one are no access tokens.
        assert call(space, "GET", "/api/v1/namespaces", token=auth.robot_token).status == 401
        assert call(ctp, "GET", "/api/v1/namespaces").status == 401
        # The Space's API has no watch; the control planes' do.
        refused = call(space, "GET", "/api/v1/namespaces/default/secrets?watch=1", token=access)
        assert refused.status == 405
        assert refused.json()["reason"] == "MethodNotAllowed"
        assert auth.refused_watches == 1
        time.sleep(1.1)
        assert call(space, "GET", "/api/v1/namespaces", token=access).status == 401
