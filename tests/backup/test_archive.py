"""The backup archive, against the platform API contract's section 4.

Hostile archives are crafted with tarfile directly, not with the writer, so
that each breaks exactly one rule; every file they hold carries ``CANARY``,
which no error message may quote.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import random
import re
import sqlite3
import tarfile
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import yaml

from provider.backup.format.archive import (
    EXPORT_FILE,
    FORMAT_VERSION,
    MAX_EXTENDED_HEADER_BYTES,
    ArchiveError,
    ArchiveWriter,
    Limits,
    Manifest,
    ResourceType,
    member_path,
    objects,
    restore_phase,
    strip,
    verify,
)
from provider.backup.restore.restorer import parsed_batches

KiB = 2**10
MiB = 2**20
CANARY = "canary-7d3f0c"
EXPORTED_AT = datetime(2026, 12, 2, 7, 0, tzinfo=timezone(timedelta(hours=1)))

NAMESPACES = ResourceType("namespaces", "", "v1", "Namespace", namespaced=False)
CONFIGMAPS = ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
SECRETS = ResourceType("secrets", "", "v1", "Secret", namespaced=True)
PROVIDERS = ResourceType(
    "providers",
    "pkg.crossplane.io",
    "v1",
    "Provider",
    namespaced=False,
    categories=("crossplane", "pkg"),
    with_status_subresource=True,
)
XRDS = ResourceType(
    "compositeresourcedefinitions",
    "apiextensions.crossplane.io",
    "v2",
    "CompositeResourceDefinition",
    namespaced=False,
    categories=("crossplane",),
    with_status_subresource=True,
)
INSTANCES = ResourceType(
    "instances",
    "controlplane.spaces.upbound.io",
    "v1alpha1",
    "Instance",
    namespaced=True,
    categories=("crossplane", "managed"),
    with_status_subresource=True,
)
CLUSTER_CONFIGS = ResourceType(
    "clusterproviderconfigs",
    "controlplane.spaces.upbound.io",
    "v1alpha1",
    "ClusterProviderConfig",
    namespaced=False,
)

SERVER_MANAGED: dict[str, Any] = {
    "uid": "0b6f7c1e-4d7a-4f0e-9a51-2f6a1c3d9e10",
    "resourceVersion": "48213",
    "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
    "creationTimestamp": "2026-11-30T10:00:00Z",
    "generation": 4,
    "selfLink": "/api/v1/namespaces/team-a/configmaps/x",
    "deletionTimestamp": "2026-12-01T10:00:00Z",
    "deletionGracePeriodSeconds": 30,
}

# Strings YAML would read as something else unless the writer quotes them.
AWKWARD_STRINGS = [
    "yes",
    "off",
    "null",
    "~",
    "1.0",
    "0x1F",
    "012",
    "2026-12-02T06:00:00Z",
    "",
    " padded ",
    "multi\nline\n",
    "tab\there",
    "ü ✓ 🚀",
    "# not a comment",
    "- not a list",
    "key: value",
    "'single'",
    '"double"',
    "back\\slash",
    "x" * 300,
]


def live(
    rtype: ResourceType, name: str, namespace: str | None = None, **body: Any
) -> dict[str, Any]:
    """An object as the API server returns it, server-managed metadata and all."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"team": "a"},
        "annotations": {"note": "kept"},
        **SERVER_MANAGED,
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": metadata, **body}


def sample() -> list[tuple[ResourceType, dict[str, Any]]]:
    """A few hundred objects of core, namespaced custom and cluster custom types, interleaved."""
    namespaces = [f"team-{index}" for index in range(4)]
    batches: list[list[tuple[ResourceType, dict[str, Any]]]] = [
        [(NAMESPACES, live(NAMESPACES, namespace)) for namespace in namespaces],
        [
            (
                CONFIGMAPS,
                live(
                    CONFIGMAPS,
                    f"settings-{index}",
                    namespaces[index % 4],
                    data={f"key{n}": value for n, value in enumerate(AWKWARD_STRINGS)},
                ),
            )
            for index in range(90)
        ],
        [
            (
                SECRETS,
                live(SECRETS, f"creds.v{index}", namespaces[index % 4], data={"k": "c2VjcmV0"}),
            )
            for index in range(40)
        ],
        [
            (PROVIDERS, live(PROVIDERS, f"provider-{index}", spec={"package": "xpkg/p:v1"}))
            for index in range(3)
        ],
        [(XRDS, live(XRDS, "xcontrolplanes.acme.io", spec={"group": "acme.io"}))],
        [
            (
                INSTANCES,
                live(
                    INSTANCES,
                    f"ctp-{index}",
                    namespaces[index % 4],
                    spec={
                        "forProvider": {"crossplane": {"version": None}, "replicas": index},
                        "ratio": 1.5,
                        "big": 10**20,
                        "paused": index % 2 == 0,
                        "empty": {},
                        "none": [],
                    },
                    status={"conditions": [{"type": "Ready", "status": "True"}]},
                ),
            )
            for index in range(150)
        ],
        [(CLUSTER_CONFIGS, live(CLUSTER_CONFIGS, f"cfg-{index}", spec={})) for index in range(20)],
    ]
    # Round robin across types: the writer must not need objects grouped by type.
    interleaved: list[tuple[ResourceType, dict[str, Any]]] = []
    while any(batches):
        for batch in batches:
            if batch:
                interleaved.append(batch.pop(0))
    return interleaved


def write(
    added: list[tuple[ResourceType, dict[str, Any]]],
    *,
    options: dict[str, Any] | None = None,
) -> bytes:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    for rtype, obj in added:
        writer.add(rtype, obj)
    writer.finish(instance="myctp", exported_at=EXPORTED_AT, options=options or {})
    return sink.getvalue()


def members(archive: bytes) -> dict[str, bytes]:
    """Every member's bytes by path, in archive order, read without the code under test."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {
            member.name: tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
        }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def listed(manifest: Manifest) -> dict[str, str]:
    """A manifest's files as a map of path to hex sha256, in archive order."""
    return {path: digest.hex() for path, digest in manifest.files}


@pytest.fixture(scope="module")
def round_trip() -> tuple[list[tuple[ResourceType, dict[str, Any]]], bytes]:
    added = sample()
    return added, write(added, options={"excludedResources": ["events"]})


