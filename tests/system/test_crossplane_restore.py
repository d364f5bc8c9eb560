"""A Backup and a restore of a hosted control plane with Crossplane running inside it.

Crossplane core runs in the team's hosted control plane (``crossplane_in``) and
installs a Configuration from the sandbox's registry; a Backup made by hand
holds the Configuration and what the team made with it, and leaves out what
Crossplane makes again (its Lock, the Configuration's revision, the XRD and
Composition that revision owns). A ControlPlane restored from it gets core
started as soon as its hosted control plane appears (as a Space's control
plane always runs Crossplane); the restore applies the Configuration, waits
for the CRDs Crossplane then installs, and lands the rest: the Configuration
is Installed and Healthy again, the composite of its XRD is back, and the
managed resources come back unpaused, except the one paused in the backup.

No provider can run in a hosted control plane here (the package runtime is
External and nothing plays it there), so the managed kind is a CRD of a
``*.crossplane.io`` group in the category ``managed``, created by the test in
both control planes, standing in for the CRD a provider package installs.
"""

from __future__ import annotations

import io
from functools import partial
from typing import Any

import pytest

from provider.backup.format import archive
from provider.backup.storage.s3 import StorageSpec, Store
from sandbox.hosted import HostedControlPlane
from sandbox.platform import Platform
from sandbox.s3 import use_credentials
from sandbox.spaces import Kube, wait_for
from tests.fixtures.packages import CONFIGURATION, CONFIGURATION_XRD

from .helpers import INSTANCE, XR, bare, create, get, hosted_name, is_true, unique, wait_ready

BACKUP = ("controlplane.spaces.upbound.io", "v1alpha1", "backups")
SCHEDULE = ("controlplane.spaces.upbound.io", "v1alpha1", "backupschedules")
# Core's start in a fresh hosted control plane, a package install and a restore that
# waits for both, on two shared cores.
CROSSPLANE_DEADLINE = 300.0
RESTORE_DEADLINE = 600.0
NEVER = "0 0 1 1 *"
NOTES = ("fixture.acme.io", "v1alpha1", "notes")
WIDGETS = ("test.crossplane.io", "v1", "widgets")
APP = "team-things"
PAUSED = "crossplane.io/paused"
# What Crossplane makes again in a new control plane: never in the archive.
REINSTALLED_FOLDERS = ("locks.pkg.crossplane.io", "configurationrevisions.pkg.crossplane.io")


def widget_crd() -> dict[str, Any]:
    """A managed kind, as a provider's CRD is one: in the categories crossplane and managed."""
    group, version, plural = WIDGETS
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": "Widget",
                "plural": plural,
                "singular": "widget",
                "categories": ["crossplane", "managed"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def install_widget_crd(kube: Kube) -> None:
    group, _, plural = WIDGETS
    kube.extensions.create_custom_resource_definition(widget_crd())
    wait_for("the Widget CRD Established", partial(kube.established, f"{plural}.{group}"))


def widget(name: str, *, paused: bool) -> dict[str, Any]:
    group, version, _ = WIDGETS
    annotations = {PAUSED: "true"} if paused else {}
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": APP, "annotations": annotations},
        "spec": {"forProvider": {"size": name}},
    }


def annotations_of(kube: Kube, kind: tuple[str, str, str], name: str) -> dict[str, str] | None:
    group, version, plural = kind
    found = kube.get(plural, APP, name, group, version)
    return None if found is None else dict(found["metadata"].get("annotations") or {})


def backed_up_by_hand(platform: Platform, namespace: str, schedule: str, name: str) -> Any:
    """A Backup of the composite's Instance to its schedule's storage, once Completed."""
    found = get(platform.kube, SCHEDULE, namespace, schedule)
    assert found is not None
    create(
        platform.kube,
        BACKUP,
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Backup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "instanceRef": found["spec"]["instanceRef"],
                "storage": found["spec"]["storage"],
            },
        },
    )

    def completed() -> Any:
        backup = get(platform.kube, BACKUP, namespace, name)
        return backup if is_true(backup, "Completed") else None

    return wait_for(f"Backup {name} Completed", completed, timeout=CROSSPLANE_DEADLINE)


