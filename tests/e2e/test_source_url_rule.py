"""The XRDs' CEL rules over spec.source, judged by a real kube-apiserver.

No credentials in spec.source.url; stages unique, at most eight, each depending
on other stages (only the function holds a dependency to stages listed before
it); no platform variable among the team's.

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
from function.model import Input, InvalidError, check_allowed, parse_spec
from sandbox.apiserver import APIServer
from sandbox.spaces import Kube
from tests import builders as b
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


@dataclass
class StageRuleCase:
    reason: str
    source: dict[str, Any]
    want_refusal: str | None  # a fragment of the API server's answer; None when accepted
    want_function: str | None  # a fragment of the function's message; None when accepted


URL = "https://github.com/acmeorg/x"
UNIQUE = "spec.source.stages must have unique names"
OTHER_STAGE = "must name other stages of spec.source.stages"
PLATFORM_VARIABLE = "spec.source.substitute must not set a platform variable"


def _stages(*stages: dict[str, Any]) -> dict[str, Any]:
    return {"url": URL, "stages": list(stages)}


STAGE_RULE_CASES = [
    StageRuleCase(
        "Two stages, the second depending on the first.",
        _stages(
            {"name": "packages", "path": "./p"},
            {"name": "config", "path": "./c", "dependsOn": ["packages"]},
        ),
        None,
        None,
    ),
    StageRuleCase(
        "Eight stages, each on all before it.",
        _stages(
            *(
                {"name": f"s{i}", "path": "./", "dependsOn": [f"s{j}" for j in range(i)]}
                for i in range(8)
            )
        ),
        None,
        None,
    ),
    StageRuleCase(
        "Nine stages.",
        _stages(*({"name": f"s{i}", "path": "./"} for i in range(9))),
        "must have at most 8 items",
        "at most 8 items",
    ),
    StageRuleCase(
        "Two stages of one name.",
        _stages({"name": "a", "path": "./a"}, {"name": "a", "path": "./b"}),
        UNIQUE,
        "stage names are unique",
    ),
    StageRuleCase(
        "A stage name that is no DNS label.",
        _stages({"name": "Packages", "path": "./p"}),
        "spec.source.stages[0].name",
        "spec.source.stages[0].name",
    ),
    StageRuleCase(
        "A dependency on a later stage.",
        _stages({"name": "a", "path": "./a", "dependsOn": ["b"]}, {"name": "b", "path": "./b"}),
        None,  # CEL cannot compare positions within the cost budget: the function refuses it
        "spec.source.stages[0].dependsOn[0]",
    ),
    StageRuleCase(
        "A dependency on itself.",
        _stages({"name": "a", "path": "./a", "dependsOn": ["a"]}),
        OTHER_STAGE,
        "spec.source.stages[0].dependsOn[0]",
    ),
    StageRuleCase(
        "A dependency on no stage at all.",
        _stages({"name": "a", "path": "./a"}, {"name": "b", "path": "./b", "dependsOn": ["x"]}),
        OTHER_STAGE,
        "spec.source.stages[1].dependsOn[0]",
    ),
    StageRuleCase(
        "A stage timeout under a second.",
        _stages({"name": "a", "path": "./a", "timeout": "500ms"}),
        "spec.source.stages[].timeout must be at least 1s",
        "spec.source.stages[0].timeout",
    ),
    StageRuleCase(
        "A health check without a current expression.",
        _stages(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [{"apiVersion": "x.io/v1", "kind": "T"}],
            }
        ),
        "spec.source.stages[0].healthCheckExprs[0].current",
        "spec.source.stages[0].healthCheckExprs[0].current",
    ),
    StageRuleCase(
        "A team variable of a platform variable's name.",
        {"url": URL, "substitute": {"BACKUP_PREFIX": "x"}},
        PLATFORM_VARIABLE,
        "spec.source.substitute.BACKUP_PREFIX",
    ),
    StageRuleCase(
        "A variable name Flux cannot substitute.",
        {"url": URL, "substitute": {"MY-VAR": "x"}},
        "spec.source.substitute names must be letters, digits and _",
        "spec.source.substitute",
    ),
    StageRuleCase(
        "Variables, substituteFrom, SOPS and force together.",
        {
            "url": URL,
            "substitute": {"ENV": "prod", "_x1": ""},
            "substituteFrom": [{"kind": "Secret", "name": "vars", "optional": True}],
            "decryption": {"secretRef": {"name": "sops-age"}},
            "force": True,
        },
        None,
        None,
    ),
    StageRuleCase(
        "substituteFrom naming a kind that holds no variables.",
        {"url": URL, "substituteFrom": [{"kind": "Pod", "name": "vars"}]},
        "spec.source.substituteFrom[0].kind",
        "spec.source.substituteFrom[0].kind",
    ),
]


@pytest.mark.parametrize("flavour", list(XRD_FILES))
@pytest.mark.parametrize("case", STAGE_RULE_CASES, ids=lambda case: case.reason)
def test_the_api_server_and_the_function_judge_stages_and_variables_alike(
    kube: Kube, case: StageRuleCase, flavour: str
) -> None:
    plural = f"{flavour}sourceprobes"
    name = f"stages-{abs(hash((case.reason, flavour))) % 10**8}"
    obj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": f"{flavour.capitalize()}SourceProbe",
        "metadata": {"name": name},
        "spec": {"source": case.source},
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

    message = ""
    try:
        check_allowed(parse_spec({"source": case.source}), Input.model_validate(b.example_input()))
    except InvalidError as error:
        message = str(error)
    if case.want_function is None:
        assert message == "", (case.reason, message)
    else:
        assert case.want_function in message, (case.reason, message)