def test_a_round_trip_gives_back_every_object_stripped(
    round_trip: tuple[list[tuple[ResourceType, dict[str, Any]]], bytes],
) -> None:
    added, archive = round_trip

    manifest = verify(io.BytesIO(archive))
    read = list(objects(io.BytesIO(archive), manifest))

    assert len(added) > 300
    assert read == [(rtype, strip(obj)) for rtype, obj in added]


def test_verify_describes_the_archive_in_its_manifest(
    round_trip: tuple[list[tuple[ResourceType, dict[str, Any]]], bytes],
) -> None:
    added, archive = round_trip

    manifest = verify(io.BytesIO(archive))

    assert manifest.instance == "myctp"
    assert manifest.exported_at == EXPORTED_AT
    assert manifest.exported_at.tzinfo == UTC
    assert manifest.objects == len(added)
    assert manifest.types == {rtype.folder: rtype for rtype, _ in added}
    expected_files = {path: sha256(data) for path, data in members(archive).items()}
    del expected_files[EXPORT_FILE]
    assert listed(manifest) == expected_files
    assert manifest.counts == {
        rtype.folder: sum(1 for other, _ in added if other == rtype) for rtype, _ in added
    }


def test_the_summary_describes_the_bytes_written() -> None:
    added = sample()
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    for rtype, obj in added:
        writer.add(rtype, obj)

    summary = writer.finish(instance="myctp", exported_at=EXPORTED_AT, options={})

    assert summary.sha256 == sha256(sink.getvalue())
    assert summary.size == len(sink.getvalue())
    assert summary.objects == len(added)


def test_the_archive_is_laid_out_as_the_contract_says() -> None:
    added = [
        (INSTANCES, live(INSTANCES, "ctp", "team-a")),
        (NAMESPACES, live(NAMESPACES, "team-a")),
        (INSTANCES, live(INSTANCES, "ctp", "team-b")),
        (PROVIDERS, live(PROVIDERS, "provider-aws")),
        (CONFIGMAPS, live(CONFIGMAPS, "settings", "team-a")),
    ]

    paths = list(members(write(added)))

    assert paths == [
        "instances.controlplane.spaces.upbound.io/metadata.yaml",
        "instances.controlplane.spaces.upbound.io/namespaces/team-a/ctp.yaml",
        "namespaces/metadata.yaml",
        "namespaces/cluster/team-a.yaml",
        "instances.controlplane.spaces.upbound.io/namespaces/team-b/ctp.yaml",
        "providers.pkg.crossplane.io/metadata.yaml",
        "providers.pkg.crossplane.io/cluster/provider-aws.yaml",
        "configmaps/metadata.yaml",
        "configmaps/namespaces/team-a/settings.yaml",
        "export.yaml",
    ]


def test_export_yaml_comes_last_and_lists_every_other_file(
    round_trip: tuple[list[tuple[ResourceType, dict[str, Any]]], bytes],
) -> None:
    added, archive = round_trip
    files = members(archive)

    assert list(files)[-1] == EXPORT_FILE
    export = yaml.safe_load(files.pop(EXPORT_FILE))
    counts: dict[str, int] = {}
    for rtype, _ in added:
        counts[rtype.folder] = counts.get(rtype.folder, 0) + 1
    assert export == {
        "version": FORMAT_VERSION,
        "exportedAt": "2026-12-02T06:00:00Z",
        "instance": "myctp",
        "options": {"excludedResources": ["events"]},
        "stats": {"objects": len(added), "types": counts},
        "files": {path: sha256(data) for path, data in files.items()},
    }


def test_metadata_yaml_describes_its_type_so_a_reader_can_rebuild_it() -> None:
    files = members(write([(INSTANCES, live(INSTANCES, "ctp", "team-a"))]))

    metadata = yaml.safe_load(files["instances.controlplane.spaces.upbound.io/metadata.yaml"])

    assert metadata == {
        "categories": ["crossplane", "managed"],
        "withStatusSubresource": True,
        "resource": "instances",
        "group": "controlplane.spaces.upbound.io",
        "version": "v1alpha1",
        "kind": "Instance",
        "namespaced": True,
    }


def test_an_archive_of_no_objects_verifies() -> None:
    archive = write([])

    manifest = verify(io.BytesIO(archive))

    assert (manifest.instance, manifest.exported_at) == ("myctp", EXPORTED_AT)
    assert (manifest.types, manifest.counts, manifest.objects) == ({}, {}, 0)
    assert listed(manifest) == {}
    assert list(objects(io.BytesIO(archive), manifest)) == []


def test_an_object_without_apiversion_and_kind_takes_them_from_its_type() -> None:
    # Items of a list response come without them.
    item = {"metadata": {"name": "settings", "namespace": "team-a"}, "data": {"a": "b"}}
    archive = write([(CONFIGMAPS, item)])

    [(_, read)] = list(objects(io.BytesIO(archive), verify(io.BytesIO(archive))))

    assert read == {"apiVersion": "v1", "kind": "ConfigMap", **item}


def test_a_value_shared_within_an_object_is_written_in_full_not_as_an_alias() -> None:
    labels = {"team": "a"}
    obj = live(CONFIGMAPS, "settings", "team-a", data=labels)
    obj["metadata"]["labels"] = labels
    archive = write([(CONFIGMAPS, obj)])

    [(_, read)] = list(objects(io.BytesIO(archive), verify(io.BytesIO(archive))))

    assert read == strip(obj)


@dataclass
class StripCase:
    reason: str
    metadata: dict[str, Any]
    kept: dict[str, Any]


STRIP_CASES = [
    *(
        StripCase(f"{key} is stripped", {"name": "x", key: value}, {"name": "x"})
        for key, value in SERVER_MANAGED.items()
    ),
    StripCase(
        "all server-managed metadata is stripped together",
        {"name": "x", "namespace": "team-a", **SERVER_MANAGED},
        {"name": "x", "namespace": "team-a"},
    ),
    StripCase(
        "what a user set is kept",
        {
            "name": "x",
            "namespace": "team-a",
            "labels": {"a": "b"},
            "annotations": {"crossplane.io/paused": "true"},
            "finalizers": ["f"],
            "ownerReferences": [{"kind": "Instance", "name": "ctp"}],
        },
        {
            "name": "x",
            "namespace": "team-a",
            "labels": {"a": "b"},
            "annotations": {"crossplane.io/paused": "true"},
            "finalizers": ["f"],
            "ownerReferences": [{"kind": "Instance", "name": "ctp"}],
        },
    ),
]


