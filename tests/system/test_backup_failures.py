"""Backups as shipped, and a Backup AWS refuses: what a team sees, and that it clears.

- The composition as it ships (``compositions/controlplane.yaml``, its Input
  untouched: ``irsa`` trust), with our controllers run with the flags and
  environment ``deploy/`` ships on a cluster that plays EKS with IRSA
  (``sandbox.eks``: the API server issues tokens as the OIDC provider the
  composition trusts, the backup controller gets the token EKS projects),
  completes a Backup: a platform team sets nothing beyond the install.
- A Backup AWS refuses (the team role's policy detached in IAM while its
  RolePolicyAttachment is paused, so Crossplane does not put it back) turns the
  composite's ``BackupsReady`` False within one poll of core, with the
  Backup's name and AWS's words, and the composite is not Ready; unpaused,
  Crossplane attaches the policy again, the next Backup completes, and
  ``BackupsReady`` and ``Ready`` are True again. The platform's Prometheus, on
  the shipped rules, fires ControlPlaneBackupFailing for the schedule, and
  holds it after the success (a failure within the hour still shows).
- A restore from a control plane with no Completed Backup says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from sandbox.paths import REPO_ROOT
from sandbox.platform import Platform
from sandbox.prometheus import Alert
from sandbox.spaces import condition, wait_for

from .helpers import BACKUP_SCHEDULE, UP_DEADLINE, XR, bare, create, get, metric_total, unique

SHIPPED = REPO_ROOT / "compositions" / "controlplane.yaml"
# The shipped composition beside the sandbox's (two Compositions cannot share a name).
SHIPPED_NAME = "shipped.controlplanes.platform.acme.io"
COMPOSITIONS = ("apiextensions.crossplane.io", "v1", "compositions")
BACKUPS = ("controlplane.spaces.upbound.io", "v1alpha1", "backups")
SCHEDULES = ("controlplane.spaces.upbound.io", "v1alpha1", "backupschedules")
ATTACHMENTS = ("iam.aws.m.upbound.io", "v1beta1", "rolepolicyattachments")
PAUSED = "crossplane.io/paused"
# The schedule fires every minute: the next Backup, run and finished, within two.
NEXT_BACKUP_DEADLINE = 150.0
# Core's --poll-interval in the sandbox, and what may come on top of it on 2 shared
# cores (the schedule's status write, core's composing): as test_space allows.
CORE_POLL = 15.0
COMPOSE_SLACK = 25.0
# The platform's Prometheus scrapes and evaluates every 5 s: a few rounds, with slack.
PROMETHEUS_DEADLINE = 60.0


@dataclass(frozen=True)
class Shipped:
    """The composite composed by the shipped composition."""

    namespace: str
    name: str


def _install_shipped(platform: Platform) -> dict[str, Any]:
    composition: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    composition["metadata"]["name"] = SHIPPED_NAME
    group, version, plural = COMPOSITIONS
    try:
        platform.kube.create(plural, composition, group, version)
    except ApiException as error:
        if error.status != 409:
            raise
    installed: dict[str, Any] | None = get(platform.kube, COMPOSITIONS, None, SHIPPED_NAME)
    assert installed is not None
    return installed


@pytest.fixture(scope="module")
def shipped(platform: Platform) -> Shipped:
    """A ControlPlane with backups every minute, from the shipped composition."""
    installed = _install_shipped(platform)
    # Nothing of the shipped file is adjusted for the sandbox: its Input is the file's.
    as_shipped = yaml.safe_load(SHIPPED.read_text())
    assert installed["spec"]["pipeline"] == as_shipped["spec"]["pipeline"]
    namespace, name = unique("shipped"), "ctp"
    platform.kube.namespace(namespace)
    create(
        platform.kube,
        XR,
        bare(
            namespace,
            name,
            crossplane={"compositionRef": {"name": SHIPPED_NAME}},
            backup={"schedule": BACKUP_SCHEDULE},
        ),
    )
    return Shipped(namespace, name)


def _backups(platform: Platform, namespace: str) -> list[dict[str, Any]]:
    group, version, plural = BACKUPS
    return platform.kube.list_of(plural, namespace, group, version)


def _finished_after(
    platform: Platform, namespace: str, names: set[str], phase: str
) -> Callable[[], dict[str, Any] | None]:
    """A Backup not among ``names`` that reached ``phase``, else None."""

    def found() -> dict[str, Any] | None:
        return next(
            (
                b
                for b in _backups(platform, namespace)
                if b["metadata"]["name"] not in names
                and (b.get("status") or {}).get("phase") == phase
            ),
            None,
        )

    return found


def _composite_condition(
    platform: Platform,
    shipped: Shipped,
    type_: str,
    status: str,
    timeout: float,
    reason: str = "",
) -> dict[str, Any]:
    """The composite's condition ``type_`` once it has ``status`` (and ``reason``, if given)."""

    def reached() -> dict[str, Any] | None:
        found = condition(get(platform.kube, XR, shipped.namespace, shipped.name), type_)
        if found.get("status") != status or found.get("reason") != (reason or found.get("reason")):
            return None
        return found

    found: dict[str, Any] = wait_for(
        f"the composite's {type_} {status} {reason}", reached, timeout=timeout
    )
    return found


