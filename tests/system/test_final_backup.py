"""Deleting a ControlPlane never loses its backups: a final Backup, a retained bucket, a restore.

The final Backup is taken while the Instance and the team's role still exist
(the Usages make the schedule go first), lands in the bucket, which outlives
the composite; a ControlPlane re-created with ``restore: {fromControlPlane}``
finds that Backup as its control plane's newest and comes back with what the
first one held. It is re-created under the same name: the final Backup is
read with the role it was written with, which only a composite of that name
composes again (under another name the archive is out of reach, as docs/team-guide.md
says). A bucket with ``retainOnDelete: false`` goes with its composite, once
it is empty: AWS (and the stand-in) refuses to delete a bucket that holds
objects.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from provider.backup.storage.s3 import StorageSpec, Store
from sandbox.awsstandin.cloud import Cloud, Endpoints
from sandbox.platform import Platform
from sandbox.s3 import use_credentials
from sandbox.spaces import condition, wait_for

from .helpers import (
    APP_NAMESPACE,
    INSTANCE,
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    GoneTimes,
    ResponsiveThroughout,
    app_files,
    bare,
    configmap_value,
    controlplane,
    create,
    get,
    hosted_name,
    is_true,
    unique,
    wait_ready,
)

BACKUP = ("controlplane.spaces.upbound.io", "v1alpha1", "backups")
ROLE = ("iam.aws.m.upbound.io", "v1beta1", "roles")
BUCKET = ("s3.aws.m.upbound.io", "v1beta1", "buckets")
FINAL_OF = "controlplane.spaces.upbound.io/final-backup-of"
# Everything the composite composes into its namespace, by (group, version, plural).
COMPOSED = (
    INSTANCE,
    ("controlplane.spaces.upbound.io", "v1alpha1", "backupschedules"),
    ("protection.crossplane.io", "v1beta1", "usages"),
    *(
        ("s3.aws.m.upbound.io", "v1beta1", plural)
        for plural in (
            "buckets",
            "bucketversionings",
            "bucketserversideencryptionconfigurations",
            "bucketpublicaccessblocks",
            "bucketlifecycleconfigurations",
        )
    ),
    *(
        ("iam.aws.m.upbound.io", "v1beta1", p)
        for p in ("roles", "policies", "rolepolicyattachments")
    ),
)
# A schedule that does not fire during the test: the only archive is the final one.
NEVER = "0 0 1 1 *"


def final_backups(platform: Platform, namespace: str, schedule: str) -> list[dict[str, Any]]:
    group, version, plural = BACKUP
    return [
        b
        for b in platform.kube.list_of(plural, namespace, group, version)
        if (b["metadata"].get("labels") or {}).get(FINAL_OF) == schedule
    ]


@pytest.fixture
def s3(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    """The S3 store as its administrator sees it (not the team's role, which is gone)."""
    seaweed = platform.aws.seaweed
    use_credentials(monkeypatch, seaweed.access_key, seaweed.secret_key)
    yield Cloud(Endpoints(s3=seaweed.endpoint, iam=platform.aws.moto.endpoint, region="us-east-1"))


def nothing_composed_left(platform: Platform, namespace: str) -> bool:
    return not any(
        platform.kube.list_of(plural, namespace, group, version)
        for group, version, plural in COMPOSED
    )


def completed_final_backup(platform: Platform, namespace: str, schedule: str) -> dict[str, Any]:
    """The schedule's one final Backup, once it is Completed."""

    def probe() -> dict[str, Any] | None:
        found = final_backups(platform, namespace, schedule)
        assert len(found) <= 1, [b["metadata"]["name"] for b in found]
        return found[0] if found and is_true(found[0], "Completed") else None

    return wait_for("the final Backup Completed", probe, timeout=UP_DEADLINE)


# How long a re-created composite may go without any status before it is nudged.
NUDGE_AFTER = 20.0


def ready_nudged(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    """The re-created composite once Ready, nudged while Crossplane ignores it.

    Crossplane keeps an XR's circuit-breaker state by namespace and name, so a
    composite re-created under the name of one whose breaker was open while it was
    deleted has its creation event dropped and is not reconciled until something
    else changes it (crossplane/crossplane#7200, fixed upstream by #7201). Deleting
    a composite with many composed objects opens the breaker here. An annotation,
    as a person would add, is such a change; it does nothing else.
    """
    group, version, plural = XR
    started = time.monotonic()
    nudges = 0

    def ready() -> dict[str, Any] | None:
        nonlocal nudges
        found = get(platform.kube, XR, namespace, name)
        if is_true(found, "Ready"):
            return dict(found)
        waited = time.monotonic() - started
        if found is not None and not found.get("status") and waited > NUDGE_AFTER * (nudges + 1):
            nudges += 1
            annotations = {"platform.acme.io/nudged": str(nudges)}
            platform.kube.patch(
                plural, namespace, name, {"metadata": {"annotations": annotations}}, group, version
            )
        return None

    return wait_for(f"{plural} {namespace}/{name} Ready", ready, timeout=UP_DEADLINE)


def delete(platform: Platform, kind: tuple[str, str, str], namespace: str, name: str) -> None:
    group, version, plural = kind
    platform.kube.delete(plural, namespace, name, group, version)


def test_a_deleted_controlplane_leaves_a_final_backup_in_its_kept_bucket_and_comes_back_from_it(
    platform: Platform, s3: Cloud
) -> None:
    namespace, name = unique("final"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    # Creating it wakes the composite with a burst of watch events (every composed
    # object's own writes), which core's circuit breaker must hold at the settings
    # the install guide ships: the composite answers every change while it lives.
    with ResponsiveThroughout(platform, XR, namespace, name) as responsive:
        create(
            platform.kube,
            XR,
            controlplane(namespace, name, repository.url, backup={"schedule": NEVER}),
        )
        composite = wait_ready(platform, XR, namespace, name)
        hosted = hosted_name(platform, namespace, name)
        wait_for(
            "Flux synced the team's settings",
            lambda: configmap_value(platform, hosted, "settings", APP_NAMESPACE) == "first",
            timeout=SYNC_DEADLINE,
        )
    responsive.assert_responsive()
    bucket = composite["status"]["backup"]["bucket"]

    watched = {"instance": (INSTANCE, name), "role": (ROLE, f"{name}-backup")}
    with GoneTimes(platform, namespace, watched) as watcher:
        delete(platform, XR, namespace, name)
        wait_for(
            "the composite, its Instance and its role gone",
            lambda: (
                get(platform.kube, XR, namespace, name) is None
                and len(watcher.gone) == len(watched)
            ),
            timeout=UP_DEADLINE,
        )

    # The final Backup: Completed, not owned, and finished before the Instance and the
    # role it needed went (the Usages held them for the schedule).
    final = completed_final_backup(platform, namespace, name)
    assert "ownerReferences" not in final["metadata"]
    completed_at = datetime.fromisoformat(final["status"]["completedAt"].replace("Z", "+00:00"))
    for what, at in watcher.gone.items():
        assert completed_at.timestamp() <= at, f"the final Backup completed after the {what} went"

    # The bucket was kept, hardened and expiring, with the archive in it.
    wait_for(
        "nothing the composite composed left",
        lambda: nothing_composed_left(platform, namespace),
        timeout=UP_DEADLINE,
    )
    assert s3.bucket_exists(bucket)
    assert s3.versioning(bucket) == "Enabled"
    assert s3.lifecycle(bucket), "the lifecycle rule was removed"
    key = final["status"]["location"]["key"]
    store = Store.connect(StorageSpec(bucket=bucket, endpoint=platform.aws.seaweed.endpoint))
    assert store.exists(key)

    # The team re-creates its ControlPlane from its newest Backup, without naming it
    # (no git source: what comes back comes from the archive). The final Backup is
    # the newest, and the composite says it chose it.
    create(
        platform.kube,
        XR,
        bare(namespace, name, backup={"schedule": NEVER}, restore={"fromControlPlane": name}),
    )
    recreated = ready_nudged(platform, namespace, name)
    assert recreated["status"]["restore"] == {"backupName": final["metadata"]["name"]}
    restored = hosted_name(platform, namespace, name)
    assert configmap_value(platform, restored, "settings", APP_NAMESPACE) == "first"
    instance = get(platform.kube, INSTANCE, namespace, name)
    restoring = instance["spec"]["forProvider"]["initialRestorationFrom"]
    assert restoring == {"backupRef": {"name": final["metadata"]["name"]}}
    assert instance["status"]["atProvider"]["restore"]["phase"] == "Completed"


def test_a_bucket_not_retained_is_deleted_once_empty_as_aws_deletes_buckets(
    platform: Platform, s3: Cloud
) -> None:
    namespace, name = unique("unkept"), "ctp"
    platform.kube.namespace(namespace)
    create(
        platform.kube,
        XR,
        bare(namespace, name, backup={"schedule": NEVER, "bucket": {"retainOnDelete": False}}),
    )
    composite = wait_ready(platform, XR, namespace, name)
    bucket = composite["status"]["backup"]["bucket"]
    assert s3.bucket_exists(bucket)

    delete(platform, XR, namespace, name)
    wait_for(
        "the composite gone",
        lambda: get(platform.kube, XR, namespace, name) is None,
        timeout=UP_DEADLINE,
    )
    # The final Backup was written into the bucket (the schedule held it with a Usage),
    # so the bucket is not empty: its deletion is refused, and says why.
    completed_final_backup(platform, namespace, name)

    def refused() -> dict[str, Any] | None:
        found = get(platform.kube, BUCKET, namespace, f"{name}-backups")
        synced = condition(found, "Synced")
        return found if "BucketNotEmpty" in str(synced.get("message", "")) else None

    wait_for("the bucket's deletion refused while it holds the archive", refused, UP_DEADLINE)
    assert s3.bucket_exists(bucket)

    # The team lets its backups go: forceDestroy empties the bucket, as provider-aws does.
    group, version, plural = BUCKET
    platform.kube.patch(
        plural,
        namespace,
        f"{name}-backups",
        {"spec": {"forProvider": {"forceDestroy": True}}},
        group,
        version,
    )
    wait_for(
        "the Bucket managed resource gone",
        lambda: get(platform.kube, BUCKET, namespace, f"{name}-backups") is None,
        timeout=UP_DEADLINE,
    )
    assert not s3.bucket_exists(bucket)