@pytest.mark.parametrize("case", STRIP_CASES, ids=lambda c: c.reason)
def test_strip_removes_server_managed_metadata_only(case: StripCase) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": case.metadata, "status": {"a": 1}}

    stripped = strip(obj)

    assert stripped == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": case.kept,
        "status": {"a": 1},
    }


def test_strip_leaves_the_original_untouched_and_shares_nothing_with_it() -> None:
    obj = live(CONFIGMAPS, "settings", "team-a", data={"a": ["b"]})
    before = repr(obj)

    stripped = strip(obj)
    stripped["data"]["a"].append("c")
    stripped["metadata"]["labels"]["new"] = "x"

    assert repr(obj) == before


@dataclass
class PathCase:
    reason: str
    rtype: ResourceType
    metadata: dict[str, Any]
    path: str


PATH_CASES = [
    PathCase(
        "a cluster-scoped core object sits under its resource's cluster folder",
        NAMESPACES,
        {"name": "team-a"},
        "namespaces/cluster/team-a.yaml",
    ),
    PathCase(
        "a namespaced core object sits under its namespace",
        CONFIGMAPS,
        {"name": "settings", "namespace": "team-a"},
        "configmaps/namespaces/team-a/settings.yaml",
    ),
    PathCase(
        "a namespaced custom object's folder carries its group",
        INSTANCES,
        {"name": "ctp", "namespace": "team-a"},
        "instances.controlplane.spaces.upbound.io/namespaces/team-a/ctp.yaml",
    ),
    PathCase(
        "a cluster-scoped custom object's folder carries its group",
        PROVIDERS,
        {"name": "provider-aws"},
        "providers.pkg.crossplane.io/cluster/provider-aws.yaml",
    ),
    PathCase(
        "a name with dots is a valid name",
        XRDS,
        {"name": "xcontrolplanes.acme.io"},
        "compositeresourcedefinitions.apiextensions.crossplane.io/cluster/xcontrolplanes.acme.io.yaml",
    ),
    PathCase(
        "a name of 253 characters is a valid name",
        NAMESPACES,
        {"name": ("a" * 63 + ".") * 3 + "a" * 61},
        f"namespaces/cluster/{('a' * 63 + '.') * 3 + 'a' * 61}.yaml",
    ),
    PathCase(
        "an empty namespace on a cluster-scoped object is no namespace",
        NAMESPACES,
        {"name": "team-a", "namespace": ""},
        "namespaces/cluster/team-a.yaml",
    ),
]


@pytest.mark.parametrize("case", PATH_CASES, ids=lambda c: c.reason)
def test_member_path_places_an_object_as_the_layout_says(case: PathCase) -> None:
    assert member_path(case.rtype, {"metadata": case.metadata}) == case.path


@dataclass
class HostileNameCase:
    reason: str
    rtype: ResourceType
    obj: dict[str, Any]
    message: str


