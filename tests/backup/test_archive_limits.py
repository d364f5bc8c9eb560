"""Archive limits and what a restore admits (issue 12, items 7, 9 and 10): pure, no servers."""

from __future__ import annotations

import asyncio
import gzip
import io
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from provider.backup.format import archive
from provider.backup.format.archive import ArchiveError, ArchiveWriter, Limits, ResourceType, verify
from provider.backup.restore.restorer import parsed_batches
from provider.backup.source.export import restorable
from tests.backup.test_archive import (
    CONFIGMAPS,
    METADATA_PATH,
    OBJECT_PATH,
    baseline,
    configmaps_metadata,
    files_with_export,
    packed,
)

NOW = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)


def configmap_text(body: str) -> bytes:
    head = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n"
    return (head + body).encode()


def with_object(data: bytes) -> bytes:
    return packed(files_with_export({METADATA_PATH: configmaps_metadata(), OBJECT_PATH: data}))


def with_export_alias() -> bytes:
    files = baseline()
    entries = files_with_export(files)
    info, export = entries[-1]
    export += b"extra: &e [1]\nmore: *e\n"
    info.size = len(export)
    return packed([*entries[:-1], (info, export)])


def with_trailing(extra: bytes) -> bytes:
    """A tar followed, inside the same gzip stream, by more bytes than its padding."""
    plain = packed(files_with_export(baseline()), mode="w")
    return gzip.compress(plain + extra)


@dataclass
class LimitCase:
    reason: str
    build: Callable[[], bytes]
    message: str
    limits: Limits = field(default_factory=Limits)


BOMB = '"' + "x" * 1000 + '"'
LIMIT_CASES = [
    LimitCase(
        "a scalar alias, the 2 KiB bomb that multiplies a string",
        lambda: with_object(
            configmap_text(f"data: {{a: &a {BOMB}, b: [{', '.join(['*a'] * 300)}]}}\n")
        ),
        "repeats a value (a YAML alias)",
    ),
    LimitCase(
        "a mapping alias",
        lambda: with_object(configmap_text("data: &d {a: b}\nbinaryData: *d\n")),
        "repeats a value (a YAML alias)",
    ),
    LimitCase(
        "a sequence alias",
        lambda: with_object(configmap_text("x: &l [1, 2]\ny: *l\n")),
        "repeats a value (a YAML alias)",
    ),
    LimitCase("an alias in export.yaml", with_export_alias, "export.yaml repeats a value"),
    LimitCase(
        "more YAML nodes in one file than the limit",
        lambda: with_object(
            configmap_text("data: {" + ", ".join(f"k{i}: v" for i in range(60)) + "}\n")
        ),
        "has more than 100 YAML nodes",
        Limits(max_nodes=100),
    ),
    LimitCase(
        "more files than the limit",
        lambda: packed(files_with_export(baseline())),
        "the archive has more than 2 files",
        Limits(max_members=2),
    ),
    LimitCase(
        "an object file above the per-member limit",
        lambda: with_object(configmap_text("data: {a: " + "y" * 500 + "}\n")),
        f"{OBJECT_PATH} is larger than the limit of 256 bytes",
        Limits(max_member_bytes=256),
    ),
    LimitCase(
        "export.yaml above its own limit",
        lambda: packed(files_with_export(baseline())),
        "export.yaml is larger than the limit of 64 bytes",
        Limits(max_export_bytes=64),
    ),
    LimitCase(
        "more uncompressed bytes than the limit, however well they compress",
        lambda: with_object(configmap_text("data: {a: " + "z" * 20_000 + "}\n")),
        "the archive unpacks to more than 16384 bytes",
        Limits(max_total_bytes=16_384),
    ),
    LimitCase(
        "bytes after the tar's end beyond one record of padding",
        lambda: with_trailing(b"\0" * (2 * tarfile.RECORDSIZE)),
        f"more than {tarfile.RECORDSIZE} bytes after its end",
    ),
    LimitCase(
        "a payload hidden after the tar's end",
        lambda: with_trailing(b"hidden" * 4000),
        "bytes after its end",
    ),
]


@pytest.mark.parametrize("case", LIMIT_CASES, ids=lambda c: c.reason)
def test_an_archive_beyond_a_limit_is_refused(case: LimitCase) -> None:
    data = case.build()
    with pytest.raises(ArchiveError) as refused:
        verify(io.BytesIO(data), limits=case.limits)
    assert case.message in str(refused.value)


def test_the_production_limits_take_the_writers_own_padding() -> None:
    """The writer pads the tar to one record; that is not trailing data."""
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    writer.add(CONFIGMAPS, {"metadata": {"name": "a", "namespace": "default"}})
    writer.finish(instance="x", exported_at=NOW, options={})
    assert verify(io.BytesIO(sink.getvalue())).objects == 1


