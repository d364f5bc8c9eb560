"""Restore drills on the whole platform: a good archive passes, a withdrawn package fails.

Two ControlPlanes, each in a namespace of its own (one drill per namespace at
once), run Crossplane in their hosted control planes and install the fixture
Configuration from the sandbox's registry, each under a tag of its own. A
Backup of each is made by hand, labelled as its schedule's own so the drill
takes it as the newest, and then the second tag is withdrawn from the
registry: that archive's package can no longer install. The composites then
ask for drills (``spec.backup.verify``): the backup controller creates a
throwaway Instance per schedule, our provider makes it in the Space and
restores the Backup into it, and core runs there as in every Space control
plane (started as it appears). Then:

- the good archive passes: the schedule is ``Verified``, the composite's
  ``status.backup.lastVerifiedBackup`` names the Backup;
- the withdrawn one fails in Crossplane's own words about the package, the
  composite's ``BackupsReady`` is False in them, and
  ControlPlaneRestoreDrillFailing fires in the platform's Prometheus for it
  alone;
- both throwaway Instances are gone.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from provider.backup.controllers import drills
from provider.backup.controllers.backups import SCHEDULE_LABEL
from sandbox.hosted import HostedControlPlane
from sandbox.platform import Platform
from sandbox.prometheus import Alert
from sandbox.registry import Package
from sandbox.spaces import condition, wait_for
from tests.fixtures.packages import CONFIGURATION

from .helpers import INSTANCE, XR, bare, create, get, hosted_name, is_true, unique, wait_ready
from .test_crossplane_restore import (
    BACKUP,
    CROSSPLANE_DEADLINE,
    NEVER,
    SCHEDULE,
    crossplane_started_when_it_appears,
)

# Drills at most hourly (the contract's minimum); the withdrawn one's verdict comes
# 30 s before its deadline, once its last check still finds the package failing.
VERIFY = {"interval": "1h", "deadline": "4m"}
VERDICT_DEADLINE = 300.0
# Core's poll of the composite and its composing, on two shared cores.
COMPOSE_DEADLINE = 60.0
PROMETHEUS_DEADLINE = 60.0
WITHDRAWN = dataclasses.replace(CONFIGURATION, version="v0.1.0-withdrawn")


@dataclasses.dataclass(frozen=True)
class Team:
    namespace: str
    name: str
    package: Package
    backup: str = ""


def with_configuration(platform: Platform, team: Team) -> str:
    """The team's ControlPlane with core and the Configuration at ``team.package`` installed.

    Returns the loopback reference the Configuration was installed from.
    """
    wait_ready(platform, XR, team.namespace, team.name)
    plane: HostedControlPlane = platform.crossplane_in(
        hosted_name(platform, team.namespace, team.name)
    )
    wait_for("Crossplane running", plane.crossplane_running, timeout=CROSSPLANE_DEADLINE)
    reference = platform.registry.push(team.package)
    plane.install_configuration(CONFIGURATION.name, reference)
    wait_for(
        f"the Configuration of {team.namespace} Installed and Healthy",
        partial(plane.configuration_healthy, CONFIGURATION.name),
        timeout=CROSSPLANE_DEADLINE,
    )
    return reference


def scheduled_backup(platform: Platform, team: Team) -> str:
    """A Backup of the team's Instance as its schedule's own, once Completed; its name."""
    schedule = get(platform.kube, SCHEDULE, team.namespace, team.name)
    assert schedule is not None
    name = unique("drilled")
    create(
        platform.kube,
        BACKUP,
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Backup",
            "metadata": {
                "name": name,
                "namespace": team.namespace,
                "labels": {SCHEDULE_LABEL: team.name},
            },
            "spec": {
                "instanceRef": schedule["spec"]["instanceRef"],
                "storage": schedule["spec"]["storage"],
            },
        },
    )
    wait_for(
        f"Backup {name} Completed",
        lambda: is_true(get(platform.kube, BACKUP, team.namespace, name), "Completed"),
        timeout=CROSSPLANE_DEADLINE,
    )
    return name


def verdict(platform: Platform, team: Team) -> dict[str, Any] | None:
    """The schedule's Verified condition once a drill ended (passed or failed)."""
    found = condition(get(platform.kube, SCHEDULE, team.namespace, team.name), "Verified")
    return found if found.get("reason") in (drills.PASSED, drills.FAILED) else None