def named(name: object, namespace: object = "team-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}}


HOSTILE_NAME_CASES = [
    HostileNameCase("a name climbing out is refused", CONFIGMAPS, named("../x"), "object name"),
    HostileNameCase("a name with a slash is refused", CONFIGMAPS, named("a/b"), "object name"),
    HostileNameCase("a name of two dots is refused", CONFIGMAPS, named(".."), "object name"),
    HostileNameCase("a name of one dot is refused", CONFIGMAPS, named("."), "object name"),
    HostileNameCase("an empty name is refused", CONFIGMAPS, named(""), "object name"),
    HostileNameCase("a missing name is refused", CONFIGMAPS, named(None), "object name"),
    HostileNameCase("a name that is not a string is refused", CONFIGMAPS, named(7), "object name"),
    HostileNameCase("an upper-case name is refused", CONFIGMAPS, named("Settings"), "object name"),
    HostileNameCase(
        "a name starting with a dash is refused", CONFIGMAPS, named("-x"), "object name"
    ),
    HostileNameCase("a name with a backslash is refused", CONFIGMAPS, named("a\\b"), "object name"),
    HostileNameCase("a name with a NUL is refused", CONFIGMAPS, named("a\x00b"), "object name"),
    HostileNameCase(
        "a name with an empty label is refused", CONFIGMAPS, named("a..b"), "object name"
    ),
    HostileNameCase(
        "a name of 254 characters is refused", CONFIGMAPS, named("a" * 254), "object name"
    ),
    HostileNameCase(
        "a namespace climbing out is refused", CONFIGMAPS, named("x", "../etc"), "namespace name"
    ),
    HostileNameCase(
        "a namespace with a slash is refused", CONFIGMAPS, named("x", "a/b"), "namespace name"
    ),
    HostileNameCase(
        "a namespace with a dot is refused", CONFIGMAPS, named("x", "a.b"), "namespace name"
    ),
    HostileNameCase(
        "a namespace of 64 characters is refused",
        CONFIGMAPS,
        named("x", "a" * 64),
        "namespace name",
    ),
    HostileNameCase(
        "a namespaced object without a namespace is refused",
        CONFIGMAPS,
        {"metadata": {"name": "x"}},
        "namespace name",
    ),
    HostileNameCase(
        "a cluster-scoped object with a namespace is refused",
        NAMESPACES,
        named("x", "team-a"),
        "has a namespace",
    ),
    HostileNameCase("an object without metadata is refused", CONFIGMAPS, {}, "no metadata"),
    HostileNameCase(
        "a resource climbing out is refused",
        ResourceType("..", "", "v1", "X", namespaced=True),
        named("x"),
        "resource name",
    ),
    HostileNameCase(
        "a group with a slash is refused",
        ResourceType("things", "a/b", "v1", "Thing", namespaced=True),
        named("x"),
        "API group",
    ),
]


@pytest.mark.parametrize("case", HOSTILE_NAME_CASES, ids=lambda c: c.reason)
def test_member_path_refuses_a_name_that_is_not_a_kubernetes_name(case: HostileNameCase) -> None:
    with pytest.raises(ArchiveError, match=case.message):
        member_path(case.rtype, case.obj)


@dataclass
class PhaseCase:
    reason: str
    rtype: ResourceType
    phase: int


def rtype(resource: str, group: str, namespaced: bool = False) -> ResourceType:
    return ResourceType(resource, group, "v1", resource.title(), namespaced)


PHASE_CASES = [
    PhaseCase("namespaces come first", NAMESPACES, 0),
    PhaseCase("configmaps come after namespaces", CONFIGMAPS, 1),
    PhaseCase("secrets come after configmaps", SECRETS, 2),
    PhaseCase("providers are packages", PROVIDERS, 3),
    PhaseCase("configurations are packages", rtype("configurations", "pkg.crossplane.io"), 3),
    PhaseCase(
        "deployment runtime configs go with packages",
        rtype("deploymentruntimeconfigs", "pkg.crossplane.io"),
        3,
    ),
    PhaseCase("XRDs come after packages", XRDS, 4),
    PhaseCase("compositions go with XRDs", rtype("compositions", "apiextensions.crossplane.io"), 4),
    PhaseCase(
        "environment configs go with XRDs",
        rtype("environmentconfigs", "apiextensions.crossplane.io"),
        4,
    ),
    PhaseCase("managed resources come last", INSTANCES, 5),
    PhaseCase("claims come last", rtype("postgres", "acme.io", namespaced=True), 5),
    PhaseCase("composites come last", rtype("xpostgres", "acme.io"), 5),
    PhaseCase("a core type without a phase of its own comes last", rtype("services", ""), 5),
    PhaseCase(
        "a namespaces resource outside the core group comes last", rtype("namespaces", "acme.io"), 5
    ),
    PhaseCase(
        "a group merely ending like Crossplane's comes last",
        rtype("compositions", "evil.apiextensions.crossplane.io"),
        5,
    ),
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=lambda c: c.reason)
def test_restore_phase_follows_the_contracts_order(case: PhaseCase) -> None:
    assert restore_phase(case.rtype) == case.phase


@dataclass
class RefusedAddCase:
    reason: str
    rtype: ResourceType
    obj: dict[str, Any]
    message: str


SETTINGS = live(CONFIGMAPS, "settings", "team-a", data={"a": "b"})

REFUSED_ADD_CASES = [
    RefusedAddCase(
        "an object added twice is refused", CONFIGMAPS, SETTINGS, "already in the archive"
    ),
    RefusedAddCase(
        "a second type for one folder is refused",
        ResourceType("configmaps", "", "v2", "ConfigMap", namespaced=True),
        live(ResourceType("configmaps", "", "v2", "ConfigMap", True), "other", "team-a"),
        "two different types",
    ),
    RefusedAddCase(
        "an apiVersion other than its type's is refused",
        CONFIGMAPS,
        {**live(CONFIGMAPS, "other", "team-a"), "apiVersion": "v2"},
        "apiVersion is not its type's",
    ),
    RefusedAddCase(
        "a kind other than its type's is refused",
        CONFIGMAPS,
        {**live(CONFIGMAPS, "other", "team-a"), "kind": "Secret"},
        "kind is not its type's",
    ),
    RefusedAddCase(
        "a value JSON cannot carry is refused",
        CONFIGMAPS,
        live(CONFIGMAPS, "other", "team-a", data={"when": EXPORTED_AT}),
        "holds a datetime",
    ),
    RefusedAddCase(
        "a key that is not a string is refused",
        CONFIGMAPS,
        live(CONFIGMAPS, "other", "team-a", data={1: "b"}),
        "key that is not a string",
    ),
    RefusedAddCase(
        "an object without a valid name is refused",
        CONFIGMAPS,
        live(CONFIGMAPS, "../other", "team-a"),
        "not a valid object name",
    ),
]


@pytest.mark.parametrize("case", REFUSED_ADD_CASES, ids=lambda c: c.reason)
def test_the_writer_refuses_an_object_and_writes_nothing_of_it(case: RefusedAddCase) -> None:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    writer.add(CONFIGMAPS, SETTINGS)

    with pytest.raises(ArchiveError, match=case.message):
        writer.add(case.rtype, case.obj)

    writer.finish(instance="myctp", exported_at=EXPORTED_AT, options={})
    manifest = verify(io.BytesIO(sink.getvalue()))
    assert list(objects(io.BytesIO(sink.getvalue()), manifest)) == [(CONFIGMAPS, strip(SETTINGS))]


def test_the_writer_refuses_an_export_time_without_a_time_zone() -> None:
    writer = ArchiveWriter(io.BytesIO())

    with pytest.raises(ArchiveError, match="time zone"):
        writer.finish(instance="myctp", exported_at=datetime(2026, 12, 2), options={})


def test_the_writer_refuses_options_json_cannot_carry() -> None:
    writer = ArchiveWriter(io.BytesIO())

    with pytest.raises(ArchiveError, match="holds a set"):
        writer.finish(instance="myctp", exported_at=EXPORTED_AT, options={"excluded": {"a"}})


# Crafting archives by hand, one broken rule at a time.

OBJECT_PATH = "configmaps/namespaces/default/settings.yaml"
METADATA_PATH = "configmaps/metadata.yaml"
Member = tuple[tarfile.TarInfo, bytes]


def configmap(name: str = "settings", namespace: str = "default", kind: str = "ConfigMap") -> bytes:
    document = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "data": {"token": CANARY},
    }
    return yaml.safe_dump(document, sort_keys=False).encode()


def configmaps_metadata(resource: str = "configmaps") -> bytes:
    document = {
        "categories": [],
        "withStatusSubresource": False,
        "resource": resource,
        "group": "",
        "version": "v1",
        "kind": "ConfigMap",
        "namespaced": True,
        "note": CANARY,
    }
    return yaml.safe_dump(document, sort_keys=False).encode()


def baseline() -> dict[str, bytes]:
    return {METADATA_PATH: configmaps_metadata(), OBJECT_PATH: configmap()}


