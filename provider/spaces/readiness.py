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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.managed import conditions
from provider.managed.conditions import Condition

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


def _said(found: Mapping[str, Any] | None, fallback: str) -> str:
    return bounded(str((found or {}).get("message") or fallback))


def verdict(status: Mapping[str, Any], kubeconfig_problem: str = "") -> Verdict:
    """The Instance's conditions from a ControlPlane's ``status``.

    ``kubeconfig_problem`` says why the control plane's kubeconfig cannot be
    used (missing, refused); empty when it can.
    """
    found: Sequence[Mapping[str, Any]] = status.get("conditions") or []
    message = str(status.get("message") or "")
    synced = conditions.find(found, conditions.SYNCED)
    refused = ""
    if synced is not None and synced.get("status") == "False":
        refused = "the Space refused the ControlPlane: " + _said(
            synced, message or str(synced.get("reason") or "")
        )
    return Verdict(_ready(found, message, kubeconfig_problem), bounded(refused))


def _ready(found: Sequence[Mapping[str, Any]], message: str, kubeconfig_problem: str) -> Condition:
    provisioned = conditions.find(found, "ControlPlaneProvisioned")
    if (provisioned or {}).get("reason") == PROVISIONING_ERROR and (provisioned or {}).get(
        "status"
    ) == "False":
        return Condition(conditions.READY, "False", PROVISIONING_ERROR, _said(provisioned, message))
    ready = conditions.find(found, conditions.READY)
    if ready is None:
        return conditions.unavailable(bounded(message or NOT_REPORTED))
    if ready.get("status") != "True":
        reason = str(ready.get("reason") or conditions.UNAVAILABLE)
        return Condition(
            conditions.READY,
            "False",
            reason,
            _said(ready, message or "the ControlPlane is not ready"),
        )
    healthy = conditions.find(found, "Healthy")
    if healthy is not None and healthy.get("status") == "False":
        reason = str(healthy.get("reason") or UNHEALTHY)
        return Condition(
            conditions.READY,
            "False",
            reason,
            _said(healthy, message or "the Space reports the control plane unhealthy"),
        )
    if kubeconfig_problem:
        return conditions.unavailable(bounded(kubeconfig_problem))
    supported = conditions.find(found, "Supported")
    if supported is not None and supported.get("status") == "False":
        # It runs, on a version the Space no longer supports: say so, stay Available.
        return Condition(conditions.READY, "True", conditions.AVAILABLE, _said(supported, ""))
    return conditions.available()
