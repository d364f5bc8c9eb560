"""The plan's stages are the function's own rendering: order, paths, variables, health checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from function import model
from function.resources import flux
from plan import stages
from plan.stages import Stage, StageError
from tests.builders import composite

from .conftest import SOURCE_URL, function_input, staged_composite


def stage(name: str, *depends_on: str) -> Stage:
    return Stage(
        name,
        {
            "metadata": {"name": f"ctp-{name}", "namespace": "team-a"},
            "spec": {"path": f"./{name}", "dependsOn": [{"name": f"ctp-{d}"} for d in depends_on]},
        },
    )


@dataclass
class OrderCase:
    reason: str
    given: list[Stage]
    expected: list[str]


ORDERS = [
    OrderCase("independent stages keep the order given", [stage("a"), stage("b")], ["a", "b"]),
    OrderCase(
        "a stage comes after the stage it depends on",
        [stage("config", "packages"), stage("packages")],
        ["packages", "config"],
    ),
    OrderCase(
        "a chain is applied from its root",
        [stage("c", "b"), stage("b", "a"), stage("a")],
        ["a", "b", "c"],
    ),
    OrderCase(
        "a stage waiting for two comes after both",
        [stage("apps", "crds", "config"), stage("crds"), stage("config", "crds")],
        ["crds", "config", "apps"],
    ),
]


@pytest.mark.parametrize("case", ORDERS, ids=lambda case: case.reason)
def test_stages_are_ordered_as_flux_applies_them(case: OrderCase) -> None:
    assert [s.name for s in stages.order(case.given)] == case.expected


@pytest.mark.parametrize(
    ("given", "expected", "reason"),
    [
        ([stage("a", "missing")], "stage a: depends on Kustomization ctp-missing", "unknown"),
        ([stage("a", "b"), stage("b", "a")], "depend on each other in a cycle", "cycle"),
    ],
    ids=["a dependency that is not rendered is refused", "a cycle is refused"],
)
def test_an_order_flux_could_not_follow_is_refused(
    given: list[Stage], expected: str, reason: str
) -> None:
    with pytest.raises(StageError, match=expected):
        stages.order(given)


def test_before_is_every_stage_a_stage_waits_for_transitively() -> None:
    ordered = stages.order([stage("a"), stage("b", "a"), stage("c", "b"), stage("d")])

    assert [s.name for s in stages.before(ordered, ordered[2])] == ["a", "b"]
    assert stages.before(ordered, ordered[3]) == ()


def test_the_stages_are_the_functions_kustomizations_in_the_order_it_composes_them() -> None:
    found = stages.render(staged_composite(), function_input())

    assert [(s.name, s.kustomization_name, s.path, s.depends_on) for s in found] == [
        ("packages", "myctp-packages", "./packages", ()),
        ("config", "myctp-config", "./config", ("myctp-packages",)),
    ]
    assert all(s.namespace == "team-a" and s.prune for s in found)


def test_a_source_without_stages_is_one_stage_named_after_its_kustomization() -> None:
    spec = {"source": {"url": SOURCE_URL, "path": "./deploy"}}

    [only] = stages.render(composite(spec), function_input())

    assert (only.name, only.kustomization_name, only.path) == ("myctp", "myctp", "./deploy")


@dataclass
class VariableCase:
    reason: str
    spec: dict[str, Any]
    expected: dict[str, str]


VARIABLES = [
    VariableCase(
        "the platform's variables name the control plane, the team's are added",
        {},
        {
            model.CONTROLPLANE_NAME: "myctp",
            model.CONTROLPLANE_NAMESPACE: "team-a",
            "ENVIRONMENT": "prod",
        },
    ),
    VariableCase(
        "with backups the bucket, prefix and region are platform variables too",
        {"backup": {}},
        {
            model.CONTROLPLANE_NAME: "myctp",
            model.CONTROLPLANE_NAMESPACE: "team-a",
            model.BACKUP_PREFIX: "team-a/myctp/",
            model.BACKUP_REGION: "us-east-1",
            "ENVIRONMENT": "prod",
        },
    ),
]


@pytest.mark.parametrize("case", VARIABLES, ids=lambda case: case.reason)
def test_each_stage_substitutes_the_variables_the_function_renders(case: VariableCase) -> None:
    xr = staged_composite()
    xr["spec"].update(case.spec)

    found = stages.render(xr, function_input())

    for item in found:
        substitute = item.kustomization["spec"]["postBuild"]["substitute"]
        bucket = substitute.pop(model.BACKUP_BUCKET, None)
        assert substitute == case.expected
        assert (bucket is not None) == (model.BACKUP_PREFIX in case.expected)


def test_substitute_from_decryption_and_health_checks_are_the_rendered_ones() -> None:
    xr = staged_composite(
        substituteFrom=[{"kind": "ConfigMap", "name": "team-vars"}],
        decryption={"secretRef": {"name": "sops-age"}},
    )

    packages, _ = stages.render(xr, function_input())

    assert packages.substitute_from == (
        {"kind": "ConfigMap", "name": "team-vars", "optional": False},
    )
    assert packages.decrypts
    kinds = {check["kind"] for check in packages.health_check_exprs}
    assert {check.kind for check in flux.CROSSPLANE_HEALTH_CHECKS} <= kinds


def test_an_observed_instance_is_used_as_observed() -> None:
    # An Instance that is not Ready: the function composes no Kustomization, so
    # the plan has no stage to show (it never invents one).
    instance = {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Instance",
        "metadata": {
            "name": "myctp",
            "annotations": {"crossplane.io/composition-resource-name": "instance"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }

    assert stages.render(staged_composite(), function_input(), [instance]) == ()


@dataclass
class RefusedCase:
    reason: str
    xr: dict[str, Any]
    expected: str


REFUSED = [
    RefusedCase(
        "a team variable with a platform variable's name names the field",
        staged_composite(substitute={model.CONTROLPLANE_NAME: "x"}),
        f"spec.source.substitute.{model.CONTROLPLANE_NAME}: is a platform variable",
    ),
    RefusedCase(
        "a stage depending on a later one names the field",
        composite(
            {
                "source": {
                    "url": SOURCE_URL,
                    "stages": [
                        {"name": "config", "path": "./c", "dependsOn": ["packages"]},
                        {"name": "packages", "path": "./p"},
                    ],
                }
            }
        ),
        "spec.source.stages[0].dependsOn[0]",
    ),
    RefusedCase(
        "a composite without a source has nothing to plan",
        composite({}),
        "spec.source: is not set",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case.reason)
def test_a_composite_the_function_refuses_is_refused_with_its_words(case: RefusedCase) -> None:
    with pytest.raises(StageError, match=case.expected.replace("[", r"\[").replace("]", r"\]")):
        stages.render(case.xr, function_input())


def test_the_function_input_is_taken_from_an_input_or_from_a_composition() -> None:
    given = function_input()
    composition = {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "spec": {
            "pipeline": [{"step": "other", "input": {"kind": "X"}}, {"step": "c", "input": given}]
        },
    }

    assert stages.function_input_of(given) is given
    assert stages.function_input_of(composition) == given
    with pytest.raises(StageError, match="no pipeline step"):
        stages.function_input_of({"kind": "Composition", "spec": {"pipeline": []}})
    with pytest.raises(StageError, match="must be a"):
        stages.function_input_of({"kind": "ConfigMap"})