def export(files: dict[str, bytes], /, **changes: Any) -> bytes:
    """An export.yaml that lists ``files`` truly, but for ``changes``."""
    counts: dict[str, int] = {}
    for path in files:
        if not path.endswith("/metadata.yaml"):
            folder = path.split("/")[0]
            counts[folder] = counts.get(folder, 0) + 1
    document = {
        "version": FORMAT_VERSION,
        "exportedAt": "2026-12-02T06:00:00Z",
        "instance": CANARY,
        "options": {"note": CANARY},
        "stats": {"objects": sum(counts.values()), "types": counts},
        "files": {path: sha256(data) for path, data in files.items()},
        **changes,
    }
    return yaml.safe_dump(document, sort_keys=False).encode()


def regular(path: str, data: bytes) -> Member:
    info = tarfile.TarInfo(path)
    info.size = len(data)
    return info, data


def special(path: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.linkname = linkname
    return info, b""


def files_with_export(files: dict[str, bytes], /, **changes: Any) -> list[Member]:
    return [
        *(regular(path, data) for path, data in files.items()),
        regular(EXPORT_FILE, export(files, **changes)),
    ]


def packed(entries: list[Member], *, mode: str = "w:gz") -> bytes:
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode=mode) as tar:  # type: ignore[call-overload]
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return sink.getvalue()


def good() -> bytes:
    return packed(files_with_export(baseline()))


def with_extra(*extra: Member) -> Callable[[], bytes]:
    """The baseline, with members slipped in before export.yaml."""

    def build() -> bytes:
        entries = files_with_export(baseline())
        return packed([*entries[:-1], *extra, entries[-1]])

    return build


def changed_export(**changes: Any) -> Callable[[], bytes]:
    return lambda: packed(files_with_export(baseline(), **changes))


