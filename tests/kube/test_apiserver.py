"""The kube-apiserver fixtures run a real, usable API server on a real etcd."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sandbox.apiserver import APIServer, APIServerFactory

GROUP = "test.acme.io"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def api_client(apiserver: APIServer) -> Iterator[client.ApiClient]:
    with _client(apiserver) as api:
        yield api


def _client(server: APIServer) -> client.ApiClient:
    """A Kubernetes client configured from nothing but the server's admin kubeconfig."""
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(server.kubeconfig_path)
    )
    assert isinstance(api, client.ApiClient)
    return api


def _eventually(condition: Callable[[], bool], *, timeout: float) -> bool:
    """Whether `condition` holds within `timeout` seconds, probing it every 0.2 s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _create_namespace(api: client.ApiClient, name: str) -> None:
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )


def _namespace_exists(api: client.ApiClient, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespace(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_the_api_server_answers_readyz(apiserver: APIServer) -> None:
    status, body = apiserver.get("/readyz")

    assert status == 200
    assert body == "ok"


def test_the_api_server_reports_the_kubernetes_release_it_was_built_from(
    apiserver: APIServer,
) -> None:
    status, body = apiserver.get("/version")

    assert status == 200
    version: dict[str, Any] = json.loads(body)
    assert version["gitVersion"].startswith(f"v{version['major']}.{version['minor']}.")
    assert version["gitTreeState"] == "clean"


def test_the_kubeconfig_names_the_server_url(apiserver: APIServer) -> None:
    kubeconfig = json.loads(apiserver.kubeconfig)

    assert kubeconfig["clusters"][0]["cluster"]["server"] == apiserver.url
    assert apiserver.kubeconfig_path.read_text() == apiserver.kubeconfig


def test_a_namespace_created_through_the_admin_kubeconfig_can_be_read_back(
    api_client: client.ApiClient,
) -> None:
    name = _unique("team")

    _create_namespace(api_client, name)

    namespace = client.CoreV1Api(api_client).read_namespace(name)
    assert namespace.metadata is not None
    assert namespace.metadata.name == name
    assert namespace.status is not None
    assert namespace.status.phase == "Active"


def test_a_crd_can_be_created_becomes_established_and_serves_its_kind(
    api_client: client.ApiClient,
) -> None:
    plural = _unique("widgets").replace("-", "")
    crd_name = f"{plural}.{GROUP}"
    manifest = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    extensions = client.ApiextensionsV1Api(api_client)

    extensions.create_custom_resource_definition(
        client.V1CustomResourceDefinition.model_validate(manifest)
    )

    def established() -> bool:
        status = extensions.read_custom_resource_definition_status(crd_name).status
        conditions = (status.conditions if status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    assert _eventually(established, timeout=60), f"{crd_name} was not Established within 60s"

    namespace = _unique("crd")
    _create_namespace(api_client, namespace)
    objects = client.CustomObjectsApi(api_client)
    objects.create_namespaced_custom_object(
        GROUP,
        "v1alpha1",
        namespace,
        plural,
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "Widget",
            "metadata": {"name": "small"},
            "spec": {"size": 1},
        },
    )
    widget = objects.get_namespaced_custom_object(GROUP, "v1alpha1", namespace, plural, "small")
    assert isinstance(widget, dict)
    assert widget["spec"] == {"size": 1}


def test_a_second_api_server_on_another_etcd_prefix_does_not_see_the_first_ones_namespace(
    apiserver: APIServer,
    api_client: client.ApiClient,
    apiserver_factory: APIServerFactory,
) -> None:
    first_only = _unique("first")
    _create_namespace(api_client, first_only)

    second = apiserver_factory()

    assert second.etcd_prefix != apiserver.etcd_prefix
    assert second.url != apiserver.url
    with _client(second) as second_client:
        assert not _namespace_exists(second_client, first_only)
        second_only = _unique("second")
        _create_namespace(second_client, second_only)
        assert _namespace_exists(second_client, second_only)
    assert _namespace_exists(api_client, first_only)
    assert not _namespace_exists(api_client, second_only)