def _schedule_metric(platform: Platform, name: str, shipped: Shipped, **labels: str) -> float:
    return metric_total(
        platform.backup_controller.metrics_port,
        name,
        namespace=shipped.namespace,
        name=shipped.name,
        **labels,
    )


def test_the_shipped_composition_and_controllers_complete_a_backup_on_eks_with_irsa(
    platform: Platform, shipped: Shipped
) -> None:
    completed = wait_for(
        "a Completed Backup of the shipped ControlPlane",
        _finished_after(platform, shipped.namespace, set(), "Completed"),
        timeout=UP_DEADLINE + NEXT_BACKUP_DEADLINE,
    )
    schedule = get(platform.kube, SCHEDULES, shipped.namespace, shipped.name)
    storage = schedule["spec"]["storage"]
    # The shipped irsa trust: the token EKS projects, straight into the team's role, of
    # the account of the backup controller's IRSA role, which the controller allows
    # by default (no --web-identity-role-account set).
    assert storage["assumeRoleWith"] == "WebIdentity"
    assert storage["roleArn"].startswith("arn:aws:iam::123456789012:role/")
    assert "--web-identity-role-account" not in " ".join(platform.backup_controller.args)
    # In the words of the schedule's newest Backup, which completed.
    ready = _composite_condition(
        platform, shipped, "BackupsReady", "True", NEXT_BACKUP_DEADLINE, "BackupCompleted"
    )
    named = ready["message"].split()[1]
    assert named.startswith(f"{shipped.name}-"), ready
    assert get(platform.kube, BACKUPS, shipped.namespace, named)["status"]["phase"] == "Completed"
    assert completed["status"]["phase"] == "Completed"
    stamp = _schedule_metric(
        platform, "controlplane_backup_last_success_timestamp_seconds", shipped
    )
    assert stamp > 0