class Zeros:
    """A readable stream of zero bytes, so a huge member need not be held."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, size: int = -1) -> bytes:
        taken = self.left if size < 0 else min(size, self.left)
        self.left -= taken
        return bytes(taken)


def oversized_member() -> bytes:
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("configmaps/namespaces/default/big.yaml")
        info.size = Limits().max_member_bytes + 1
        tar.addfile(info, Zeros(info.size))
    return sink.getvalue()


def oversized_extended_header() -> bytes:
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(METADATA_PATH)
        info.pax_headers = {"comment": CANARY * (MAX_EXTENDED_HEADER_BYTES // len(CANARY) + 1)}
        tar.addfile(info, io.BytesIO(b""))
    return sink.getvalue()


def corrupted_in_place() -> bytes:
    files = baseline()
    listed = export(files)
    files[OBJECT_PATH] = configmap().replace(CANARY.encode(), b"tampered-0000")
    return packed(
        [*(regular(path, data) for path, data in files.items()), regular(EXPORT_FILE, listed)]
    )


def unlisted_file() -> bytes:
    files = baseline()
    listed = export(files)
    files["configmaps/namespaces/default/extra.yaml"] = configmap("extra")
    return packed(
        [*(regular(path, data) for path, data in files.items()), regular(EXPORT_FILE, listed)]
    )


def listed_file_missing() -> bytes:
    files = baseline()
    listed = export({**files, "configmaps/namespaces/default/extra.yaml": configmap("extra")})
    return packed(
        [*(regular(path, data) for path, data in files.items()), regular(EXPORT_FILE, listed)]
    )


def only(files: dict[str, bytes]) -> Callable[[], bytes]:
    """An archive of exactly ``files``, export.yaml listing them truly."""
    return lambda: packed(files_with_export(files))


@dataclass
class HostileCase:
    reason: str
    build: Callable[[], bytes]
    message: str


HOSTILE_CASES = [
    HostileCase(
        "an uncompressed tar is refused",
        lambda: packed(files_with_export(baseline()), mode="w"),
        "not a gzip-compressed archive",
    ),
    HostileCase(
        "gzip of something other than a tar is refused",
        lambda: gzip.compress(CANARY.encode() * 10),
        "not a tar archive",
    ),
    HostileCase("an empty file is refused", lambda: b"", "not a tar archive"),
    HostileCase(
        "an archive cut in half is refused", lambda: good()[: len(good()) // 2], "truncated"
    ),
    HostileCase(
        "an archive missing only its gzip trailer is refused", lambda: good()[:-4], "truncated"
    ),
    HostileCase(
        "an absolute path is refused",
        with_extra(regular("/etc/cron.d/backup", CANARY.encode())),
        "absolute path '/etc/cron.d/backup'",
    ),
    HostileCase(
        "a path climbing out with .. is refused",
        with_extra(regular("configmaps/namespaces/../../../x.yaml", CANARY.encode())),
        "leaves the archive's root",
    ),
    HostileCase(
        "a path with a backslash is refused",
        with_extra(regular("configmaps\\cluster\\x.yaml", CANARY.encode())),
        "has a backslash",
    ),
    HostileCase(
        "a path outside the layout is refused",
        with_extra(regular("configmaps/default/settings.yaml", CANARY.encode())),
        "does not fit the archive layout",
    ),
    HostileCase(
        "a file name not ending in .yaml is refused",
        with_extra(regular("configmaps/namespaces/default/settings", CANARY.encode())),
        "does not fit the archive layout",
    ),
    HostileCase(
        "a symbolic link is refused",
        with_extra(special("configmaps/namespaces/default/x.yaml", tarfile.SYMTYPE, f"/{CANARY}")),
        "is a symbolic link",
    ),
    HostileCase(
        "a hard link is refused",
        with_extra(special("configmaps/namespaces/default/x.yaml", tarfile.LNKTYPE, OBJECT_PATH)),
        "is a hard link",
    ),
    HostileCase(
        "a device is refused",
        with_extra(special("configmaps/namespaces/default/x.yaml", tarfile.CHRTYPE)),
        "is a special file",
    ),
    HostileCase(
        "a directory climbing out is refused",
        with_extra(special("configmaps/../..", tarfile.DIRTYPE)),
        "leaves the archive's root",
    ),
    HostileCase(
        "a file changed after export is refused",
        corrupted_in_place,
        f"checksum mismatch for {OBJECT_PATH}",
    ),
    HostileCase(
        "a file export.yaml does not list is refused",
        unlisted_file,
        "configmaps/namespaces/default/extra.yaml is not listed in export.yaml",
    ),
    HostileCase(
        "a file export.yaml lists but the archive lacks is refused",
        listed_file_missing,
        "configmaps/namespaces/default/extra.yaml is listed in export.yaml but missing",
    ),
    HostileCase(
        "an archive without export.yaml is refused",
        lambda: packed([regular(path, data) for path, data in baseline().items()]),
        "export.yaml is missing",
    ),
    HostileCase("an unknown version is refused", changed_export(version="v2"), "unknown version"),
    HostileCase(
        "an export.yaml that is not a mapping is refused",
        lambda: packed(
            [
                *(regular(p, d) for p, d in baseline().items()),
                regular(EXPORT_FILE, f"- {CANARY}\n".encode()),
            ]
        ),
        "export.yaml is not a mapping",
    ),
    HostileCase(
        "an export.yaml that is not YAML is refused",
        lambda: packed(
            [
                *(regular(p, d) for p, d in baseline().items()),
                regular(EXPORT_FILE, f"{{[{CANARY}".encode()),
            ]
        ),
        "export.yaml is not valid YAML",
    ),
    HostileCase(
        "an export time that is not RFC 3339 is refused",
        changed_export(exportedAt=f"{CANARY}"),
        "exportedAt is not an RFC 3339 time",
    ),
    HostileCase(
        "an export time of an impossible date is refused",
        changed_export(exportedAt="2026-02-30T06:00:00Z"),
        "exportedAt is not an RFC 3339 time",
    ),
    HostileCase(
        "an export without options is refused", changed_export(options=None), "options is missing"
    ),
    HostileCase(
        "a Crossplane version that would drive a terminal is refused",
        changed_export(crossplane={"version": f"2.1.4\x1b[2J{CANARY}"}),
        "crossplane.version is not a version",
    ),
    HostileCase(
        "a Kubernetes version that is not text is refused",
        changed_export(kubernetes={"version": {"major": 1}}),
        "kubernetes.version is not a version",
    ),
    HostileCase(
        "a crossplane section that is not a mapping is refused",
        changed_export(crossplane=[CANARY]),
        "crossplane is not a mapping",
    ),
    HostileCase(
        "a feature flag that is not one is refused",
        changed_export(crossplane={"featureFlags": [f"rm -rf {CANARY}"]}),
        "crossplane.featureFlags is not a list",
    ),
    HostileCase(
        "more feature flags than any Crossplane has are refused",
        changed_export(crossplane={"featureFlags": [f"--enable-x{i}" for i in range(65)]}),
        "crossplane.featureFlags is not a list of at most 64 flags",
    ),
    HostileCase(
        "an export listing a path outside the layout is refused",
        changed_export(files={f"../{CANARY}.yaml": "0" * 64}),
        "lists a path that does not fit the archive layout",
    ),
    HostileCase(
        "an export listing a checksum that is not a sha256 is refused",
        changed_export(files={OBJECT_PATH: CANARY}),
        f"the checksum of {OBJECT_PATH} is not a sha256",
    ),
    HostileCase(
        "an export whose stats disagree with the archive is refused",
        changed_export(stats={"objects": 2, "types": {"configmaps": 2}}),
        "stats in export.yaml do not match",
    ),
    HostileCase(
        "a duplicate path is refused",
        with_extra(regular(OBJECT_PATH, configmap())),
        f"duplicate path {OBJECT_PATH}",
    ),
    HostileCase(
        "a second export.yaml is refused",
        lambda: packed([*files_with_export(baseline()), regular(EXPORT_FILE, export(baseline()))]),
        "duplicate path export.yaml",
    ),
    HostileCase(
        "a member beyond the size limit is refused",
        oversized_member,
        "larger than the limit of 4194304 bytes",
    ),
    HostileCase(
        "an extended header beyond its limit is refused",
        oversized_extended_header,
        "extended tar header is larger than the limit",
    ),
    HostileCase(
        "objects before their folder's metadata.yaml are refused",
        only({OBJECT_PATH: configmap(), METADATA_PATH: configmaps_metadata()}),
        f"configmaps/metadata.yaml is missing before {OBJECT_PATH}",
    ),
    HostileCase(
        "objects of a folder without metadata.yaml are refused",
        only({OBJECT_PATH: configmap()}),
        f"configmaps/metadata.yaml is missing before {OBJECT_PATH}",
    ),
    HostileCase(
        "a metadata.yaml describing another folder's type is refused",
        only({METADATA_PATH: configmaps_metadata("secrets"), OBJECT_PATH: configmap()}),
        "describes another folder's type",
    ),
    HostileCase(
        "a metadata.yaml missing a field is refused",
        only({METADATA_PATH: configmaps_metadata().replace(b"namespaced: true\n", b"")}),
        "namespaced is missing or not a bool",
    ),
    HostileCase(
        "an object that is not YAML is refused",
        only({METADATA_PATH: configmaps_metadata(), OBJECT_PATH: f"data: [{CANARY}".encode()}),
        f"{OBJECT_PATH} is not valid YAML",
    ),
    HostileCase(
        "an object of an impossible date is refused",
        only(
            {METADATA_PATH: configmaps_metadata(), OBJECT_PATH: configmap() + b"when: 2026-02-30\n"}
        ),
        f"{OBJECT_PATH} is not valid YAML",
    ),
    HostileCase(
        "an object with a YAML alias is refused",
        only(
            {
                METADATA_PATH: configmaps_metadata(),
                OBJECT_PATH: configmap() + f"a: &x [{CANARY}]\nb: [*x, *x]\n".encode(),
            }
        ),
        "repeats a value (a YAML alias)",
    ),
    HostileCase(
        "an object with a value JSON cannot carry is refused",
        only(
            {
                METADATA_PATH: configmaps_metadata(),
                OBJECT_PATH: configmap() + b"raw: !!binary aGk=\n",
            }
        ),
        "holds a bytes",
    ),
    HostileCase(
        "an object named otherwise than its path is refused",
        only({METADATA_PATH: configmaps_metadata(), OBJECT_PATH: configmap(name="other")}),
        "named otherwise than its path",
    ),
    HostileCase(
        "an object in a namespace other than its path's is refused",
        only({METADATA_PATH: configmaps_metadata(), OBJECT_PATH: configmap(namespace="other")}),
        "named otherwise than its path",
    ),
    HostileCase(
        "an object of another kind than its folder's is refused",
        only({METADATA_PATH: configmaps_metadata(), OBJECT_PATH: configmap(kind="Secret")}),
        "another type than its folder's",
    ),
    HostileCase(
        "a namespaced type's object under cluster/ is refused",
        only(
            {METADATA_PATH: configmaps_metadata(), "configmaps/cluster/settings.yaml": configmap()}
        ),
        "out of place for a namespaced type",
    ),
]


def test_the_crafted_baseline_verifies() -> None:
    # Else a hostile case could pass for a reason other than its own.
    manifest = verify(io.BytesIO(good()))

    assert manifest.objects == 1
    assert listed(manifest) == {path: sha256(data) for path, data in baseline().items()}


EXTRA_PATH = "configmaps/namespaces/default/extra.yaml"


def listing(files: dict[str, bytes], order: Callable[[list[str]], list[str]]) -> bytes:
    """export.yaml in the writer's layout, a line a file, listing ``files`` in ``order``."""
    head = export(files).split(b"\nfiles:\n")[0] + b"\n"
    lines = [f'  {path}: "{sha256(files[path])}"\n'.encode() for path in order(list(files))]
    return head + b"files:\n" + b"".join(lines)


