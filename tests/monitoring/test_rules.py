"""The shipped alert rules under promtool, as the Prometheus ecosystem tests rules.

``promtool check rules`` checks both generated files; ``promtool test rules``
runs one unit test per case below: for every alert, a case where it fires, one
where it does not, and one where it fires and then resolves. promtool is built
by ``tools/build.sh`` (alone, ``tools/build.sh promtool``: about two and a half minutes cold).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tools.monitoring import alerts, generate

ROOT = generate.ROOT
PROMTOOL = ROOT / ".tools" / "bin" / "promtool"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, built from the Prometheus module tools/prometheus pins when it is not yet."""
    subprocess.run([str(ROOT / "tools" / "build.sh"), "promtool"], check=True)
    return PROMTOOL


@dataclass(frozen=True)
class Case:
    """One promtool unit test of one alert: series, then what fires at each time."""

    name: str
    reason: str
    alert: str
    series: dict[str, str]
    # eval time -> the label sets of the alerts expected then (empty: none fires).
    expect: dict[str, list[dict[str, str]]]
    # The value the description quotes, where it quotes one.
    value: str = ""
    interval: str = "1m"
    extra: dict[str, str] = field(default_factory=dict)


S = 'namespace="team-a", name="ctp"'
TEAM = {"namespace": "team-a", "name": "ctp"}
HOUR = 3600