def gone(platform: Platform, namespace: str, name: str) -> bool:
    return get(platform.kube, INSTANCE, namespace, name) is None


def test_a_drill_passes_on_a_good_archive_and_fails_in_crossplanes_words_on_a_withdrawn_package(
    platform: Platform,
) -> None:
    good = Team(unique("drill-good"), "ctp", CONFIGURATION)
    withdrawn = Team(unique("drill-withdrawn"), "ctp", WITHDRAWN)
    for team in (good, withdrawn):
        platform.kube.namespace(team.namespace)
        create(platform.kube, XR, bare(team.namespace, team.name, backup={"schedule": NEVER}))
    withdrawn_reference = with_configuration(platform, withdrawn)
    with_configuration(platform, good)
    good = dataclasses.replace(good, backup=scheduled_backup(platform, good))
    withdrawn = dataclasses.replace(withdrawn, backup=scheduled_backup(platform, withdrawn))
    platform.registry.withdraw(withdrawn_reference)

    for team in (good, withdrawn):
        group, version, plural = XR
        platform.kube.patch(
            plural,
            team.namespace,
            team.name,
            {"spec": {"backup": {"verify": VERIFY}}},
            group,
            version,
        )
    throwaways = {
        team: crossplane_started_when_it_appears(
            platform, team.namespace, drills.drill_name(team.name, team.backup)
        )
        for team in (good, withdrawn)
    }
    assert len(set(throwaways.values())) == 2, throwaways

    passed = wait_for(
        "the good drill's verdict", partial(verdict, platform, good), timeout=VERDICT_DEADLINE
    )
    assert passed["status"] == "True", passed
    assert passed["message"].startswith(
        f"Backup {good.backup} restored into a throwaway control plane: "
    ), passed
    assert "1 packages Installed and Healthy" in passed["message"], passed
    wait_for(
        "the good composite's lastVerifiedBackup",
        lambda: (
            (get(platform.kube, XR, good.namespace, good.name)["status"].get("backup") or {}).get(
                "lastVerifiedBackup"
            )
            == good.backup
        ),
        timeout=COMPOSE_DEADLINE,
    )

    failed = wait_for(
        "the withdrawn drill's verdict",
        partial(verdict, platform, withdrawn),
        timeout=VERDICT_DEADLINE,
    )
    assert failed["status"] == "False", failed
    assert failed["message"].startswith(
        f"Backup {withdrawn.backup} restored but failed its check: "
        f"Configuration {CONFIGURATION.name} is not Installed"
    ), failed
    # Crossplane's own words: the tag it cannot resolve any more.
    assert "cannot unpack package" in failed["message"], failed
    assert f":{WITHDRAWN.version}" in failed["message"], failed
    told = wait_for(
        "the withdrawn composite's BackupsReady False",
        lambda: (
            found
            if (
                found := condition(
                    get(platform.kube, XR, withdrawn.namespace, withdrawn.name), "BackupsReady"
                )
            ).get("status")
            == "False"
            else None
        ),
        timeout=COMPOSE_DEADLINE,
    )
    assert told["reason"] == drills.FAILED, told
    assert told["message"] == f"BackupSchedule {withdrawn.name}: {failed['message']}", told

    drill_failing = Alert("ControlPlaneRestoreDrillFailing", withdrawn.namespace, withdrawn.name)
    wait_for(
        "ControlPlaneRestoreDrillFailing firing for the withdrawn schedule",
        lambda: drill_failing in platform.prometheus.firing(),
        timeout=PROMETHEUS_DEADLINE,
    )
    assert Alert("ControlPlaneRestoreDrillFailing", good.namespace, good.name) not in (
        platform.prometheus.firing()
    )
    for team in (good, withdrawn):
        name = drills.drill_name(team.name, team.backup)
        wait_for(
            f"the throwaway Instance {name} gone",
            partial(gone, platform, team.namespace, name),
            timeout=COMPOSE_DEADLINE,
        )
