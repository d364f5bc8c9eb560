"""The stages of a ControlPlane's sync, as the composition function renders them.

Nothing here decides a stage's path, order, variables, health checks or
decryption: the function's own pure composition (``function.compose``) renders
the Kustomizations, and a stage is read from its rendered Kustomization, so
the plan follows whatever the function renders (a service account or a
target namespace added later included). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from function import compose
from function.model import InvalidError
from function.observed import Observed, Resource, dig
from function.resources import flux

# The condition that lets the function compose the Kustomizations: a plan is of
# a push to a control plane that exists, so an Instance not observed (offline)
# stands in as Ready.
_READY_INSTANCE = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
FUNCTION_INPUT_API_VERSION = "controlplane.fn.acme.io/v1beta1"
FUNCTION_INPUT_KIND = "Input"


class StageError(Exception):
    """The stages cannot be rendered; the message names the field and the rule."""


@dataclass(frozen=True)
class Stage:
    """One stage: the name a team gave it and the Kustomization the function renders for it."""

    name: str
    kustomization: Mapping[str, Any]

    @property
    def kustomization_name(self) -> str:
        """The Kustomization's name in the management cluster."""
        return str(dig(self.kustomization, "metadata", "name"))

    @property
    def namespace(self) -> str:
        """The composite's namespace, where the Kustomization lives."""
        return str(dig(self.kustomization, "metadata", "namespace") or "")

    @property
    def path(self) -> str:
        """The stage's folder in the repository."""
        return str(dig(self.kustomization, "spec", "path") or "./")

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The Kustomizations this one waits for."""
        return tuple(
            str(item["name"]) for item in dig(self.kustomization, "spec", "dependsOn") or ()
        )

    @property
    def prune(self) -> bool:
        """Whether Flux deletes what a push removes."""
        return bool(dig(self.kustomization, "spec", "prune"))

    @property
    def decrypts(self) -> bool:
        """Whether Flux decrypts SOPS objects of this stage."""
        return dig(self.kustomization, "spec", "decryption") is not None

    @property
    def substitute_from(self) -> tuple[Mapping[str, Any], ...]:
        """The ConfigMaps and Secrets whose keys are variables, in Flux's order."""
        return tuple(dig(self.kustomization, "spec", "postBuild", "substituteFrom") or ())

    def applied_as(self, default_service_account: str = "") -> str:
        """Who Flux applies the stage as in the control plane; empty: the kubeconfig's identity.

        The Kustomization's ``serviceAccountName``, else kustomize-controller's
        ``--default-service-account``, impersonated in the Kustomization's namespace.
        """
        name = dig(self.kustomization, "spec", "serviceAccountName") or default_service_account
        return f"system:serviceaccount:{self.namespace}:{name}" if name else ""

    @property
    def health_check_exprs(self) -> tuple[Mapping[str, Any], ...]:
        """The CEL health checks, by group and kind."""
        return tuple(dig(self.kustomization, "spec", "healthCheckExprs") or ())


def render(
    composite: Mapping[str, Any],
    function_input: Mapping[str, Any],
    observed: Iterable[Mapping[str, Any]] = (),
) -> tuple[Stage, ...]:
    """Every stage of ``composite``, in the order the function composes them.

    ``observed`` are the composite's composed resources as the management cluster
    holds them (live), so external names the function keeps are kept here too.

    Raises:
        StageError: the composite has no source, or the function refuses it.
    """
    resources = {
        str(name): Resource(item)
        for item in observed
        if (name := dig(item, "metadata", "annotations", "crossplane.io/composition-resource-name"))
    }
    resources.setdefault(compose.INSTANCE, Resource(_READY_INSTANCE))
    try:
        outcome = compose.compose(Observed(composite, resources), function_input)
    except InvalidError as error:
        raise StageError(str(error)) from None
    spec = composite.get("spec") or {}
    if not isinstance(spec, Mapping) or not spec.get("source"):
        msg = "spec.source: is not set; the control plane syncs nothing to plan"
        raise StageError(msg)
    names = [stage.get("name") for stage in spec["source"].get("stages") or ()]
    found = []
    for resource, desired in outcome.resources.items():
        if desired.body.get("kind") != flux.KUSTOMIZATION_KIND:
            continue
        stage = resource.removeprefix(f"{compose.KUSTOMIZATION}-")
        if resource == compose.KUSTOMIZATION or stage not in names:
            stage = str(dig(desired.body, "metadata", "name"))
        found.append(Stage(stage, desired.body))
    return order(found)


def order(stages: Iterable[Stage]) -> tuple[Stage, ...]:
    """The stages in an order Flux can apply them: each after every stage it depends on.

    Stable: stages that do not depend on each other keep the order they came in.

    Raises:
        StageError: a stage depends on one that is not there, or on itself through others.
    """
    pending = list(stages)
    by_name = {stage.kustomization_name: stage for stage in pending}
    for stage in pending:
        for needed in stage.depends_on:
            if needed not in by_name:
                msg = (
                    f"stage {stage.name}: depends on Kustomization {needed}, which is not rendered"
                )
                raise StageError(msg)
    done: list[Stage] = []
    placed: set[str] = set()
    while pending:
        ready = next(
            (stage for stage in pending if placed.issuperset(stage.depends_on)),
            None,
        )
        if ready is None:
            names = ", ".join(stage.name for stage in pending)
            msg = f"stages {names}: depend on each other in a cycle"
            raise StageError(msg)
        pending.remove(ready)
        placed.add(ready.kustomization_name)
        done.append(ready)
    return tuple(done)


def before(stages: tuple[Stage, ...], stage: Stage) -> tuple[Stage, ...]:
    """The stages Flux applies before ``stage`` for certain: those it depends on, transitively."""
    by_name = {item.kustomization_name: item for item in stages}
    seen: set[str] = set()
    wanted = list(stage.depends_on)
    while wanted:
        name = wanted.pop()
        if name not in seen:
            seen.add(name)
            wanted.extend(by_name[name].depends_on)
    return tuple(item for item in stages if item.kustomization_name in seen)


def function_input_of(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function's Input: the document itself, or the one a Composition's pipeline passes.

    Raises:
        StageError: neither an Input nor a Composition with one.
    """
    if _is_input(document):
        return document
    if document.get("kind") == "Composition":
        for step in dig(document, "spec", "pipeline") or ():
            candidate = step.get("input") or {}
            if _is_input(candidate):
                return dict(candidate)
        msg = (
            "the Composition has no pipeline step whose input is a "
            f"{FUNCTION_INPUT_API_VERSION} {FUNCTION_INPUT_KIND}"
        )
        raise StageError(msg)
    msg = (
        f"the function input must be a {FUNCTION_INPUT_API_VERSION} {FUNCTION_INPUT_KIND} "
        "or a Composition whose pipeline passes one"
    )
    raise StageError(msg)


def _is_input(document: Mapping[str, Any]) -> bool:
    return (
        document.get("apiVersion") == FUNCTION_INPUT_API_VERSION
        and document.get("kind") == FUNCTION_INPUT_KIND
    )
