"""The health checks Flux would evaluate after applying a stage.

With ``wait: true`` kustomize-controller waits for every object it applied:
by the Kustomization's ``healthCheckExprs`` (CEL) for the group and kind one
names (any version), else by kstatus, Kubernetes' generic readiness rules.
The expressions come from the rendered Kustomization, so the plan shows the
platform's Crossplane-aware defaults, the input's and the stage's as the
function rendered them. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from plan.changes import Built, HealthCheck

KSTATUS = "kstatus (Kubernetes' generic readiness rules)"


def _group_kind(api_version: str, kind: str) -> str:
    group = api_version.rpartition("/")[0]
    return f"{kind}.{group}" if group else kind


def checks(kustomization: Mapping[str, Any], objects: Iterable[Built]) -> tuple[HealthCheck, ...]:
    """One line per group and kind applied: how many objects, and by which rule.

    Nothing when the Kustomization does not wait.
    """
    spec = kustomization.get("spec") or {}
    if not spec.get("wait"):
        return ()
    expressions = {
        _group_kind(str(check.get("apiVersion")), str(check.get("kind"))): check
        for check in spec.get("healthCheckExprs") or ()
    }
    applied = Counter(
        _group_kind(item.api_version, str(item.object.get("kind"))) for item in objects
    )
    found = []
    for group_kind, count in sorted(applied.items()):
        check = expressions.get(group_kind)
        if check is None:
            found.append(HealthCheck(group_kind, count, KSTATUS))
            continue
        rule = f"current when {check['current']}"
        if check.get("failed"):
            rule += f"; failed when {check['failed']}"
        found.append(HealthCheck(group_kind, count, rule))
    return tuple(found)
