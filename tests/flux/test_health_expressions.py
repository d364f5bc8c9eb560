"""A team's health expression against the real kustomize-controller under its stock memory limit.

Flux's kustomize-controller ships with a 1 GiB memory limit. The issue's attack
(a string ``.replace`` chained eight times in a stage's ``current``) gets it
OOM-killed in one evaluation, which stops every team's sync. This test runs
the controller in a cgroup of 1 GiB, syncs a stage whose health check the
function rendered, then applies the same Kustomization with the issue's
expression written into it, as the function rendered it before it checked
expressions: the kernel kills the controller. The function itself refuses that
expression with a Fatal result naming the field, so it never reaches Flux.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from function.render import FatalError
from sandbox.spaces import condition, wait_for
from tests.function.test_expressions import REPLACE_BOMB

from .conftest import FluxWorld, configmap
from .memory import GIB, memory_cgroup, skip_reason

NAMESPACE = "team-a"
# Flux's own deployment: limits.memory 1Gi (kustomize-controller config/manager).
FLUX_MEMORY_LIMIT = GIB
STAGE: dict[str, Any] = {
    "name": "app",
    "path": "./app",
    "healthCheckExprs": [{"apiVersion": "v1", "kind": "ConfigMap", "current": "true"}],
}
SYNC_DEADLINE = 90.0
OOM_DEADLINE = 90.0


def _source(url: str, current: str) -> dict[str, Any]:
    stage = copy.deepcopy(STAGE)
    stage["healthCheckExprs"][0]["current"] = current
    return {"url": url, "interval": "10s", "stages": [stage]}


def test_the_issues_expression_is_refused_by_the_function_and_oom_kills_flux_if_it_gets_there(
    flux_world: Callable[..., FluxWorld],
) -> None:
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    with memory_cgroup(FLUX_MEMORY_LIMIT) as cgroup:
        world = flux_world(cgroup=cgroup.path)
        world.team(NAMESPACE)
        repository = world.repository(NAMESPACE, {"app/cm.yaml": configmap("app")})

        # The function refuses the expression: a Fatal result naming the field, nothing rendered.
        with pytest.raises(FatalError) as refused:
            world.compose(NAMESPACE, _source(repository.url, REPLACE_BOMB))
        assert "spec.source.stages[0].healthCheckExprs[0].current" in str(refused.value)
        assert ".replace(" not in str(refused.value)

        # What it renders for a benign check syncs under the limit.
        objects = world.compose(NAMESPACE, _source(repository.url, "true"))
        world.apply(objects)
        wait_for(
            "the benign stage Ready",
            lambda: (
                condition(world.kustomization(NAMESPACE, "ctp-app"), "Ready").get("status")
                == "True"
            ),
            SYNC_DEADLINE,
        )
        benign_peak = cgroup.peak()
        assert cgroup.oom_kills() == 0

        # The same Kustomization with the issue's expression, as rendered before the check.
        world.kube.patch(
            "kustomizations",
            NAMESPACE,
            "ctp-app",
            {"spec": {"healthCheckExprs": _with_current(objects, REPLACE_BOMB)}},
            "kustomize.toolkit.fluxcd.io",
            "v1",
        )
        started = time.monotonic()
        wait_for("the kernel's OOM kill", lambda: cgroup.oom_kills() >= 1, OOM_DEADLINE)
        killed_after = time.monotonic() - started
        controller = world.flux.kustomize_controller
        wait_for("kustomize-controller gone", lambda: not controller.running(), 30)
        assert controller.wait(timeout=1) == -9  # SIGKILL, from the kernel
        print(
            f"\nbenign sync peak {benign_peak / 2**20:.0f} MiB; the issue's expression "
            f"({len(REPLACE_BOMB)} characters) OOM-killed kustomize-controller under "
            f"{FLUX_MEMORY_LIMIT / 2**30:.0f} GiB {killed_after:.1f} s after it was applied"
        )


def _with_current(objects: list[dict[str, Any]], current: str) -> list[dict[str, Any]]:
    """The stage's rendered health checks, its own (the last) with ``current`` replaced."""
    kustomization = next(obj for obj in objects if obj["kind"] == "Kustomization")
    checks = copy.deepcopy(kustomization["spec"]["healthCheckExprs"])
    checks[-1]["current"] = current
    return list(checks)