CASES = [
    # ControlPlaneBackupsTooOld
    Case(
        "a schedule whose last success is older than two intervals is too old",
        "the last success was at 0 and the interval is an hour: at 2h5m it is late",
        "ControlPlaneBackupsTooOld",
        {
            f"controlplane_backup_last_success_timestamp_seconds{{{S}}}": "0x200",
            f"controlplane_backup_schedule_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"1h": [], "2h10m": [TEAM]},
    ),
    Case(
        "a schedule that has never succeeded fires two intervals after it was created",
        "no success series at all must not hide the schedule (the never-succeeded case)",
        "ControlPlaneBackupsTooOld",
        {
            f"controlplane_backup_schedule_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"1h50m": [], "2h10m": [TEAM]},
    ),
    Case(
        "a schedule that succeeds every interval never fires",
        "each hourly success moves the timestamp on: it is never two intervals old",
        "ControlPlaneBackupsTooOld",
        {
            f"controlplane_backup_last_success_timestamp_seconds{{{S}}}": "0+60x300",
            f"controlplane_backup_schedule_interval_seconds{{{S}}}": f"{HOUR}x300",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x300",
        },
        {"3h": [], "4h": []},
    ),
    Case(
        "a late schedule resolves when a backup completes",
        "the success timestamp jumps to 2h20m: the alert fired before and clears after",
        "ControlPlaneBackupsTooOld",
        {
            f"controlplane_backup_last_success_timestamp_seconds{{{S}}}": "0x140 8400x60",
            f"controlplane_backup_schedule_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"2h15m": [TEAM], "2h25m": []},
    ),
    Case(
        "a suspended schedule never fires",
        "a suspended schedule exports no interval, so nothing is measured against it",
        "ControlPlaneBackupsTooOld",
        {f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x300"},
        {"4h": []},
    ),
    # ControlPlaneBackupFailing
    Case(
        "a schedule whose newest backup failed is failing",
        "last_backup_failed is 1: fires at once (no for)",
        "ControlPlaneBackupFailing",
        {
            f"controlplane_backup_last_backup_failed{{{S}}}": "1x30",
            f'controlplane_backup_failures_total{{{S}, reason="StorageRefused"}}': "0x30",
        },
        {"5m": [TEAM]},
    ),
    Case(
        "a schedule whose backups succeed is not failing",
        "neither the gauge nor the counter moves",
        "ControlPlaneBackupFailing",
        {
            f"controlplane_backup_last_backup_failed{{{S}}}": "0x90",
            f'controlplane_backup_failures_total{{{S}, reason="StorageRefused"}}': "0x90",
        },
        {"1h": []},
    ),
    Case(
        "a failure followed by a success still fires within the hour and resolves after",
        "the counter went up at 10m and the newest backup succeeded at 20m: Velero's alert "
        "stops noticing such failures, ours holds it for an hour",
        "ControlPlaneBackupFailing",
        {
            f"controlplane_backup_last_backup_failed{{{S}}}": "0x10 1x10 0x200",
            f'controlplane_backup_failures_total{{{S}, reason="BackupFailed"}}': "0x10 1x200",
        },
        {"30m": [TEAM], "1h20m": []},
    ),
    # ControlPlaneRestoreStuck
    Case(
        "a restore in progress that applies nothing for 45 minutes is stuck",
        "applied stays at 5 from the start",
        "ControlPlaneRestoreStuck",
        {
            f'controlplane_restore_phase{{{S}, phase="InProgress"}}': "1x100",
            f"controlplane_restore_objects_applied{{{S}}}": "5x100",
        },
        {"30m": [TEAM | {"phase": "InProgress"}]},
        extra={"for": "stuck from 15m (the window is full at 30m) plus 15m for"},
    ),
    Case(
        "a restore that keeps applying objects is not stuck",
        "applied grows every minute",
        "ControlPlaneRestoreStuck",
        {
            f'controlplane_restore_phase{{{S}, phase="InProgress"}}': "1x100",
            f"controlplane_restore_objects_applied{{{S}}}": "0+1x100",
        },
        {"1h": []},
    ),
    Case(
        "a stuck restore resolves when it completes",
        "the InProgress phase goes to 0 at 50m",
        "ControlPlaneRestoreStuck",
        {
            f'controlplane_restore_phase{{{S}, phase="InProgress"}}': "1x50 0x50",
            f"controlplane_restore_objects_applied{{{S}}}": "5x100",
        },
        {"48m": [TEAM | {"phase": "InProgress"}], "55m": []},
    ),
    # ControlPlaneNotReady
    Case(
        "an instance not ready for 15 minutes fires",
        "ready is 0 throughout",
        "ControlPlaneNotReady",
        {f"controlplane_instance_ready{{{S}}}": "0x30"},
        {"10m": [], "20m": [TEAM]},
    ),
    Case(
        "a ready instance does not fire",
        "ready is 1 throughout",
        "ControlPlaneNotReady",
        {f"controlplane_instance_ready{{{S}}}": "1x30"},
        {"30m": []},
    ),
    Case(
        "a not ready instance resolves when it is ready",
        "ready turns 1 at 25m",
        "ControlPlaneNotReady",
        {f"controlplane_instance_ready{{{S}}}": "0x25 1x20"},
        {"20m": [TEAM], "30m": []},
    ),
    # ControlPlaneSyncStalled
    Case(
        "a kustomization ready false for 15 minutes is stalled",
        "Flux's own gauge for Ready=False is 1",
        "ControlPlaneSyncStalled",
        {
            'gotk_reconcile_condition{kind="Kustomization", namespace="team-a", name="ctp-apps", '
            'type="Ready", status="False"}': "1x30",
        },
        {"20m": [{"kind": "Kustomization", "namespace": "team-a", "name": "ctp-apps"}]},
    ),
    Case(
        "a ready kustomization is not stalled",
        "the Ready=True series is 1, the Ready=False one 0",
        "ControlPlaneSyncStalled",
        {
            'gotk_reconcile_condition{kind="Kustomization", namespace="team-a", name="ctp-apps", '
            'type="Ready", status="True"}': "1x30",
            'gotk_reconcile_condition{kind="Kustomization", namespace="team-a", name="ctp-apps", '
            'type="Ready", status="False"}': "0x30",
        },
        {"30m": []},
    ),
    Case(
        "a stalled git repository resolves when it is ready",
        "Ready=False goes to 0 at 25m",
        "ControlPlaneSyncStalled",
        {
            'gotk_reconcile_condition{kind="GitRepository", namespace="team-a", name="ctp", '
            'type="Ready", status="False"}': "1x25 0x20",
        },
        {"20m": [{"kind": "GitRepository"} | TEAM], "30m": []},
    ),
    # CrossplaneWatchCircuitBreakerOpen
    Case(
        "a breaker that opened and never closed is open",
        "one open, no closes series at all (core exports none until one closes)",
        "CrossplaneWatchCircuitBreakerOpen",
        {'circuit_breaker_opens_total{controller="composite/xcontrolplanes"}': "1x30"},
        {"10m": [{"controller": "composite/xcontrolplanes"}]},
    ),
    Case(
        "a breaker that opened and closed again is not open",
        "as many closes as opens",
        "CrossplaneWatchCircuitBreakerOpen",
        {
            'circuit_breaker_opens_total{controller="composite/xcontrolplanes"}': "2x30",
            'circuit_breaker_closes_total{controller="composite/xcontrolplanes"}': "2x30",
        },
        {"20m": []},
    ),
    Case(
        "an open breaker resolves when it closes",
        "the close comes at 15m",
        "CrossplaneWatchCircuitBreakerOpen",
        {
            'circuit_breaker_opens_total{controller="composite/xcontrolplanes"}': "1x30",
            'circuit_breaker_closes_total{controller="composite/xcontrolplanes"}': "0x15 1x15",
        },
        {"10m": [{"controller": "composite/xcontrolplanes"}], "20m": []},
    ),
    # ControlPlaneProviderReconcileErrors
    Case(
        "a controller with half its reconciles failing fires",
        "10 reconciles and 5 errors a minute",
        "ControlPlaneProviderReconcileErrors",
        {
            'controlplane_provider_reconcile_total{controller="instance", result="success"}': (
                "0+5x40"
            ),
            'controlplane_provider_reconcile_total{controller="instance", result="error"}': (
                "0+5x40"
            ),
            'controlplane_provider_reconcile_errors_total{controller="instance"}': "0+5x40",
        },
        {"25m": [{"controller": "instance"}]},
        value="50%",
    ),
    Case(
        "a controller with a rare error does not fire",
        "one error in a hundred reconciles",
        "ControlPlaneProviderReconcileErrors",
        {
            'controlplane_provider_reconcile_total{controller="instance", result="success"}': (
                "0+99x40"
            ),
            'controlplane_provider_reconcile_total{controller="instance", result="error"}': (
                "0+1x40"
            ),
            'controlplane_provider_reconcile_errors_total{controller="instance"}': "0+1x40",
        },
        {"30m": []},
    ),
    Case(
        "reconcile errors resolve when the errors stop",
        "errors stop at 25m; the 5m rate is clean by 31m",
        "ControlPlaneProviderReconcileErrors",
        {
            'controlplane_provider_reconcile_total{controller="instance", result="success"}': (
                "0+5x60"
            ),
            'controlplane_provider_reconcile_total{controller="instance", result="error"}': (
                "0+5x25 125x35"
            ),
            'controlplane_provider_reconcile_errors_total{controller="instance"}': "0+5x25 125x35",
        },
        {"22m": [{"controller": "instance"}], "35m": []},
        value="50%",
    ),
    # ControlPlaneBackupNotVerified
    Case(
        "a schedule whose last passed drill is older than two drill intervals is not verified",
        "the last pass was at 0 and drills run hourly: at 2h10m it is late",
        "ControlPlaneBackupNotVerified",
        {
            f"controlplane_backup_last_verified_timestamp_seconds{{{S}}}": "0x200",
            f"controlplane_backup_drill_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"1h": [], "2h10m": [TEAM]},
    ),
    Case(
        "a schedule whose drills never passed fires two drill intervals after it was created",
        "no verified series at all must not hide the schedule",
        "ControlPlaneBackupNotVerified",
        {
            f"controlplane_backup_drill_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"1h50m": [], "2h10m": [TEAM]},
    ),
    Case(
        "a late schedule resolves when a drill passes",
        "the verified timestamp jumps to 2h20m: the alert fired before and clears after",
        "ControlPlaneBackupNotVerified",
        {
            f"controlplane_backup_last_verified_timestamp_seconds{{{S}}}": "0x140 8400x60",
            f"controlplane_backup_drill_interval_seconds{{{S}}}": f"{HOUR}x200",
            f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x200",
        },
        {"2h15m": [TEAM], "2h25m": []},
    ),
    Case(
        "a schedule that asks for no drills never fires",
        "it exports no drill interval, so nothing is measured against it",
        "ControlPlaneBackupNotVerified",
        {f"controlplane_backup_schedule_created_timestamp_seconds{{{S}}}": "0x300"},
        {"4h": []},
    ),
    # ControlPlaneRestoreDrillFailing
    Case(
        "a schedule whose newest drill failed is alerted at once",
        "drill_failed is 1 from the start: no for",
        "ControlPlaneRestoreDrillFailing",
        {f"controlplane_backup_last_drill_failed{{{S}}}": "1x30"},
        {"5m": [TEAM]},
    ),
    Case(
        "a schedule whose drills pass is not alerted",
        "drill_failed stays 0",
        "ControlPlaneRestoreDrillFailing",
        {f"controlplane_backup_last_drill_failed{{{S}}}": "0x90"},
        {"1h": []},
    ),
    Case(
        "a failed drill resolves when a later drill passes",
        "drill_failed goes back to 0 at 20m",
        "ControlPlaneRestoreDrillFailing",
        {f"controlplane_backup_last_drill_failed{{{S}}}": "1x20 0x40"},
        {"10m": [TEAM], "30m": []},
    ),
]


def test_every_alert_has_a_case_that_fires_one_that_does_not_and_one_that_resolves() -> None:
    for alert in alerts.ALERTS:
        mine = [case for case in CASES if case.alert == alert.name]
        fires = any(any(expected) for case in mine for expected in case.expect.values())
        quiet = any(not any(case.expect.values()) for case in mine)
        resolves = any(
            any(case.expect.values()) and not list(case.expect.values())[-1] for case in mine
        )
        assert (fires, quiet, resolves) == (True, True, True), alert.name


def test_promtool_checks_both_generated_rule_files(promtool: Path) -> None:
    for path in (generate.RULES, generate.PROMETHEUS_RULE):
        if path == generate.PROMETHEUS_RULE:
            # promtool reads a rules file: the PrometheusRule's spec is one.
            spec = yaml.safe_load(path.read_text())["spec"]
            assert spec == yaml.safe_load(generate.RULES.read_text())
            continue
        result = subprocess.run(
            [str(promtool), "check", "rules", str(path)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_section_and_the_mixin_annotations() -> None:
    headings = {
        line[3:].strip().lower()
        for line in (ROOT / "docs" / "runbooks.md").read_text().splitlines()
        if line.startswith("## ")
    }
    for alert in alerts.ALERTS:
        rule = alert.rule()
        assert rule["labels"]["severity"] in {"critical", "warning"}, alert.name
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in headings, f"{alert.name}: docs/runbooks.md has no section {anchor}"


_LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")
_VALUE = re.compile(r"\{\{ \$value \| humanizePercentage \}\}")


def _annotations(alert: alerts.Alert, labels: dict[str, str], value: str) -> dict[str, str]:
    """The annotations as Prometheus renders them for these labels and value."""

    def render(template: str) -> str:
        return _VALUE.sub(value, _LABEL.sub(lambda m: labels.get(m.group(1), ""), template))

    annotations: dict[str, str] = alert.rule()["annotations"]
    return {key: render(text) for key, text in annotations.items()}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_alert_rule_unit_test(case: Case, promtool: Path, tmp_path: Path) -> None:
    alert = next(a for a in alerts.ALERTS if a.name == case.alert)
    expected = {
        time: [
            {
                "exp_labels": {**labels, "severity": alert.severity},
                "exp_annotations": _annotations(alert, labels, case.value),
            }
            for labels in alerts_then
        ]
        for time, alerts_then in case.expect.items()
    }
    test = {
        "rule_files": [str(generate.RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": case.name,
                "interval": case.interval,
                "input_series": [
                    {"series": series, "values": values} for series, values in case.series.items()
                ],
                "alert_rule_test": [
                    {"eval_time": time, "alertname": case.alert, "exp_alerts": exp}
                    for time, exp in expected.items()
                ],
            }
        ],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        [str(promtool), "test", "rules", str(path)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, f"{case.reason}\n{result.stdout}{result.stderr}"


def test_the_rules_and_the_metrics_table_are_current() -> None:
    stale = [
        str(path.relative_to(ROOT))
        for path, content in generate.generated().items()
        if not path.exists() or path.read_text() != content
    ]
    assert stale == [], f"{stale} are stale: run `make docs` and commit them"


def test_every_metric_the_rules_name_is_exported_by_us_flux_or_crossplane() -> None:
    ours = {line.split("`")[1] for line in generate.metrics_table().splitlines()[2:]}
    theirs = {
        "gotk_reconcile_condition",  # fluxcd/pkg/runtime/metrics (kustomize-controller v1.9.6)
        "circuit_breaker_opens_total",  # crossplane v2.2.1 internal/circuit/circuit_metrics.go
        "circuit_breaker_closes_total",
    }
    for alert in alerts.ALERTS:
        named = set(re.findall(r"\b(controlplane_\w+|gotk_\w+|circuit_breaker_\w+)\b", alert.expr))
        assert named, alert.name
        assert named <= ours | theirs, f"{alert.name} names {sorted(named - ours - theirs)}"