@dataclass
class ListingCase:
    reason: str
    # What the archive holds, and what its export.yaml lists.
    held: dict[str, bytes]
    listed: dict[str, bytes]
    order: Callable[[list[str]], list[str]]
    refused: str | None


TWO_OBJECTS = {**baseline(), EXTRA_PATH: configmap("extra")}

LISTING_CASES = [
    ListingCase(
        "the writer's own layout, in archive order, verifies",
        TWO_OBJECTS,
        TWO_OBJECTS,
        list,
        None,
    ),
    ListingCase(
        "a list in another order verifies, since the contract promises none",
        TWO_OBJECTS,
        TWO_OBJECTS,
        lambda paths: paths[::-1],
        None,
    ),
    ListingCase(
        "a listed digest that differs is refused",
        TWO_OBJECTS,
        {**TWO_OBJECTS, EXTRA_PATH: configmap("other")},
        lambda paths: paths[::-1],
        f"checksum mismatch for {EXTRA_PATH}",
    ),
    ListingCase(
        "a file the list leaves out is refused",
        TWO_OBJECTS,
        baseline(),
        lambda paths: paths[::-1],
        f"{EXTRA_PATH} is not listed in export.yaml",
    ),
    ListingCase(
        "a listed file the archive lacks is refused",
        baseline(),
        TWO_OBJECTS,
        lambda paths: paths[::-1],
        f"{EXTRA_PATH} is listed in export.yaml but missing",
    ),
]


@pytest.mark.parametrize("case", LISTING_CASES, ids=lambda c: c.reason)
def test_verify_compares_a_file_list_in_the_writers_layout_in_any_order(
    case: ListingCase,
) -> None:
    # The stats follow the list; a listing refusal comes before theirs.
    entries = [regular(path, data) for path, data in case.held.items()]
    archive = packed([*entries, regular(EXPORT_FILE, listing(case.listed, case.order))])

    if case.refused is None:
        with verify(io.BytesIO(archive)) as manifest:
            assert listed(manifest) == {path: sha256(data) for path, data in case.held.items()}
        return
    with pytest.raises(ArchiveError, match=re.escape(case.refused)):
        verify(io.BytesIO(archive))


def test_a_closed_manifest_holds_no_file_list() -> None:
    with verify(io.BytesIO(good())) as manifest:
        assert len(manifest.files) == len(baseline())

    # The scratch database is gone: nothing is left behind on disk or in memory.
    with pytest.raises(sqlite3.ProgrammingError):
        list(manifest.files)


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=lambda c: c.reason)
def test_verify_refuses_a_hostile_or_broken_archive_without_quoting_it(case: HostileCase) -> None:
    with pytest.raises(ArchiveError) as refused:
        verify(io.BytesIO(case.build()))

    assert case.message in str(refused.value)
    assert CANARY not in str(refused.value)


def test_verify_skips_plain_directory_entries() -> None:
    entries = files_with_export(baseline())
    directories = [
        special(path, tarfile.DIRTYPE) for path in ("configmaps", "configmaps/namespaces")
    ]

    manifest = verify(io.BytesIO(packed([*directories, *entries])))

    assert manifest.objects == 1


def objects_of(archive: bytes, manifest: Manifest) -> list[tuple[ResourceType, dict[str, Any]]]:
    return list(objects(io.BytesIO(archive), manifest))


def test_objects_refuses_a_file_changed_since_verify() -> None:
    verified = write([(CONFIGMAPS, SETTINGS)])
    changed = write([(CONFIGMAPS, {**SETTINGS, "data": {"a": "changed"}})])
    manifest = verify(io.BytesIO(verified))

    with pytest.raises(
        ArchiveError,
        match=re.escape("checksum mismatch for configmaps/namespaces/team-a/settings.yaml"),
    ):
        objects_of(changed, manifest)


def test_objects_refuses_a_file_new_since_verify() -> None:
    verified = write([(CONFIGMAPS, SETTINGS)])
    grown = write([(CONFIGMAPS, SETTINGS), (CONFIGMAPS, live(CONFIGMAPS, "new", "team-a"))])
    manifest = verify(io.BytesIO(verified))

    with pytest.raises(
        ArchiveError, match=re.escape("new.yaml was not in the archive as verified")
    ):
        objects_of(grown, manifest)


def test_objects_refuses_an_archive_missing_a_file_verify_saw() -> None:
    verified = write([(CONFIGMAPS, SETTINGS), (CONFIGMAPS, live(CONFIGMAPS, "gone", "team-a"))])
    shrunk = write([(CONFIGMAPS, SETTINGS)])
    manifest = verify(io.BytesIO(verified))

    with pytest.raises(ArchiveError, match=re.escape("gone.yaml is gone from the archive")):
        objects_of(shrunk, manifest)