def written(*objects: tuple[ResourceType, dict[str, Any]]) -> bytes:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    for rtype, obj in objects:
        writer.add(rtype, obj)
    writer.finish(instance="team-a/myctp", exported_at=NOW, options={})
    return sink.getvalue()


def meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"metadata": metadata, **extra}


CLUSTER_ROLE_BINDINGS = ResourceType(
    "clusterrolebindings", "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", False
)
PODS = ResourceType("pods", "", "v1", "Pod", namespaced=True)
DEPLOYMENTS = ResourceType("deployments", "apps", "v1", "Deployment", namespaced=True)
SECRETS = ResourceType("secrets", "", "v1", "Secret", namespaced=True)
FAKE_SECRETS = ResourceType("secrets", "", "v1", "ConfigMap", namespaced=True)
NAMESPACES = ResourceType("namespaces", "", "v1", "Namespace", namespaced=False)
BUCKETS = ResourceType("buckets", "s3.example.org", "v1", "Bucket", True, ("managed",))
PROVIDERS = ResourceType("providers", "pkg.crossplane.io", "v1", "Provider", False)


@dataclass
class AdmitCase:
    reason: str
    rtype: ResourceType
    obj: dict[str, Any]
    refusal: str  # empty: admitted


ADMIT_CASES = [
    AdmitCase(
        "a ClusterRoleBinding would grant a team cluster-admin in its control plane",
        CLUSTER_ROLE_BINDINGS,
        meta("escalate"),
        "group rbac.authorization.k8s.io is Kubernetes' own",
    ),
    AdmitCase("a Deployment is never exported", DEPLOYMENTS, meta("d", "default"), "group apps"),
    AdmitCase(
        "a Pod is a core kind export never writes",
        PODS,
        meta("p", "default"),
        "Pod of the core group",
    ),
    AdmitCase(
        "a folder of secrets holding another kind",
        FAKE_SECRETS,
        meta("s", "default"),
        "ConfigMap of the core group",
    ),
    AdmitCase(
        "a service-account token Secret is skipped by export",
        SECRETS,
        meta("t", "default", type="kubernetes.io/service-account-token"),
        "skipped Secret type",
    ),
    AdmitCase(
        "a Secret in kube-system is a system namespace's",
        SECRETS,
        meta("s", "kube-system"),
        "system namespace",
    ),
    AdmitCase(
        "the kube-system namespace itself", NAMESPACES, meta("kube-system"), "system namespace"
    ),
    AdmitCase(
        "kube-root-ca.crt is never exported",
        CONFIGMAPS,
        meta("kube-root-ca.crt", "default"),
        "skipped ConfigMap",
    ),
    AdmitCase("an ordinary Secret", SECRETS, meta("s", "default", type="Opaque"), ""),
    AdmitCase("a Crossplane package", PROVIDERS, meta("provider-aws"), ""),
    AdmitCase(
        "a provider's managed resource (its CRD's owner is checked in the control plane)",
        BUCKETS,
        meta("b", "default"),
        "",
    ),
]


@pytest.mark.parametrize("case", ADMIT_CASES, ids=lambda c: c.reason)
def test_a_restore_admits_only_what_export_writes(case: AdmitCase) -> None:
    data = written((case.rtype, case.obj))
    if not case.refusal:
        assert verify(io.BytesIO(data), admit=restorable).objects == 1
        return
    with pytest.raises(ArchiveError) as refused:
        verify(io.BytesIO(data), admit=restorable)
    assert case.refusal in str(refused.value)


def test_parsing_a_large_archive_leaves_the_event_loop_free() -> None:
    """A heartbeat on the loop keeps beating while 4,000 objects are parsed.

    Parsing them on the loop, as restore did, stops it for the whole parse; the
    same measurement of that shape is taken first, so the test shows the difference.
    """
    count = 4_000
    data = written(
        *((CONFIGMAPS, meta(f"c-{i}", "default", data={"k": "v" * 64})) for i in range(count))
    )
    manifest = verify(io.BytesIO(data))

    async def max_gap(work: Callable[[], Any]) -> tuple[float, int]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def heartbeat() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        beating = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.02)
        seen = await work()
        done.set()
        await beating
        return max(gaps), seen

    async def on_the_loop() -> int:
        return sum(1 for _ in archive.objects(io.BytesIO(data), manifest))

    async def off_the_loop() -> int:
        seen = 0
        async for batch in parsed_batches(io.BytesIO(data), manifest, {"configmaps"}):
            seen += len(batch)
        return seen

    blocked, seen_blocked = asyncio.run(max_gap(on_the_loop))
    free, seen_free = asyncio.run(max_gap(off_the_loop))

    assert seen_blocked == seen_free == count
    # Relative, not absolute: on a busy machine both gaps grow, but parsing on the
    # loop stops it for the whole parse while the worker thread lets it beat.
    assert free * 4 < blocked, (
        f"the loop stopped for {free:.3f}s while parsing off it, {blocked:.3f}s on it"
    )
