"""What a ControlPlane's status says, as the Instance's Ready and Synced.

A Space reports on a ControlPlane with crossplane-runtime's ``Ready`` and
``Synced`` (its ControlPlane controller is a managed reconciler: the Spaces
v1.2.1 release notes of github.com/upbound/docs mention its
``crossplane.io/external-create-failed`` annotation) and with the conditions
of ``apis/spaces/v1beta1/conditions.go`` in github.com/upbound/up-sdk-go:
``ControlPlaneProvisioned`` (reason ``ProvisioningError`` with the error),
``Healthy`` (``HealthyControlPlane`` / ``UnhealthyControlPlane``),
``Supported`` (``UnsupportedCrossplaneVersion``, "Crossplane version ... is
outside of the support window"), a Ready of reason ``RestorePending``; and
``status.message`` (``controlplane_types.go``), the MESSAGE column of
``kubectl get ctp``.

The Instance says what the Space says: its Ready carries the Space's reason
and message, a ControlPlane the Space cannot reconcile (it refused the spec)
is the Instance's Synced=False in the Space's words. Messages are the
Space's own text, cut to ``MESSAGE_LIMIT`` characters. The Instance is
Available only when the Space says the control plane is ready and healthy
and its kubeconfig exists and passes the allow-list.

Pure: the backend reads the ControlPlane and its kubeconfig.
"""

from __future__ import annotations

from dataclasses import dataclass

from provider.managed import conditions
from provider.managed.conditions import Condition
from provider.model import ControlPlaneStatus, SpaceCondition

MESSAGE_LIMIT = 512
PROVISIONING_ERROR = "ProvisioningError"
UNHEALTHY = "UnhealthyControlPlane"
NOT_REPORTED = "the Space has not reported on the ControlPlane yet"


@dataclass(frozen=True)
class Verdict:
    """The Instance's Ready, and the Space's refusal (empty when there is none)."""

    ready: Condition
    refused: str = ""


def bounded(text: str) -> str:
    """``text`` on one line, at most ``MESSAGE_LIMIT`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= MESSAGE_LIMIT:
        return flat
    return flat[: MESSAGE_LIMIT - 1].rstrip() + "…"


def _said(found: SpaceCondition, fallback: str) -> str:
    return bounded(found.message or fallback)


def verdict(status: ControlPlaneStatus, kubeconfig_problem: str = "") -> Verdict:
    """The Instance's conditions from a ControlPlane's ``status``.

    ``kubeconfig_problem`` says why the control plane's kubeconfig cannot be
    used (missing, refused); empty when it can.
    """
    synced = status.condition(conditions.SYNCED)
    refused = ""
    if synced is not None and synced.status == "False":
        refused = "the Space refused the ControlPlane: " + _said(
            synced, status.message or synced.reason
        )
    return Verdict(_ready(status, kubeconfig_problem), bounded(refused))


def _ready(status: ControlPlaneStatus, kubeconfig_problem: str) -> Condition:
    message = status.message
    provisioned = status.condition("ControlPlaneProvisioned")
    if (
        provisioned is not None
        and provisioned.status == "False"
        and provisioned.reason == PROVISIONING_ERROR
    ):
        return Condition(conditions.READY, "False", PROVISIONING_ERROR, _said(provisioned, message))
    ready = status.condition(conditions.READY)
    if ready is None:
        return conditions.unavailable(bounded(message or NOT_REPORTED))
    if ready.status != "True":
        return Condition(
            conditions.READY,
            "False",
            ready.reason or conditions.UNAVAILABLE,
            _said(ready, message or "the ControlPlane is not ready"),
        )
    healthy = status.condition("Healthy")
    if healthy is not None and healthy.status == "False":
        return Condition(
            conditions.READY,
            "False",
            healthy.reason or UNHEALTHY,
            _said(healthy, message or "the Space reports the control plane unhealthy"),
        )
    if kubeconfig_problem:
        return conditions.unavailable(bounded(kubeconfig_problem))
    supported = status.condition("Supported")
    if supported is not None and supported.status == "False":
        # It runs, on a version the Space no longer supports: say so, stay Available.
        return Condition(conditions.READY, "True", conditions.AVAILABLE, _said(supported, ""))
    return conditions.available()
