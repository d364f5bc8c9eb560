"""The alert rules, in the monitoring-mixin style: severity, summary, description, runbook.

Each alert's runbook is the section of docs/runbooks.md whose heading is the
alert's name. ``RUNBOOK_BASE`` is where that page is read; an operator who
publishes the docs elsewhere rewrites it with a kustomize patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

RUNBOOK_BASE = "docs/runbooks.md"
GROUP = "controlplane"

Severity = Literal["critical", "warning"]


@dataclass(frozen=True)
class Alert:
    """One alerting rule."""

    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        """The rule as Prometheus' rule files and the PrometheusRule CRD write it."""
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0s":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": f"{RUNBOOK_BASE}#{self.name.lower()}",
        }
        return rule


def _not_within_two_intervals(last: str, interval: str) -> str:
    """A schedule whose ``last`` timestamp is older than two of its ``interval``s.

    One with no ``last`` at all fires once it was created two intervals ago; one
    that exports no ``interval`` never fires.
    """
    return f"""\
(
  time() - {last}
    > on (namespace, name) 2 * {interval}
)
or on (namespace, name)
(
  (
    time() - controlplane_backup_schedule_created_timestamp_seconds
      > on (namespace, name) 2 * {interval}
  )
  unless on (namespace, name) {last}
)"""


# A schedule is late when its newest success is older than two of its
# intervals; one that never succeeded, when it is older than two intervals.
# A suspended schedule exports no interval, so it never fires.
_TOO_OLD = _not_within_two_intervals(
    "controlplane_backup_last_success_timestamp_seconds",
    "controlplane_backup_schedule_interval_seconds",
)

# The same against the drill interval: a schedule that asks for drills and has
# passed none within two of them (a failing drill keeps the last pass's time,
# so it fires here too once that is old). One that asks for none exports no
# drill interval and never fires.
_NOT_VERIFIED = _not_within_two_intervals(
    "controlplane_backup_last_verified_timestamp_seconds",
    "controlplane_backup_drill_interval_seconds",
)

# The newest Backup failed, or one failed within the hour: a later success
# does not hide a schedule that fails every other run.
_FAILING = """\
max by (namespace, name) (controlplane_backup_last_backup_failed) == 1
or on (namespace, name)
sum by (namespace, name) (increase(controlplane_backup_failures_total[1h])) > 0"""

_RESTORE_STUCK = """\
controlplane_restore_phase{phase="InProgress"} == 1
and on (namespace, name)
changes(controlplane_restore_objects_applied[30m]) == 0"""

_SYNC_STALLED = """\
max by (namespace, name, kind) (
  gotk_reconcile_condition{kind=~"Kustomization|GitRepository", type="Ready", status="False"}
) == 1"""

# The counters only grow and reset together when core restarts: more opens
# than closes is a breaker open now.
_BREAKER_OPEN = """\
sum by (controller) (circuit_breaker_opens_total)
  - sum by (controller) (
      circuit_breaker_closes_total or circuit_breaker_opens_total * 0
    )
> 0"""

_RECONCILE_ERRORS = """\
sum by (controller) (rate(controlplane_provider_reconcile_errors_total[5m]))
  / sum by (controller) (rate(controlplane_provider_reconcile_total[5m]))
> 0.1"""

ALERTS: tuple[Alert, ...] = (
    Alert(
        "ControlPlaneBackupsTooOld",
        _TOO_OLD,
        "5m",
        "critical",
        "No successful backup of {{ $labels.namespace }}/{{ $labels.name }} within two intervals.",
        "BackupSchedule {{ $labels.namespace }}/{{ $labels.name }} has no Completed Backup "
        "newer than two of its intervals (or has never had one since it was created two "
        "intervals ago): its control plane could not be restored to a recent state.",
    ),
    Alert(
        "ControlPlaneBackupFailing",
        _FAILING,
        "0s",
        "warning",
        "Backups of {{ $labels.namespace }}/{{ $labels.name }} are failing.",
        "The newest Backup of BackupSchedule {{ $labels.namespace }}/{{ $labels.name }} "
        "failed, or one failed within the last hour. Its LastBackup condition and the "
        "Backup's Failed condition say why.",
    ),
    Alert(
        "ControlPlaneRestoreStuck",
        _RESTORE_STUCK,
        "15m",
        "warning",
        "The restore of Instance {{ $labels.namespace }}/{{ $labels.name }} has not moved.",
        "The restore of Instance {{ $labels.namespace }}/{{ $labels.name }} is InProgress "
        "and has applied no object for 45 minutes.",
    ),
    Alert(
        "ControlPlaneNotReady",
        "controlplane_instance_ready == 0",
        "15m",
        "warning",
        "Control plane {{ $labels.namespace }}/{{ $labels.name }} is not ready.",
        "Instance {{ $labels.namespace }}/{{ $labels.name }} has not been Ready for 15 "
        "minutes: its hosted control plane is not available to its team.",
    ),
    Alert(
        "ControlPlaneSyncStalled",
        _SYNC_STALLED,
        "15m",
        "warning",
        "Flux {{ $labels.kind }} {{ $labels.namespace }}/{{ $labels.name }} is not ready.",
        "Flux {{ $labels.kind }} {{ $labels.namespace }}/{{ $labels.name }} has been Ready="
        "False for 15 minutes: the team's git repository is not being applied into its "
        "control plane.",
    ),
    Alert(
        "CrossplaneWatchCircuitBreakerOpen",
        _BREAKER_OPEN,
        "5m",
        "warning",
        "Crossplane core's watch circuit breaker is open for {{ $labels.controller }}.",
        "Crossplane core's circuit breaker for {{ $labels.controller }} has been open for 5 "
        "minutes: watch events for a composite are dropped and it is reconciled only on its "
        "poll interval.",
    ),
    Alert(
        "ControlPlaneProviderReconcileErrors",
        _RECONCILE_ERRORS,
        "15m",
        "warning",
        "More than 10% of the provider's {{ $labels.controller }} reconciles fail.",
        "{{ $value | humanizePercentage }} of the {{ $labels.controller }} controller's "
        "reconciles ended in an error over 5 minutes, for 15 minutes.",
    ),
    Alert(
        "ControlPlaneBackupNotVerified",
        _NOT_VERIFIED,
        "5m",
        "warning",
        "No backup of {{ $labels.namespace }}/{{ $labels.name }} verified within two drill "
        "intervals.",
        "No restore drill of BackupSchedule {{ $labels.namespace }}/{{ $labels.name }} has "
        "passed within two of its drill intervals (or none has since it was created two "
        "intervals ago): nothing shows that its backups would restore.",
    ),
    Alert(
        "ControlPlaneRestoreDrillFailing",
        "controlplane_backup_last_drill_failed == 1",
        "0s",
        "warning",
        "The newest restore drill of {{ $labels.namespace }}/{{ $labels.name }} failed.",
        "The newest Completed Backup of BackupSchedule {{ $labels.namespace }}/{{ $labels.name "
        "}} did not restore into a throwaway control plane as it was archived: its Verified "
        "condition says what was missing or failed.",
    ),
)


def rules() -> dict[str, Any]:
    """The rule groups, as a rules file and a PrometheusRule's spec write them."""
    return {"groups": [{"name": GROUP, "rules": [alert.rule() for alert in ALERTS]}]}


def prometheus_rule() -> dict[str, Any]:
    """The PrometheusRule (monitoring.coreos.com/v1) the Prometheus Operator loads."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "controlplane",
            "namespace": "crossplane-system",
            "labels": {"app.kubernetes.io/part-of": "controlplane"},
        },
        "spec": rules(),
    }