def stored_archive(
    platform: Platform, backup: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[archive.Manifest, set[tuple[str, str]]]:
    """The archive as stored: its manifest, and (folder, name) of every object in it."""
    seaweed = platform.aws.seaweed
    use_credentials(monkeypatch, seaweed.access_key, seaweed.secret_key)
    location = backup["status"]["location"]
    store = Store.connect(StorageSpec(bucket=location["bucket"], endpoint=seaweed.endpoint))
    data = io.BytesIO()
    store.download(location["key"], data)
    manifest = archive.verify(io.BytesIO(data.getvalue()))
    held = {
        (rtype.folder, obj["metadata"]["name"])
        for rtype, obj in archive.objects(io.BytesIO(data.getvalue()), manifest)
    }
    return manifest, held


def crossplane_state(plane: HostedControlPlane) -> str:
    """The packages, revisions and XRDs of a control plane with their conditions, to read."""
    found = []
    for group, version, plural in (
        ("pkg.crossplane.io", "v1", "configurations"),
        ("pkg.crossplane.io", "v1", "configurationrevisions"),
        ("apiextensions.crossplane.io", "v2", "compositeresourcedefinitions"),
    ):
        listed = plane.kube.custom.list_cluster_custom_object(group, version, plural)["items"]
        for item in listed:
            conditions = [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (item.get("status") or {}).get("conditions") or []
            ]
            owners = [o.get("kind") for o in item["metadata"].get("ownerReferences") or []]
            found.append(f"{plural}/{item['metadata']['name']} owners={owners} {conditions}")
    return "; ".join(found)


def crossplane_started_when_it_appears(platform: Platform, namespace: str, name: str) -> str:
    """Start core in the composite's hosted control plane as soon as the Space makes it.

    A Space's control plane runs Crossplane from its start; here core starts on
    demand, while the restore waits for Crossplane's CRDs.
    """

    def hosted() -> str | None:
        instance = get(platform.kube, INSTANCE, namespace, name)
        annotations = ((instance or {}).get("metadata") or {}).get("annotations") or {}
        external = annotations.get("crossplane.io/external-name")
        return external if external in platform.hosted else None

    external: str = wait_for(f"the hosted control plane of {name}", hosted, timeout=240.0)
    platform.crossplane_in(external)
    return external


def test_a_restore_reinstalls_the_configuration_and_brings_managed_resources_back_unpaused(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, name = unique("xpkg"), "ctp"
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, name, backup={"schedule": NEVER}))
    wait_ready(platform, XR, namespace, name)
    source: HostedControlPlane = platform.crossplane_in(hosted_name(platform, namespace, name))
    wait_for("Crossplane running", source.crossplane_running, timeout=CROSSPLANE_DEADLINE)

    # The team installs a Configuration from the registry, and makes things with it.
    source.install_configuration(CONFIGURATION.name, platform.registry.push(CONFIGURATION))
    wait_for(
        "the Configuration Installed and Healthy",
        partial(source.configuration_healthy, CONFIGURATION.name),
        timeout=CROSSPLANE_DEADLINE,
    )
    wait_for(
        f"XRD {CONFIGURATION_XRD} Established",
        partial(source.xrd_established, CONFIGURATION_XRD),
        timeout=CROSSPLANE_DEADLINE,
    )
    install_widget_crd(source.kube)
    source.kube.namespace(APP)
    group, version, plural = NOTES
    source.kube.create(
        plural,
        {
            "apiVersion": f"{group}/{version}",
            "kind": "Note",
            "metadata": {"name": "hello", "namespace": APP},
            "spec": {"text": "kept"},
        },
        group,
        version,
    )
    group, version, plural = WIDGETS
    for widget_name, paused in (("active", False), ("held", True)):
        source.kube.create(plural, widget(widget_name, paused=paused), group, version)

    backup = backed_up_by_hand(platform, namespace, name, unique("by-hand"))

    # In the archive: the Configuration and the team's objects, with the Space's version;
    # not what Crossplane makes again.
    manifest, held = stored_archive(platform, backup, monkeypatch)
    instance = get(platform.kube, INSTANCE, namespace, name)
    assert manifest.source.crossplane == instance["status"]["atProvider"]["crossplaneVersion"]
    assert manifest.source.kubernetes.startswith("v1.")
    assert ("configurations.pkg.crossplane.io", CONFIGURATION.name) in held
    assert ("notes.fixture.acme.io", "hello") in held
    assert {("widgets.test.crossplane.io", n) for n in ("active", "held")} <= held
    assert not [item for item in held if item[0] in REINSTALLED_FOLDERS]
    assert ("compositeresourcedefinitions.apiextensions.crossplane.io", CONFIGURATION_XRD) not in (
        held
    ), "the Configuration's revision owns its XRD: it installs it again"

    # A new ControlPlane from the Backup, with Crossplane running in it.
    restored = "restored"
    create(
        platform.kube,
        XR,
        bare(namespace, restored, restore={"backupName": backup["metadata"]["name"]}),
    )
    target = platform.crossplane_in(
        crossplane_started_when_it_appears(platform, namespace, restored)
    )
    # What a provider package would install there.
    install_widget_crd(target.kube)
    wait_ready(platform, XR, namespace, restored, timeout=RESTORE_DEADLINE)

    instance = get(platform.kube, INSTANCE, namespace, restored)
    assert instance["status"]["atProvider"]["restore"]["phase"] == "Completed"
    wait_for(
        "the restored Configuration Installed and Healthy",
        partial(target.configuration_healthy, CONFIGURATION.name),
        timeout=CROSSPLANE_DEADLINE,
    )
    try:
        wait_for(
            f"XRD {CONFIGURATION_XRD} Established again",
            partial(target.xrd_established, CONFIGURATION_XRD),
            timeout=CROSSPLANE_DEADLINE,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}; {crossplane_state(target)}") from None
    group, version, plural = NOTES
    note = target.kube.get(plural, APP, "hello", group, version)
    assert note is not None
    assert note["spec"]["text"] == "kept"
    active = annotations_of(target.kube, WIDGETS, "active")
    assert active is not None, "the managed resource was restored"
    assert PAUSED not in active, "unpaused at the end of the restore"
    assert annotations_of(target.kube, WIDGETS, "held") == {PAUSED: "true"}, "paused in the backup"