def test_a_backup_aws_refuses_reaches_the_composite_in_its_words_and_clears(
    platform: Platform, shipped: Shipped
) -> None:
    namespace = shipped.namespace
    _composite_condition(
        platform, shipped, "BackupsReady", "True", NEXT_BACKUP_DEADLINE, "BackupCompleted"
    )
    group, version, plural = ATTACHMENTS
    (attachment,) = platform.kube.list_of(plural, namespace, group, version)
    name = attachment["metadata"]["name"]
    role = attachment["spec"]["forProvider"]["role"]
    policy_arn = attachment["spec"]["forProvider"]["policyArn"]

    # Paused, Crossplane leaves the attachment alone; then the policy goes, in IAM.
    platform.kube.patch(
        plural, namespace, name, {"metadata": {"annotations": {PAUSED: "true"}}}, group, version
    )
    wait_for(
        "the attachment paused",
        lambda: (
            condition(get(platform.kube, ATTACHMENTS, namespace, name), "Synced").get("reason")
            == "ReconcilePaused"
        ),
        timeout=60,
    )
    platform.aws.moto.detach_role_policy(role, policy_arn)
    before = {b["metadata"]["name"] for b in _backups(platform, namespace)}
    failures_before = _schedule_metric(
        platform, "controlplane_backup_failures_total", shipped, reason="BackupFailed"
    )

    failed = wait_for(
        "the next Backup refused by AWS",
        _finished_after(platform, namespace, before, "Failed"),
        timeout=NEXT_BACKUP_DEADLINE,
    )
    seen_failed = time.monotonic()
    backup = failed["metadata"]["name"]
    said = condition(failed, "Failed")
    assert said["reason"] == "BackupFailed", said
    assert "AccessDenied" in said["message"], said
    told = _composite_condition(
        platform, shipped, "BackupsReady", "False", CORE_POLL + COMPOSE_SLACK
    )
    took = time.monotonic() - seen_failed
    print(f"BackupsReady False {took:.1f}s after the Backup was seen Failed")
    assert told["reason"] == "BackupFailed", told
    assert (
        told["message"]
        == f"BackupSchedule {shipped.name}: Backup {backup} failed: {said['message']}"
    )
    composite = get(platform.kube, XR, namespace, shipped.name)
    assert condition(composite, "Ready").get("status") == "False", composite["status"]
    schedule = get(platform.kube, SCHEDULES, namespace, shipped.name)
    assert condition(schedule, "LastBackup")["status"] == "False"
    assert _schedule_metric(platform, "controlplane_backup_last_backup_failed", shipped) == 1
    failures = _schedule_metric(
        platform, "controlplane_backup_failures_total", shipped, reason="BackupFailed"
    )
    assert failures >= failures_before + 1
    warned = [
        e for e in platform.kube.events(namespace, shipped.name) if e["reason"] == "BackupFailed"
    ]
    assert any(backup in e["message"] for e in warned), warned
    # The platform's Prometheus, on the shipped rules, scraping the backup controller.
    alert = Alert("ControlPlaneBackupFailing", namespace, shipped.name)
    wait_for(
        "ControlPlaneBackupFailing firing in the platform's Prometheus",
        lambda: alert in platform.prometheus.firing(),
        timeout=PROMETHEUS_DEADLINE,
    )

    # The fix: unpaused, Crossplane attaches the policy again; the next Backup completes.
    platform.kube.patch(
        plural, namespace, name, {"metadata": {"annotations": {PAUSED: None}}}, group, version
    )
    before = {b["metadata"]["name"] for b in _backups(platform, namespace)}
    wait_for(
        "the next Backup completed",
        _finished_after(platform, namespace, before, "Completed"),
        timeout=NEXT_BACKUP_DEADLINE,
    )
    cleared = _composite_condition(
        platform, shipped, "BackupsReady", "True", CORE_POLL + COMPOSE_SLACK
    )
    assert cleared["reason"] == "BackupCompleted", cleared
    _composite_condition(platform, shipped, "Ready", "True", CORE_POLL + COMPOSE_SLACK)
    assert _schedule_metric(platform, "controlplane_backup_last_backup_failed", shipped) == 0
    last_failed = (
        f'controlplane_backup_last_backup_failed{{namespace="{namespace}",name="{shipped.name}"}}'
    )
    wait_for(
        "Prometheus sees the newest Backup completed",
        lambda: platform.prometheus.value(last_failed) == 0.0,
        timeout=PROMETHEUS_DEADLINE,
    )
    # Held for the hour after a failure (Velero's example alert forgets a failure
    # once a Backup succeeds); promtool's cases show it resolving after that.
    assert alert in platform.prometheus.firing()


def test_a_restore_from_a_control_plane_without_backups_says_why(platform: Platform) -> None:
    namespace, name = unique("restore-none"), "ctp"
    platform.kube.namespace(namespace)
    create(
        platform.kube, XR, bare(namespace, name, restore={"fromControlPlane": "never-backed-up"})
    )

    def waiting() -> dict[str, Any] | None:
        found = condition(get(platform.kube, XR, namespace, name), "InstanceReady")
        return found if found.get("reason") == "NoBackupToRestore" else None

    said = wait_for("InstanceReady saying why nothing is restored", waiting, timeout=UP_DEADLINE)
    assert said["status"] == "False"
    assert "there is no Backup of it in that namespace" in said["message"], said
