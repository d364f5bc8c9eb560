"""One team's waiting stages against another team's sync, on the real kustomize-controller.

A stage waits for its health checks (``wait: true``) inside a reconcile, holding
one of kustomize-controller's ``--concurrent`` workers until they pass or its
timeout ends. Team A's composite has four stages whose check is never true,
each with the longest timeout the function allows (``source.maxTimeout``):
the cap bounds how long, but the four still hold four workers. Flux has no
per-namespace worker limit, so what frees a worker for team B is sizing:
``--concurrent`` above the Kustomizations one namespace may hold (its
ResourceQuota, ``deploy/tenancy``). With Flux's default of four, team B's
Kustomization gets no reconcile at all within its interval; with one worker
more than team A may hold, it is Ready within one interval.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.spaces import condition, wait_for

from .conftest import FluxWorld, configmap

# Team A's Kustomizations: the ResourceQuota a team namespace gets in this scenario.
HELD = 4
INTERVAL_SECONDS = 10
INTERVAL = f"{INTERVAL_SECONDS}s"
# Flux's health check polls every 5 s (ssa.WaitOptions); a reconcile applies and
# polls once before a Ready check passes.
SETTLE_DEADLINE = 120.0


@dataclass(frozen=True)
class FairnessCase:
    reason: str
    concurrent: int
    served: bool


CASES = [
    FairnessCase(
        "Flux's default --concurrent=4: team A's four waiting stages hold every worker, and "
        "team B's Kustomization gets no reconcile within its interval",
        concurrent=HELD,
        served=False,
    ),
    FairnessCase(
        "--concurrent one above what a namespace may hold: team B is Ready within one interval",
        concurrent=HELD + 1,
        served=True,
    ),
]


def _stage(index: int) -> dict[str, Any]:
    return {
        "name": f"s{index}",
        "path": f"./s{index}",
        # The longest a team may ask for, and a check that never passes.
        "timeout": "30m",
        "healthCheckExprs": [{"apiVersion": "v1", "kind": "ConfigMap", "current": "false"}],
    }


def _ready(world: FluxWorld, namespace: str, name: str) -> bool:
    found = world.kustomization(namespace, name)
    return condition(found, "Ready").get("status") == "True"


def _waiting(world: FluxWorld, namespace: str, name: str) -> bool:
    message = condition(world.kustomization(namespace, name), "Healthy").get("message", "")
    return "Running health checks" in message


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_one_teams_waiting_stages_delay_another_team_no_longer_than_flux_is_sized_for(
    flux_world: Callable[..., FluxWorld], case: FairnessCase
) -> None:
    world = flux_world(kustomize_flags=(f"--concurrent={case.concurrent}",))
    world.team("team-a")
    world.team("team-b")
    files = {f"s{i}/cm.yaml": configmap(f"s{i}") for i in range(HELD)}
    a = world.repository("team-a", files)
    b = world.repository("team-b", {"cm.yaml": configmap("b")})
    stages = [_stage(i) for i in range(HELD)]
    world.apply(world.compose("team-a", {"url": a.url, "interval": INTERVAL, "stages": stages}))
    for index in range(HELD):
        wait_for(
            f"team A's stage s{index} waiting for its health checks",
            functools.partial(_waiting, world, "team-a", f"ctp-s{index}"),
            SETTLE_DEADLINE,
        )

    # Team B's source is fetched first: what is measured is kustomize-controller alone.
    team_b = world.compose("team-b", {"url": b.url, "interval": INTERVAL})
    repository = [obj for obj in team_b if obj["kind"] == "GitRepository"]
    world.apply(repository)
    wait_for(
        "team B's artifact",
        lambda: (
            condition(
                world.kube.get(
                    "gitrepositories", "team-b", "ctp", "source.toolkit.fluxcd.io", "v1"
                ),
                "Ready",
            ).get("status")
            == "True"
        ),
        SETTLE_DEADLINE,
    )
    world.apply([obj for obj in team_b if obj["kind"] == "Kustomization"])
    created = time.monotonic()
    if case.served:
        wait_for("team B Ready", lambda: _ready(world, "team-b", "ctp"), INTERVAL_SECONDS)
        print(f"\nteam B Ready after {time.monotonic() - created:.1f} s")
    else:
        # Twice its interval, and still not a single status written.
        time.sleep(2 * INTERVAL_SECONDS)
        assert not (world.kustomization("team-b", "ctp") or {}).get("status", {}).get("conditions")
    # Team A still holds its workers either way: what freed one for B is the sizing.
    assert all(_waiting(world, "team-a", f"ctp-s{index}") for index in range(HELD))