def test_objects_refuses_the_verified_files_in_another_order() -> None:
    # Files are matched with the order verify read them in, not looked up in a set.
    first, second = live(CONFIGMAPS, "first", "team-a"), live(CONFIGMAPS, "second", "team-a")
    verified = write([(CONFIGMAPS, first), (CONFIGMAPS, second)])
    swapped = write([(CONFIGMAPS, second), (CONFIGMAPS, first)])
    manifest = verify(io.BytesIO(verified))

    with pytest.raises(
        ArchiveError, match=re.escape("second.yaml was not in the archive as verified")
    ):
        objects_of(swapped, manifest)


FIRST_CONFIG = live(CONFIGMAPS, "first", "team-a", data={"a": "1"})
LAST_CONFIG = live(CONFIGMAPS, "last", "team-a", data={"a": "2"})
TOKEN = live(SECRETS, "token", "team-a", data={"t": "dG9rZW4="})


@dataclass(frozen=True)
class PassCase:
    reason: str
    changed: list[tuple[ResourceType, dict[str, Any]]]
    folders: frozenset[str]
    parsed: int = 0
    refused: str = ""


PASS_CASES = [
    PassCase(
        reason="a step's pass stops at its last object, so a later file changed is not its concern",
        changed=[
            (CONFIGMAPS, FIRST_CONFIG),
            (CONFIGMAPS, LAST_CONFIG),
            (SECRETS, {**TOKEN, "data": {}}),
        ],
        folders=frozenset({"configmaps"}),
        parsed=2,
    ),
    PassCase(
        reason="the pass that needs the changed file refuses it before handing out its object",
        changed=[
            (CONFIGMAPS, FIRST_CONFIG),
            (CONFIGMAPS, LAST_CONFIG),
            (SECRETS, {**TOKEN, "data": {}}),
        ],
        folders=frozenset({"secrets"}),
        refused="checksum mismatch for secrets/namespaces/team-a/token.yaml",
    ),
    PassCase(
        reason="a file changed before a step's last object is refused by that step's pass",
        changed=[
            (CONFIGMAPS, {**FIRST_CONFIG, "data": {}}),
            (CONFIGMAPS, LAST_CONFIG),
            (SECRETS, TOKEN),
        ],
        folders=frozenset({"configmaps"}),
        refused="checksum mismatch for configmaps/namespaces/team-a/first.yaml",
    ),
]


@pytest.mark.parametrize("case", PASS_CASES, ids=lambda c: c.reason)
def test_a_steps_pass_checks_every_file_up_to_its_last_object(case: PassCase) -> None:
    verified = write([(CONFIGMAPS, FIRST_CONFIG), (CONFIGMAPS, LAST_CONFIG), (SECRETS, TOKEN)])
    manifest = verify(io.BytesIO(verified))

    async def parse() -> int:
        parsed = 0
        async for batch in parsed_batches(io.BytesIO(write(case.changed)), manifest, case.folders):
            parsed += len(batch)
        return parsed

    if case.refused:
        with pytest.raises(ArchiveError, match=re.escape(case.refused)):
            asyncio.run(parse())
    else:
        assert asyncio.run(parse()) == case.parsed


class Discard:
    """A sink that drops every byte, as if it went on to S3."""

    def write(self, data: bytes) -> int:
        return len(data)


def small_object(index: int) -> dict[str, Any]:
    # Random, so the compressed archive grows with the count too (about 400 bytes each).
    token = random.Random(index).randbytes(400).hex()
    return live(CONFIGMAPS, f"settings-{index}", "team-a", data={"token": token})


def peak_writing(count: int) -> int:
    tracemalloc.start()
    try:
        writer = ArchiveWriter(Discard())
        for index in range(count):
            writer.add(CONFIGMAPS, small_object(index))
        writer.finish(instance="myctp", exported_at=EXPORTED_AT, options={})
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_writing_holds_neither_the_objects_nor_the_archive() -> None:
    few = peak_writing(2_000)
    many = peak_writing(20_000)

    # The 20,000 objects come to about 16 MiB of YAML and 8 MiB compressed.
    assert many < 6 * MiB
    # export.yaml's list, a path and a digest per file, waits in a FileList: held
    # in a map it grew by about 180 bytes a file, and 18,000 more files at 16
    # bytes each would fail this.
    assert many - few < 256 * KiB


@dataclass(frozen=True)
class ReadingMemory:
    """Memory that Python allocates (tracemalloc) while an archive is read, in bytes."""

    verifying: int
    held: int
    reading: int


def reading_memory(count: int) -> ReadingMemory:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    for index in range(count):
        writer.add(CONFIGMAPS, small_object(index))
    writer.finish(instance="myctp", exported_at=EXPORTED_AT, options={})
    data = sink.getvalue()
    tracemalloc.start()
    try:
        with verify(io.BytesIO(data)) as manifest:
            verifying, held = tracemalloc.get_traced_memory()[1], tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for _ in objects(io.BytesIO(data), manifest):
                pass
            return ReadingMemory(verifying, held, tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def few_and_many() -> tuple[ReadingMemory, ReadingMemory]:
    return reading_memory(2_000), reading_memory(20_000)


@dataclass
class MemoryCase:
    reason: str
    measure: Callable[[ReadingMemory], int]


MEMORY_CASES = [
    MemoryCase(
        "verify's peak: export.yaml's list is read a line at a time from a copy on disk "
        "and every file's path and sha256 goes to the scratch database (held as maps, "
        "they took 5.6 MiB at 10,000 files)",
        lambda memory: memory.verifying,
    ),
    MemoryCase(
        "the manifest between the passes holds the types and counts, not the files "
        "(2.2 MiB at 10,000 files as a map)",
        lambda memory: memory.held,
    ),
    MemoryCase(
        "objects' peak: the verified files are read back from the database in order, "
        "and export.yaml is skipped unread",
        lambda memory: memory.reading,
    ),
]


@pytest.mark.parametrize("case", MEMORY_CASES, ids=lambda c: c.reason)
def test_reading_an_archive_takes_memory_that_does_not_grow_with_its_files(
    few_and_many: tuple[ReadingMemory, ReadingMemory], case: MemoryCase
) -> None:
    few, many = few_and_many

    # Ten times the files, 18,000 more: at 16 bytes a file this would fail. SQLite's
    # page cache (FileList, bounded by its cache_size) is outside tracemalloc's sight;
    # bench/restore_scale measures the process's RSS.
    assert case.measure(many) - case.measure(few) < 256 * KiB
    assert case.measure(many) < MiB
