"""The Grafana dashboards, built with grafana-foundation-sdk rather than written as JSON.

Two dashboards: the platform's overview (every team's backups, control planes,
sync and the controllers) and one team's control plane (``$namespace``). Every
query names only metrics our controllers, Flux or Crossplane core export;
tests/monitoring/test_dashboards.py checks that and parses each with promtool.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder

# A template variable of the dashboards: the Prometheus data source.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TEAM = 'namespace="$namespace"'


def _query(expr: str, legend: str = "") -> prometheus.Dataquery:
    query = prometheus.Dataquery().ref_id("A").expr(expr).datasource(DATASOURCE)  # type: ignore[arg-type]
    return query.legend_format(legend) if legend else query


def _series(title: str, unit: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).height(8).span(12)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _stat(title: str, unit: str, query: prometheus.Dataquery) -> stat.Panel:
    return stat.Panel().title(title).unit(unit).height(4).span(6).with_target(query)


def _base(uid: str, title: str) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .tags(["controlplane"])
        .refresh("1m")
        .time("now-6h", "now")
        .with_variable(dashboard.DatasourceVariable("datasource").type("prometheus"))
    )


def overview() -> dashboard.Dashboard:
    """Every team at once: what is late, failing, not ready or not synced."""
    return (
        _base("controlplane-overview", "Control planes: platform overview")
        .with_panel(
            _stat(
                "Control planes not ready",
                "none",
                _query("count(controlplane_instance_ready == 0) or vector(0)"),
            )
        )
        .with_panel(
            _stat(
                "Backups failing",
                "none",
                _query("count(controlplane_backup_last_backup_failed == 1) or vector(0)"),
            )
        )
        .with_panel(
            _stat(
                "Syncs not ready",
                "none",
                _query(
                    'count(gotk_reconcile_condition{type="Ready", status="False"} == 1)'
                    " or vector(0)"
                ),
            )
        )
        .with_panel(
            _stat(
                "Circuit breakers open",
                "none",
                _query(
                    "sum(circuit_breaker_opens_total)"
                    " - sum(circuit_breaker_closes_total or circuit_breaker_opens_total * 0)"
                ),
            )
        )
        .with_panel(
            _series(
                "Age of the newest successful backup, per schedule",
                "s",
                _query(
                    "time() - controlplane_backup_last_success_timestamp_seconds",
                    "{{namespace}}/{{name}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Backup failures by reason",
                "short",
                _query(
                    "sum by (reason) (increase(controlplane_backup_failures_total[1h]))",
                    "{{reason}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Provider reconciles by result",
                "ops",
                _query(
                    "sum by (controller, result) (rate(controlplane_provider_reconcile_total[5m]))",
                    "{{controller}} {{result}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Provider work queue depth",
                "short",
                _query("controlplane_provider_workqueue_depth", "{{controller}}"),
            )
        )
        .with_panel(
            _series(
                "Crossplane versions of the control planes",
                "short",
                _query(
                    "count by (crossplane_version) (controlplane_instance_info)",
                    "{{crossplane_version}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Crossplane core: circuit breaker events by result",
                "ops",
                _query("sum by (result) (rate(circuit_breaker_events_total[5m]))", "{{result}}"),
            )
        )
    )


def team() -> dashboard.Dashboard:
    """One team's control plane: its readiness, backups, restore and sync."""
    return (
        _base("controlplane-team", "Control planes: one team")
        .with_variable(
            dashboard.QueryVariable("namespace")
            .label("Team namespace")
            .query("label_values(controlplane_instance_ready, namespace)")
            .datasource(DATASOURCE)  # type: ignore[arg-type]
        )
        .with_panel(_stat("Ready", "none", _query(f"max(controlplane_instance_ready{{{TEAM}}})")))
        .with_panel(
            _stat(
                "Newest successful backup",
                "dateTimeFromNow",
                _query(f"max(controlplane_backup_last_success_timestamp_seconds{{{TEAM}}}) * 1000"),
            )
        )
        .with_panel(
            _stat(
                "Newest backup failed",
                "none",
                _query(f"max(controlplane_backup_last_backup_failed{{{TEAM}}})"),
            )
        )
        .with_panel(
            _stat(
                "Restore progress",
                "percentunit",
                _query(
                    f"controlplane_restore_objects_applied{{{TEAM}}}"
                    f" / controlplane_restore_objects{{{TEAM}}}"
                ),
            )
        )
        .with_panel(
            _series(
                "Backup failures by reason",
                "short",
                _query(
                    f"sum by (reason) (increase(controlplane_backup_failures_total{{{TEAM}}}[1h]))",
                    "{{reason}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Sync: Flux objects not ready",
                "short",
                _query(
                    f'gotk_reconcile_condition{{{TEAM}, type="Ready", status="False"}}',
                    "{{kind}} {{name}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Sync: reconcile duration (p90)",
                "s",
                _query(
                    "histogram_quantile(0.9, sum by (kind, name, le) "
                    f"(rate(gotk_reconcile_duration_seconds_bucket{{{TEAM}}}[5m])))",
                    "{{kind}} {{name}}",
                ),
            )
        )
    )


def generated() -> dict[str, str]:
    """Each dashboard's file name and JSON."""
    out: dict[str, str] = {}
    for name, board in (("overview.json", overview()), ("team.json", team())):
        document: Any = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(board.build()))
        out[name] = json.dumps(document, indent=2, sort_keys=True) + "\n"
    return out


def queries(document: dict[str, Any]) -> list[str]:
    """Every query of a dashboard's panels and variables (``label_values(...)`` is Grafana's)."""
    found = [
        target["expr"]
        for panel in document.get("panels") or []
        for target in panel.get("targets") or []
    ]
    for variable in (document.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            query = variable["query"]
            found.append(query["query"] if isinstance(query, dict) else query)
    return found
