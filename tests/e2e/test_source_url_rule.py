"""No credentials in spec.source.url: the XRDs' CEL rule, judged by a real kube-apiserver.

Crossplane copies an XRD's schema, CEL rules included, into the CRD it serves
for the composite. Here each XRD's ``spec.source`` schema is served the same
way by a CRD of our own, so the API server itself evaluates the rule; the
function's rule (``function.rules.check_git_url``) must agree case by case, and
neither the API server's answer nor the function's message may quote the
password.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from function import rules
from sandbox.apiserver import APIServer
from sandbox.spaces import Kube
from tests.schemas import XRDS

GROUP, VERSION = "probes.test.acme.io", "v1"
PASSWORD = "s3cr3t-pa55"
MESSAGE = "spec.source.url must not carry credentials"
XRD_FILES = {
    "v2": XRDS / "controlplane.yaml",
    "legacy": XRDS / "legacy" / "xcontrolplane.yaml",
}


def source_schema(xrd_file: Path) -> dict[str, Any]:
    """The XRD's ``spec.source`` schema (its first version's)."""
    xrd = yaml.safe_load(xrd_file.read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    source: dict[str, Any] = schema["properties"]["spec"]["properties"]["source"]
    return source


def probe_crd(flavour: str) -> dict[str, Any]:
    """A cluster-scoped CRD whose spec.source is the XRD's."""
    plural = f"{flavour}sourceprobes"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "plural": plural,
                "singular": f"{flavour}sourceprobe",
                "kind": f"{flavour.capitalize()}SourceProbe",
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"source": source_schema(XRD_FILES[flavour])},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def kube(apiserver: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    kube = Kube(apiserver)
    folder = tmp_path_factory.mktemp("probe-crds")
    for flavour in XRD_FILES:
        (folder / f"{flavour}.yaml").write_text(yaml.safe_dump(probe_crd(flavour)))
    kube.apply_crds(folder)
    yield kube


@dataclass
class UrlCase:
    reason: str
    url: str
    want_refusal: str | None  # what the API server's answer says; None when accepted


SCHEME = "spec.source.url must be an http, https or ssh URL"
URL_CASES = [
    UrlCase(
        "A password in the user-info part.", f"https://alice:{PASSWORD}@github.com/a/x", MESSAGE
    ),
    UrlCase("An empty password field.", "https://alice:@github.com/a/x", MESSAGE),
    UrlCase("A password in an ssh URL.", f"ssh://git:{PASSWORD}@github.com/a/x", MESSAGE),
    UrlCase("A password with a port.", f"https://alice:{PASSWORD}@github.com:443/a/x", MESSAGE),
    UrlCase("An @ inside the user-info part.", f"https://a@b:{PASSWORD}@github.com/a/x", MESSAGE),
    UrlCase(
        "A password and a scheme of no git server.", f"ftp://alice:{PASSWORD}@x.example/a", SCHEME
    ),
    UrlCase("A plain https URL.", "https://github.com/acmeorg/x", None),
    UrlCase("A user name alone, as ssh uses.", "ssh://git@github.com/acmeorg/x", None),
    UrlCase("A port without user-info.", "https://git.example:8443/acmeorg/x", None),
    UrlCase("An @ in the path, after the host.", "https://git.example:8443/x@v1", None),
]


@pytest.mark.parametrize("flavour", list(XRD_FILES))
@pytest.mark.parametrize("case", URL_CASES, ids=lambda case: case.reason)
def test_the_api_server_and_the_function_refuse_the_same_urls_without_quoting_a_password(
    kube: Kube, case: UrlCase, flavour: str
) -> None:
    plural = f"{flavour}sourceprobes"
    name = f"probe-{abs(hash((case.url, flavour))) % 10**8}"
    obj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": f"{flavour.capitalize()}SourceProbe",
        "metadata": {"name": name},
        "spec": {"source": {"url": case.url}},
    }
    answer = ""
    try:
        kube.create(plural, obj, group=GROUP, version=VERSION)
    except ApiException as error:
        assert error.status == 422, error.body
        answer = str(json.loads(str(error.body))["message"])
    if case.want_refusal is None:
        assert answer == "", (case.reason, answer)
    else:
        assert case.want_refusal in answer, (case.reason, answer)
        assert PASSWORD not in answer, "the API server quotes the password"

    message = ""
    try:
        rules.check_git_url(case.url)
    except ValueError as error:
        message = str(error)
    assert bool(message) is (case.want_refusal is not None), case.reason
    assert PASSWORD not in message
