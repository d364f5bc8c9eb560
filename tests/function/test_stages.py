"""A staged sync: one Kustomization per stage, Crossplane-aware health, variables, SOPS, status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from function.resources import flux
from tests import builders as b
from tests import schemas
from tests.function.test_compose import condition, run

REVISION = "main@sha1:5e88fe3a1c2b4d6e8f0a1b2c3d4e5f6a7b8c9d0e"
OLD_REVISION = "main@sha1:0000000000000000000000000000000000000000"
THING_CHECK = {
    "apiVersion": "example.org/v1",
    "kind": "Thing",
    "current": "status.phase == 'Ready'",
}
STAGED = {
    **b.SOURCE,
    "stages": [
        {"name": "packages", "path": "./packages"},
        {
            "name": "config",
            "path": "./config",
            "dependsOn": ["packages"],
            "timeout": "10m",
            "healthCheckExprs": [THING_CHECK],
        },
    ],
}
DEFAULT_CHECKS = [
    check.model_dump(by_alias=True, exclude_none=True) for check in flux.CROSSPLANE_HEALTH_CHECKS
]


def _kustomization(
    revision: str = REVISION,
    *,
    name: str = "myctp-packages",
    ready: bool = True,
    message: str = "",
) -> dict[str, Any]:
    """An observed Kustomization, last applied at ``revision``."""
    return b.ready(
        {"kind": "Kustomization", "metadata": {"name": name}},
        status="True" if ready else "False",
        reason="ReconciliationSucceeded" if ready else "HealthCheckFailed",
        message=message or f"Applied revision: {revision}",
        extra_status={"lastAppliedRevision": revision, "lastAttemptedRevision": REVISION},
    )


REPOSITORY = b.ready(extra_status={"artifact": {"revision": REVISION}})


@dataclass
class StageResourcesCase:
    reason: str
    seen: dict[str, dict[str, Any]]
    want: set[str] = field(default_factory=set)


STAGE_RESOURCES_CASES = [
    StageResourcesCase(
        "Before the Instance is ready only the GitRepository is composed.",
        {"instance": b.not_ready()},
        {"instance", "git-repository"},
    ),
    StageResourcesCase(
        "Once the Instance is ready each stage has a Kustomization and a Usage of the Instance.",
        {"instance": b.ready()},
        {
            "instance",
            "git-repository",
            "kustomization-packages",
            "kustomization-config",
            "usage-instance-by-kustomization-packages",
            "usage-instance-by-kustomization-config",
        },
    ),
    StageResourcesCase(
        "A stage already observed stays while the Instance flickers; one not yet observed waits.",
        {"instance": b.not_ready(), "kustomization-packages": _kustomization()},
        {
            "instance",
            "git-repository",
            "kustomization-packages",
            "usage-instance-by-kustomization-packages",
        },
    ),
]


@pytest.mark.parametrize("case", STAGE_RESOURCES_CASES, ids=lambda case: case.reason)
def test_each_stage_is_composed_once_the_instance_is_ready_and_never_withdrawn(
    case: StageResourcesCase,
) -> None:
    assert set(run({"source": STAGED}, case.seen).resources) == case.want, case.reason


def test_each_stage_is_a_kustomization_of_its_own_path_waiting_for_the_stages_it_depends_on() -> (
    None
):
    resources = run({"source": STAGED}, {"instance": b.ready()}).resources
    packages = resources["kustomization-packages"].body
    config = resources["kustomization-config"].body
    assert (packages["metadata"]["name"], config["metadata"]["name"]) == (
        "myctp-packages",
        "myctp-config",
    )
    assert (packages["spec"]["path"], config["spec"]["path"]) == ("./packages", "./config")
    assert (packages["spec"]["timeout"], config["spec"]["timeout"]) == ("5m", "10m")
    assert "dependsOn" not in packages["spec"]
    assert config["spec"]["dependsOn"] == [{"name": "myctp-packages"}]
    for body in (packages, config):
        spec = body["spec"]
        assert spec["sourceRef"] == {"kind": "GitRepository", "name": "myctp"}
        assert spec["deletionPolicy"] == "Orphan"
        assert spec["kubeConfig"] == {
            "secretRef": {"name": "myctp-kubeconfig", "key": "kubeconfig"}
        }
        assert spec["wait"] is True
    usage = resources["usage-instance-by-kustomization-config"].body["spec"]
    assert usage["by"]["resourceRef"] == {"name": "myctp-config"}
    assert usage["of"]["resourceRef"] == {"name": "myctp"}


def test_health_checks_are_the_platforms_then_the_inputs_then_the_stages() -> None:
    platform_check = {"apiVersion": "acme.io/v1", "kind": "Database", "current": "true"}
    function_input = b.example_input()
    function_input["source"]["healthCheckExprs"] = [platform_check]
    resources = run(
        {"source": STAGED}, {"instance": b.ready()}, function_input=function_input
    ).resources
    assert resources["kustomization-packages"].body["spec"]["healthCheckExprs"] == [
        *DEFAULT_CHECKS,
        platform_check,
    ]
    assert resources["kustomization-config"].body["spec"]["healthCheckExprs"] == [
        *DEFAULT_CHECKS,
        platform_check,
        THING_CHECK,
    ]


def test_a_check_without_kind_covers_its_group_beside_the_checks_of_named_kinds() -> None:
    # Flux keys a kind-less check by its group alone: it sits beside the defaults'
    # Provider, Function and Configuration checks of pkg.crossplane.io.
    group_check = {"apiVersion": "pkg.crossplane.io/v1beta1", "current": "true"}
    staged = {
        **b.SOURCE,
        "stages": [{"name": "packages", "path": "./packages", "healthCheckExprs": [group_check]}],
    }
    resources = run({"source": staged}, {"instance": b.ready()}).resources
    rendered = resources["kustomization-packages"].body["spec"]["healthCheckExprs"]
    assert rendered == [*DEFAULT_CHECKS, group_check]
    assert "kind" not in rendered[-1]
    # Flux's own CRD (pinned) takes it: kind is not required there.
    assert schemas.problems(resources["kustomization-packages"].body) == []


@dataclass
class DefaultCheckCase:
    reason: str
    api_version: str
    kind: str
    conditions: dict[str, str]


DEFAULT_CHECK_CASES = [
    DefaultCheckCase(
        "A Provider installed and healthy.",
        "pkg.crossplane.io/v1",
        "Provider",
        {"Installed": "True", "Healthy": "True"},
    ),
    DefaultCheckCase(
        "A Function installed and healthy.",
        "pkg.crossplane.io/v1",
        "Function",
        {"Installed": "True", "Healthy": "True"},
    ),
    DefaultCheckCase(
        "A Configuration installed and healthy.",
        "pkg.crossplane.io/v1",
        "Configuration",
        {"Installed": "True", "Healthy": "True"},
    ),
    DefaultCheckCase(
        "An established XRD of Crossplane v2.",
        "apiextensions.crossplane.io/v2",
        "CompositeResourceDefinition",
        {"Established": "True"},
    ),
    DefaultCheckCase(
        "An established XRD of Crossplane v1.",
        "apiextensions.crossplane.io/v1",
        "CompositeResourceDefinition",
        {"Established": "True"},
    ),
]


@pytest.mark.parametrize("case", DEFAULT_CHECK_CASES, ids=lambda case: case.reason)
def test_the_default_health_checks_wait_for_every_condition_crossplane_reports(
    case: DefaultCheckCase,
) -> None:
    # Flux applies a check to every version of its group and kind.
    group = case.api_version.rpartition("/")[0]
    (check,) = [
        c
        for c in flux.CROSSPLANE_HEALTH_CHECKS
        if (c.api_version.rpartition("/")[0], c.kind) == (group, case.kind)
    ]
    assert check.current.startswith("has(status.conditions) && ")
    for type_ in case.conditions:
        assert f"c.type == '{type_}' && c.status == 'True'" in check.current, case.reason


@dataclass
class PackageStateCase:
    reason: str
    conditions: list[dict[str, str]]
    want: str  # what Flux makes of it: Current, Failed, or InProgress (neither holds)


PACKAGE_STATE_CASES = [
    PackageStateCase(
        "A package installed and healthy is current.",
        [
            {"type": "Installed", "status": "True", "reason": "ActivePackageRevision"},
            {"type": "Healthy", "status": "True", "reason": "HealthyPackageRevision"},
        ],
        "Current",
    ),
    PackageStateCase(
        "A package Crossplane cannot fetch fails at once, not at the stage's timeout.",
        [
            {
                "type": "Installed",
                "status": "False",
                "reason": "UnpackingPackage",
                "message": "cannot unpack package: MANIFEST_UNKNOWN",
            },
            {"type": "Healthy", "status": "False", "reason": "UnhealthyPackageRevision"},
        ],
        "Failed",
    ),
    PackageStateCase(
        "Healthy=False while the revision's health is unknown is every install's start: it waits.",
        [
            {"type": "Installed", "status": "True", "reason": "ActivePackageRevision"},
            {
                "type": "Healthy",
                "status": "False",
                "reason": "UnhealthyPackageRevision",
                "message": 'Package revision health is "Unknown"',
            },
        ],
        "InProgress",
    ),
    PackageStateCase("A package with no conditions yet waits.", [], "InProgress"),
]


@pytest.mark.parametrize("case", PACKAGE_STATE_CASES, ids=lambda case: case.reason)
def test_the_default_package_check_fails_only_what_crossplane_cannot_fetch(
    case: PackageStateCase,
) -> None:
    # Evaluated with CEL as Flux evaluates it: failed before current.
    (check,) = [c for c in flux.CROSSPLANE_HEALTH_CHECKS if c.kind == "Configuration"]
    assert check.failed is not None
    env = celpy.Environment()
    status = {"conditions": case.conditions} if case.conditions else {}
    activation = {"status": json_to_cel(status)}

    def holds(expression: str) -> bool:
        return bool(env.program(env.compile(expression)).evaluate(activation))

    got = "Failed" if holds(check.failed) else "Current" if holds(check.current) else "InProgress"
    assert got == case.want, case.reason


@dataclass
class VariablesCase:
    reason: str
    spec: dict[str, Any]
    want: dict[str, str]
    input_variables: dict[str, str] = field(default_factory=dict)


VARIABLES_CASES = [
    VariablesCase(
        "Without backups a sync gets the control plane's name and namespace.",
        {"source": b.SOURCE},
        {"CONTROLPLANE_NAME": "myctp", "CONTROLPLANE_NAMESPACE": "team-a"},
    ),
    VariablesCase(
        "With backups it also gets where they are written.",
        {"source": b.SOURCE, "backup": {"bucket": {"region": "eu-west-1"}}},
        {
            "CONTROLPLANE_NAME": "myctp",
            "CONTROLPLANE_NAMESPACE": "team-a",
            "BACKUP_BUCKET": "acme-ctp-backups-team-a-myctp-a8ef8cc7",
            "BACKUP_PREFIX": "team-a/myctp/",
            "BACKUP_REGION": "eu-west-1",
        },
    ),
    VariablesCase(
        "An existing bucket and the input's region are the ones named.",
        {"source": b.SOURCE, "backup": {"bucket": {"name": b.SHARED_BUCKET}}},
        {
            "CONTROLPLANE_NAME": "myctp",
            "CONTROLPLANE_NAMESPACE": "team-a",
            "BACKUP_BUCKET": b.SHARED_BUCKET,
            "BACKUP_PREFIX": "team-a/myctp/",
            "BACKUP_REGION": "us-east-1",
        },
    ),
    VariablesCase(
        "The input's variables and the team's come beside the function's.",
        {"source": {**b.SOURCE, "substitute": {"ENV": "prod"}}},
        {
            "CONTROLPLANE_NAME": "myctp",
            "CONTROLPLANE_NAMESPACE": "team-a",
            "CLUSTER": "eks-1",
            "ENV": "prod",
        },
        {"CLUSTER": "eks-1"},
    ),
]


@pytest.mark.parametrize("case", VARIABLES_CASES, ids=lambda case: case.reason)
def test_every_stage_substitutes_the_platform_variables_and_the_teams(case: VariablesCase) -> None:
    function_input = b.example_input()
    function_input["source"]["variables"] = case.input_variables
    outcome = run(case.spec, {"instance": b.ready()}, function_input=function_input)
    post_build = outcome.resources["kustomization"].body["spec"]["postBuild"]
    assert post_build == {"substitute": case.want}, case.reason


def test_substitute_from_decryption_and_force_pass_through_to_every_stage() -> None:
    source = {
        **STAGED,
        "substituteFrom": [
            {"kind": "ConfigMap", "name": "team-vars"},
            {"kind": "Secret", "name": "team-secrets", "optional": True},
        ],
        "decryption": {"secretRef": {"name": "sops-age"}},
        "force": True,
    }
    resources = run({"source": source}, {"instance": b.ready()}).resources
    for name in ("kustomization-packages", "kustomization-config"):
        spec = resources[name].body["spec"]
        assert spec["postBuild"]["substituteFrom"] == [
            {"kind": "ConfigMap", "name": "team-vars", "optional": False},
            {"kind": "Secret", "name": "team-secrets", "optional": True},
        ]
        assert spec["decryption"] == {"provider": "sops", "secretRef": {"name": "sops-age"}}
        assert spec["force"] is True


@dataclass
class SyncedCase:
    reason: str
    seen: dict[str, dict[str, Any]]
    want: tuple[str, str]  # status, reason
    want_message: str  # a fragment of the message
    want_stages: list[tuple[str, bool, str]]  # name, ready, revision


SYNCED_CASES = [
    SyncedCase(
        "Every stage Ready at the source's revision: synced.",
        {
            "git-repository": REPOSITORY,
            "kustomization-packages": _kustomization(),
            "kustomization-config": _kustomization(),
        },
        ("True", "ReconciliationSucceeded"),
        f"Applied revision: {REVISION}",
        [("packages", True, REVISION), ("config", True, REVISION)],
    ),
    SyncedCase(
        "The second stage failing its health checks: named, in Flux's words.",
        {
            "git-repository": REPOSITORY,
            "kustomization-packages": _kustomization(),
            "kustomization-config": _kustomization(
                OLD_REVISION,
                name="myctp-config",
                ready=False,
                message="health check failed after 10m: Thing/x",
            ),
        },
        ("False", "HealthCheckFailed"),
        "Kustomization myctp-config: health check failed after 10m: Thing/x",
        [("packages", True, REVISION), ("config", False, OLD_REVISION)],
    ),
    SyncedCase(
        "A stage Ready at an older revision than the source's is not synced yet.",
        {
            "git-repository": REPOSITORY,
            "kustomization-packages": _kustomization(),
            "kustomization-config": _kustomization(OLD_REVISION, name="myctp-config"),
        },
        ("False", "Progressing"),
        f"Kustomization myctp-config: Applied revision: {OLD_REVISION}; "
        f"the source is at {REVISION}",
        [("packages", True, REVISION), ("config", True, OLD_REVISION)],
    ),
    SyncedCase(
        "A stage not composed yet waits for the Instance.",
        {"git-repository": REPOSITORY, "kustomization-packages": _kustomization()},
        ("False", "WaitingForInstance"),
        "composed once the Instance is ready",
        [("packages", True, REVISION), ("config", False, "")],
    ),
]


@pytest.mark.parametrize("case", SYNCED_CASES, ids=lambda case: case.reason)
def test_source_synced_needs_every_stage_ready_at_the_sources_revision(case: SyncedCase) -> None:
    seen = (
        {"instance": b.not_ready()}
        if "kustomization-config" not in case.seen
        else {"instance": b.ready()}
    )
    outcome = run({"source": STAGED}, seen | case.seen)
    synced = condition(outcome, "SourceSynced")
    assert (synced.status, synced.reason) == case.want, case.reason
    assert case.want_message in synced.message, (case.reason, synced.message)
    stages = outcome.status["source"]["stages"]
    assert [(s["name"], s["ready"], s["revision"]) for s in stages] == case.want_stages
    assert outcome.status["source"]["lastAttemptedRevision"] == REVISION


def test_a_source_without_stages_reports_no_stages() -> None:
    outcome = run({"source": b.SOURCE}, {"instance": b.ready(), "git-repository": REPOSITORY})
    assert "stages" not in outcome.status["source"]


def test_the_default_health_checks_check_each_group_and_kind_once_as_flux_requires() -> None:
    kinds = [flux.group_kind(check) for check in flux.CROSSPLANE_HEALTH_CHECKS]
    assert len(kinds) == len(set(kinds))
