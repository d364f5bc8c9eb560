"""What a ControlPlane's status says, as the Instance's Ready and Synced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from provider.managed.conditions import Condition
from provider.model import ControlPlaneStatus, InvalidError, parse
from provider.spaces import readiness


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    found = {"type": type_, "status": status, "reason": reason, "lastTransitionTime": "t"}
    if message:
        found["message"] = message
    return found


READY = cond("Ready", "True", "Available")
PROVISIONED = cond("ControlPlaneProvisioned", "True", "Provisioned")
HEALTHY = cond("Healthy", "True", "HealthyControlPlane")
SUPPORTED = cond("Supported", "True", "SupportedCrossplaneVersion")
SYNCED = cond("Synced", "True", "ReconcileSuccess")
AVAILABLE = [READY, PROVISIONED, HEALTHY, SUPPORTED, SYNCED]


def status(*conditions: dict[str, Any], message: str = "") -> ControlPlaneStatus:
    found: dict[str, Any] = {"conditions": list(conditions)}
    if message:
        found["message"] = message
    return parse(ControlPlaneStatus, found, "status")


@dataclass
class VerdictCase:
    reason: str
    status: ControlPlaneStatus
    ready: Condition
    refused: str = ""
    kubeconfig_problem: str = ""


VERDICT_CASES = [
    VerdictCase(
        "a ready, healthy, supported control plane with its kubeconfig is Available",
        status(*AVAILABLE),
        Condition("Ready", "True", "Available"),
    ),
    VerdictCase(
        "a ControlPlane the Space has not reported on is Unavailable",
        status(),
        Condition("Ready", "False", "Unavailable", readiness.NOT_REPORTED),
    ),
    VerdictCase(
        "a control plane being created carries the Space's reason",
        status(cond("Ready", "False", "Creating"), SYNCED),
        Condition("Ready", "False", "Creating", "the ControlPlane is not ready"),
    ),
    VerdictCase(
        "the Space's restore pending carries its reason and message",
        status(cond("Ready", "False", "RestorePending", "Control plane restore is pending")),
        Condition("Ready", "False", "RestorePending", "Control plane restore is pending"),
    ),
    VerdictCase(
        "status.message stands in for a condition without one",
        status(cond("Ready", "False", "Unavailable"), message="vcluster is starting"),
        Condition("Ready", "False", "Unavailable", "vcluster is starting"),
    ),
    VerdictCase(
        "a provisioning error is Ready=False in the Space's words, even once Ready",
        status(
            READY,
            cond("ControlPlaneProvisioned", "False", "ProvisioningError", "quota exceeded"),
            message="quota exceeded",
        ),
        Condition("Ready", "False", "ProvisioningError", "quota exceeded"),
    ),
    VerdictCase(
        "provisioning in progress (reason Provisioned, False) is not an error",
        status(
            cond("Ready", "False", "Creating"),
            cond("ControlPlaneProvisioned", "False", "Provisioned"),
        ),
        Condition("Ready", "False", "Creating", "the ControlPlane is not ready"),
    ),
    VerdictCase(
        "an unhealthy control plane is not Available",
        status(
            READY,
            cond("Healthy", "False", "UnhealthyControlPlane", "etcd has no leader"),
            SYNCED,
        ),
        Condition("Ready", "False", "UnhealthyControlPlane", "etcd has no leader"),
    ),
    VerdictCase(
        "a Space refusing the ControlPlane is a refusal in its words",
        status(READY, HEALTHY, cond("Synced", "False", "ReconcileError", "class small is unknown")),
        Condition("Ready", "True", "Available"),
        refused="the Space refused the ControlPlane: class small is unknown",
    ),
    VerdictCase(
        "a ready control plane without a usable kubeconfig is Unavailable, saying why",
        status(*AVAILABLE),
        Condition("Ready", "False", "Unavailable", "waiting for the kubeconfig"),
        kubeconfig_problem="waiting for the kubeconfig",
    ),
    VerdictCase(
        "an unsupported version stays Available and says so",
        status(
            READY,
            HEALTHY,
            cond(
                "Supported",
                "False",
                "UnsupportedCrossplaneVersion",
                "Crossplane version 1.18.3-up.1 is outside of the support window.",
            ),
        ),
        Condition(
            "Ready",
            "True",
            "Available",
            "Crossplane version 1.18.3-up.1 is outside of the support window.",
        ),
    ),
]


@pytest.mark.parametrize("case", VERDICT_CASES, ids=lambda c: c.reason)
def test_the_instance_says_what_the_space_says(case: VerdictCase) -> None:
    verdict = readiness.verdict(case.status, case.kubeconfig_problem)
    assert verdict.ready == case.ready, case.reason
    assert verdict.refused == case.refused, case.reason


def test_a_long_message_is_cut_to_one_bounded_line() -> None:
    long = "line one\n" + "x" * 2000
    verdict = readiness.verdict(
        status(cond("Ready", "False", "Unavailable", long)), kubeconfig_problem=""
    )
    assert len(verdict.ready.message) == readiness.MESSAGE_LIMIT
    assert "\n" not in verdict.ready.message
    assert verdict.ready.message.startswith("line one x")


def test_a_status_the_space_could_not_have_written_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidError, match=r"^status\.conditions\.0\.type: is required$"):
        parse(ControlPlaneStatus, {"conditions": [{"status": "True"}]}, "status")
