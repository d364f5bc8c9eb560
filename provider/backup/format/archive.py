"""The backup archive: a gzip-compressed tar laid out like ``up controlplane migration export``.

The layout is the platform API contract's (section 4)::

    export.yaml                                   # version, exportedAt, instance, options,
                                                  # the source's versions (kubernetes,
                                                  # crossplane: version, featureFlags),
                                                  # stats and the sha256 of every other file
    <resource>.<group>/metadata.yaml              # the type: categories, withStatusSubresource,
                                                  # resource, group, version, kind, namespaced
    <resource>.<group>/cluster/<name>.yaml
    <resource>.<group>/namespaces/<namespace>/<name>.yaml

Core types have no ``.<group>``. A type's ``metadata.yaml`` comes before its
objects and ``export.yaml`` comes last, since it lists every file's checksum.

Writing streams: each object is serialised on its own and passes to the sink as
compressed bytes, so memory holds one object; every file's path and sha256 waits
for ``export.yaml`` in a private temporary SQLite database (``FileList``).
Reading takes two streaming passes over the same bytes: ``verify`` checks all
of it before anything is applied, ``objects`` yields the objects and checks each
file again, since the bytes are read twice. Between the passes the files' paths
and digests wait in a ``FileList`` too, so neither a writer's nor a reader's
memory grows with the archive.

Pure: no Kubernetes, no S3, no network; the one local I/O is that scratch
database, which SQLite keeps in a small page cache and spills to a deleted file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import re
import shutil
import sqlite3
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal, Self, TypeVar

import yaml

from provider.runtime import dns

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, SupportsWrite

EXPORT_FILE = "export.yaml"
FORMAT_VERSION = "v1alpha1"
METADATA_FILE = "metadata.yaml"

MIB = 1024 * 1024
# Pax and GNU long-name headers only carry a path and a few fields; tarfile
# reads them whole, before any member check of ours runs.
MAX_EXTENDED_HEADER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What a reader holds or reads at most: an archive beyond any of these is refused.

    Parsing YAML takes up to a hundred and fifty times a file's size in memory, so
    a file and its count of YAML nodes are bounded, not only the archive.

    Attributes:
        max_members: Files and folders in the archive (a few per type, one per object).
        max_member_bytes: One object or ``metadata.yaml``: above any object etcd
            stores (its requests are refused beyond 1.5 MiB by default).
        max_export_bytes: ``export.yaml``, which lists every file (about 130 bytes each).
        max_nodes: YAML nodes (scalars, mappings, sequences) in one object file;
            ``export.yaml`` may have two per listed file on top.
        max_total_bytes: The uncompressed tar stream, headers and padding included.
        max_trailing_bytes: Bytes after the tar's end marker: the writer pads to one
            tar record and nothing more.
        max_archive_bytes: The compressed archive as stored (its recorded size).
    """

    max_members: int = 250_000
    max_member_bytes: int = 4 * MIB
    max_export_bytes: int = 48 * MIB
    max_nodes: int = 200_000
    max_total_bytes: int = 8 * 1024 * MIB
    max_trailing_bytes: int = tarfile.RECORDSIZE
    max_archive_bytes: int = 4 * 1024 * MIB


SERVER_MANAGED_METADATA = frozenset(
    {
        "uid",
        "resourceVersion",
        "managedFields",
        "creationTimestamp",
        "generation",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)

_SHA256_RE = re.compile("[0-9a-f]{64}")
# An excluded type as a Backup's spec.excludedResources names it: "resource.group".
_EXCLUDED_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A version as a control plane reports it (`v1.31.0`, `2.1.4-up.2`) and a Crossplane
# feature flag as its command line has it (`--enable-usages`): printable, bounded.
_SOURCE_VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
_FEATURE_FLAG_RE = re.compile(r"--[a-z0-9][-a-z0-9]{0,62}(?:=[-0-9A-Za-z.,_]{0,64})?")
MAX_FEATURE_FLAGS = 64
_RFC3339_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
_EXTENDED_HEADERS = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)
_LINKS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link"}
_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_DRAIN_BYTES = 64 * 1024
_SHOWN_CHARS = 80

_T = TypeVar("_T")


class ArchiveError(ValueError):
    """An archive that cannot be written or trusted.

    The message is safe to show: it names paths and fields, never file contents.
    """


@dataclass(frozen=True)
class ResourceType:
    """An API resource whose objects the archive holds, as discovery describes it."""

    resource: str
    group: str
    version: str
    kind: str
    namespaced: bool
    categories: tuple[str, ...] = ()
    with_status_subresource: bool = False

    @property
    def folder(self) -> str:
        """The type's folder: ``<resource>.<group>``, or ``<resource>`` for the core group."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def api_version(self) -> str:
        """The objects' apiVersion: ``<group>/<version>``, or ``<version>`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def managed(self) -> bool:
        """Whether its objects are managed resources (their CRD's ``managed`` category)."""
        return "managed" in self.categories


@dataclass(frozen=True)
class SourceVersions:
    """What the exported control plane ran, as ``export.yaml`` records it; empty when unknown.

    ``up controlplane migration export`` records ``crossplane: {version,
    featureFlags}`` the same way; ``kubernetes.version`` is the API server's
    ``/version`` (``gitVersion``).
    """

    kubernetes: str = ""
    crossplane: str = ""
    feature_flags: tuple[str, ...] = ()

    def recordable(self) -> SourceVersions:
        """What a reader takes of it: a value not in the form of a version or a flag is dropped.

        A control plane reports these, so one that reports nonsense does not
        make an archive no restore would read.
        """

        def version(text: str) -> str:
            return text if _SOURCE_VERSION_RE.fullmatch(text) else ""

        flags = tuple(flag for flag in self.feature_flags if _FEATURE_FLAG_RE.fullmatch(flag))
        return SourceVersions(
            kubernetes=version(self.kubernetes),
            crossplane=version(self.crossplane),
            feature_flags=flags[:MAX_FEATURE_FLAGS],
        )

    def document(self) -> dict[str, Any]:
        """The ``kubernetes`` and ``crossplane`` sections of ``export.yaml``, each if known."""
        found: dict[str, Any] = {}
        if self.kubernetes:
            found["kubernetes"] = {"version": self.kubernetes}
        crossplane: dict[str, Any] = {}
        if self.crossplane:
            crossplane["version"] = self.crossplane
        if self.feature_flags:
            crossplane["featureFlags"] = list(self.feature_flags)
        if crossplane:
            found["crossplane"] = crossplane
        return found


@dataclass(frozen=True)
class Summary:
    """What a finished archive is: its digest and size as stored, and how many objects."""

    sha256: str
    size: int
    objects: int


# SQLite's page cache for a FileList. A file takes about 300 bytes there (a row
# and an index entry in each table), so beyond some 1,700 files the rest spills
# to the scratch file rather than memory.
_FILE_LIST_CACHE_KIB = 512


class FileList:
    """Every file's path and sha256 in archive order, and those ``export.yaml`` lists.

    A private temporary SQLite database (deleted when closed or collected) holds
    them: its page cache is bounded, the rest spills to disk, and its indexes find
    a path without a map in memory. ``ArchiveWriter`` fills it as it writes and reads
    it into ``export.yaml``; ``verify`` fills it and ``objects`` reads it.
    """

    def __init__(self) -> None:
        """Open an empty list."""
        # An empty name is a private temporary database. Passes run in worker
        # threads; SQLite serialises a connection's use itself (threadsafety 3).
        self._db = sqlite3.connect("", check_same_thread=False)
        for pragma in (
            f"cache_size = -{_FILE_LIST_CACHE_KIB}",
            # Nothing here outlives the connection, so nothing needs a journal.
            "journal_mode = OFF",
            "synchronous = OFF",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        # rowid keeps each table's order: the archive's, and export.yaml's.
        self._db.execute("CREATE TABLE files (path TEXT PRIMARY KEY, digest BLOB NOT NULL)")
        self._db.execute("CREATE TABLE listed (path TEXT PRIMARY KEY, digest BLOB NOT NULL)")

    def add(self, path: str, digest: bytes) -> bool:
        """Record a file read from the archive; False if its path was already there."""
        try:
            self._db.execute("INSERT INTO files VALUES (?, ?)", (path, digest))
        except sqlite3.IntegrityError:
            return False
        return True

    def add_listed(self, path: str, digest: bytes) -> None:
        """Record a file ``export.yaml`` lists; a path listed again keeps its place, as in YAML."""
        self._db.execute(
            "INSERT INTO listed VALUES (?, ?)"
            " ON CONFLICT (path) DO UPDATE SET digest = excluded.digest",
            (path, digest),
        )

    def check_listed(self) -> None:
        """Refuse unless the files read and those listed are the same, with the same digests.

        Raises:
            ArchiveError: naming the first file in archive order that is not listed or
                whose digest differs, else the first listed file that is missing.
        """
        found = self._db.execute(
            "SELECT files.path, listed.path IS NULL FROM files"
            " LEFT JOIN listed ON listed.path = files.path"
            " WHERE listed.path IS NULL OR listed.digest != files.digest"
            " ORDER BY files.rowid LIMIT 1"
        ).fetchone()
        if found is not None:
            path, unlisted = found
            if unlisted:
                raise ArchiveError(f"{path} is not listed in {EXPORT_FILE}")
            raise ArchiveError(f"checksum mismatch for {path}")
        found = self._db.execute(
            "SELECT path FROM listed WHERE path NOT IN (SELECT path FROM files)"
            " ORDER BY rowid LIMIT 1"
        ).fetchone()
        if found is not None:
            raise ArchiveError(f"{found[0]} is listed in {EXPORT_FILE} but missing")

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        """Each file's path and raw sha256, in archive order, read as they are needed."""
        return iter(self._db.execute("SELECT path, digest FROM files ORDER BY rowid"))

    def __contains__(self, path: object) -> bool:
        """Whether the archive holds a file at ``path``."""
        query = "SELECT 1 FROM files WHERE path = ?"
        return self._db.execute(query, (path,)).fetchone() is not None

    def __len__(self) -> int:
        """How many files the archive holds, ``export.yaml`` aside."""
        count: int = self._db.execute("SELECT count(*) FROM files").fetchone()[0]
        return count

    def close(self) -> None:
        """Delete the database; the list is empty and unusable afterwards."""
        self._db.close()


@dataclass(frozen=True, eq=False)
class Manifest:
    """What ``verify`` found in an archive, for ``objects`` to read it again.

    It holds a scratch database: close it (or use it as a context manager) once
    the archive has been read.
    """

    instance: str
    exported_at: datetime
    types: dict[str, ResourceType]
    files: FileList
    # Objects per folder: bounded by the types, unlike the files.
    counts: dict[str, int]
    objects: int
    # The types the export left out, as its options recorded them.
    excluded: tuple[str, ...] = ()
    # What the source ran; empty in archives made before it was recorded.
    source: SourceVersions = SourceVersions()

    def close(self) -> None:
        """Delete the scratch database behind ``files``."""
        self.files.close()

    def __enter__(self) -> Self:
        """The manifest itself, closed on leaving the block."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the manifest."""
        self.close()


def strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Copy an object without the metadata the API server manages.

    Args:
        obj: an object as read from the API server.

    Returns:
        A deep copy of plain dicts and lists, sharing nothing with ``obj`` or within
        itself, without the metadata in ``SERVER_MANAGED_METADATA``.
    """
    stripped: dict[str, Any] = _copy(obj)
    metadata = stripped.get("metadata")
    if isinstance(metadata, dict):
        for key in SERVER_MANAGED_METADATA:
            metadata.pop(key, None)
    return stripped


def member_path(rtype: ResourceType, obj: Mapping[str, Any]) -> str:
    """Where an object sits in the archive.

    Args:
        rtype: the object's type.
        obj: the object.

    Returns:
        ``<folder>/cluster/<name>.yaml`` or ``<folder>/namespaces/<namespace>/<name>.yaml``.

    Raises:
        ArchiveError: the type's resource or group, or the object's name or namespace, is not a
            valid Kubernetes name, or the namespace does not fit the type's scope. Only valid
            names make up a path, so no path can leave the archive's root.
    """
    if not dns.is_label(rtype.resource):
        raise ArchiveError(f"resource {_show(rtype.resource)} is not a valid resource name")
    if rtype.group and not dns.is_subdomain(rtype.group):
        raise ArchiveError(f"group {_show(rtype.group)} is not a valid API group")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ArchiveError(f"an object of {rtype.folder} has no metadata")
    name = metadata.get("name")
    if not dns.is_subdomain(name):
        raise ArchiveError(f"{rtype.folder}: {_show(name)} is not a valid object name")
    namespace = metadata.get("namespace")
    if rtype.namespaced:
        if not dns.is_label(namespace):
            raise ArchiveError(
                f"{rtype.folder}/{name}: {_show(namespace)} is not a valid namespace name"
            )
        return f"{rtype.folder}/namespaces/{namespace}/{name}.yaml"
    if namespace:
        raise ArchiveError(f"{rtype.folder}/{name}: a cluster-scoped object has a namespace")
    return f"{rtype.folder}/cluster/{name}.yaml"


def restore_phase(rtype: ResourceType) -> int:
    """When a type's objects are applied during a restore, in the contract's order.

    Args:
        rtype: the type.

    Returns:
        0 namespaces, 1 configmaps, 2 secrets, 3 packages and their configs
        (``pkg.crossplane.io``), 4 XRDs, compositions and the rest of
        ``apiextensions.crossplane.io``, 5 everything else (claims, composites,
        managed resources), which needs the earlier phases established.
    """
    if not rtype.group:
        return {"namespaces": 0, "configmaps": 1, "secrets": 2}.get(rtype.resource, 5)
    return {"pkg.crossplane.io": 3, "apiextensions.crossplane.io": 4}.get(rtype.group, 5)


class ArchiveWriter:
    """Writes an archive into a sink as a stream, one object at a time.

    Memory holds the object being written, never the archive: each file's path
    and digest, which ``export.yaml`` lists at the end, wait in a ``FileList``.
    ``finish`` and ``discard`` close that list.
    """

    def __init__(self, sink: SupportsWrite[bytes]) -> None:
        """Start an archive.

        Args:
            sink: where the compressed bytes go, in order; anything with ``write(bytes)``.
        """
        self._tally = _Tally(sink)
        self._tar = _StreamTar.open(mode="w|gz", fileobj=self._tally, format=tarfile.PAX_FORMAT)
        self._mtime = int(time.time())
        self._types: dict[str, ResourceType] = {}
        self._counts: dict[str, int] = {}
        self._files = FileList()

    def add(self, rtype: ResourceType, obj: Mapping[str, Any]) -> None:
        """Write one object, and its type's ``metadata.yaml`` the first time the type is seen.

        The object is stripped of server-managed metadata and given its type's
        apiVersion and kind where it lacks them, as items of a list response do.

        Args:
            rtype: the object's type.
            obj: the object, as read from the API server.

        Raises:
            ArchiveError: the object has no valid path (see ``member_path``), is already in the
                archive, disagrees with its type or with an earlier type of the same folder, or
                holds a value JSON cannot carry. Nothing is written then.
        """
        path = member_path(rtype, obj)
        if path in self._files:
            raise ArchiveError(f"{path} is already in the archive")
        known = self._types.get(rtype.folder)
        if known is not None and known != rtype:
            raise ArchiveError(f"{rtype.folder} was added as two different types")
        stripped = strip(obj)
        for key, value in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
            if stripped.get(key, value) != value:
                raise ArchiveError(f"{path}: the object's {key} is not its type's")
        data = _dump({"apiVersion": rtype.api_version, "kind": rtype.kind, **stripped}, path)
        if known is None:
            metadata_path = f"{rtype.folder}/{METADATA_FILE}"
            self._write(metadata_path, _dump(_type_document(rtype), metadata_path))
            self._types[rtype.folder] = rtype
            self._counts[rtype.folder] = 0
        self._write(path, data)
        self._counts[rtype.folder] += 1

    def finish(
        self,
        *,
        instance: str,
        exported_at: datetime,
        options: Mapping[str, Any],
        source: SourceVersions | None = None,
    ) -> Summary:
        """Write ``export.yaml``, last, and close the archive.

        Args:
            instance: the name of the Instance the objects were read from.
            exported_at: when the export started; must carry a time zone.
            options: how the export was made (such as excluded resources), kept as given.
            source: the versions the control plane ran, recorded where known.

        Returns:
            The archive's sha256 and size as written to the sink, and its object count.

        Raises:
            ArchiveError: ``exported_at`` has no time zone, or ``options`` hold a value JSON
                cannot carry.
        """
        if exported_at.utcoffset() is None:
            raise ArchiveError("exported_at must carry a time zone")
        objects = sum(self._counts.values())
        head = _dump(
            {
                "version": FORMAT_VERSION,
                "exportedAt": exported_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                "instance": instance,
                "options": _copy(options),
                **(source or SourceVersions()).recordable().document(),
                "stats": {"objects": objects, "types": dict(sorted(self._counts.items()))},
            },
            EXPORT_FILE,
        )
        # The file list grows with the archive: generate it twice, once to size the
        # member's header and once into the member, rather than hold it.
        size = len(head) + sum(len(chunk) for chunk in self._files_section())
        self._add_member(EXPORT_FILE, size, _Chunks(itertools.chain([head], self._files_section())))
        self._tar.close()
        self._files.close()
        return Summary(
            sha256=self._tally.sha256.hexdigest(), size=self._tally.size, objects=objects
        )

    def discard(self) -> None:
        """Give the archive up: nothing more reaches the sink, not even on garbage collection.

        tarfile's stream writes its last blocks when it is collected; after a failed
        export the sink is aborted, and must not be written to again.
        """
        self._tally.discarded = True
        self._tar.members.clear()
        self._files.close()

    def _files_section(self) -> Iterator[bytes]:
        if not len(self._files):
            yield b"files: {}\n"
            return
        yield b"files:\n"
        for path, digest in self._files:
            # Plain YAML needs no quoting here: a path is made of valid Kubernetes names
            # and slashes (no implicit type matches a slash); the digest is quoted so
            # that no run of hex digits reads as a number.
            yield f'  {path}: "{digest.hex()}"\n'.encode()

    def _write(self, path: str, data: bytes) -> None:
        self._add_member(path, len(data), io.BytesIO(data))
        self._files.add(path, hashlib.sha256(data).digest())

    def _add_member(self, path: str, size: int, content: io.BytesIO | _Chunks) -> None:
        info = tarfile.TarInfo(path)
        info.size = size
        info.mtime = self._mtime
        info.mode = 0o644
        self._tar.addfile(info, content)
        self._tar.members.clear()


Admit = Callable[[ResourceType, Mapping[str, Any]], str | None]


def verify(
    source: IO[bytes], *, limits: Limits | None = None, admit: Admit | None = None
) -> Manifest:
    """Check a whole archive in one streaming pass, before anything of it is applied.

    Args:
        source: the archive's bytes, from their start.
        limits: the sizes and counts beyond which the archive is refused.
        admit: says why an object may not be restored (None when it may); such an
            object refuses the whole archive.

    Returns:
        The archive's manifest, for ``objects`` to read the same bytes with; close it
        (or use it as a context manager) when done, to delete its scratch database.

    Raises:
        ArchiveError: the archive is not a gzip-compressed tar or is truncated; holds a
            member that is not a regular file (plain directories are skipped), a path that is
            absolute, climbs out with ``..``, has a backslash or does not fit the layout, a
            duplicate path, more than a limit allows, or a YAML alias; ``export.yaml`` is missing,
            malformed or of an unknown version; a file's sha256 differs from ``export.yaml``,
            a file is missing from it or from the archive; a folder's ``metadata.yaml`` does
            not come before its objects; or a file is not the YAML its place calls for.
    """
    files = FileList()
    try:
        # export.yaml is read from a copy on disk, a line at a time, rather than held.
        with tempfile.TemporaryFile() as export_copy:
            return _verify(source, limits or Limits(), admit, files, export_copy)
    except BaseException:
        files.close()
        raise


def _verify(
    source: IO[bytes],
    limits: Limits,
    admit: Admit | None,
    files: FileList,
    export_copy: IO[bytes],
) -> Manifest:
    types: dict[str, ResourceType] = {}
    counts: dict[str, int] = {}
    export: _Export | None = None
    for entry, data in _entries(source, limits, export_copy):
        if entry.role == "export":
            if export is not None:
                raise ArchiveError(f"duplicate path {entry.path}")
            export_copy.seek(0)
            export = _read_export(export_copy, limits, files)
            continue
        if not files.add(entry.path, hashlib.sha256(data).digest()):
            raise ArchiveError(f"duplicate path {entry.path}")
        if entry.role == "metadata":
            types[entry.folder] = _read_type(entry, data, limits)
            continue
        rtype = types.get(entry.folder)
        if rtype is None:
            raise ArchiveError(f"{entry.folder}/{METADATA_FILE} is missing before {entry.path}")
        obj = _read_object(entry, rtype, data, limits)
        refusal = admit(rtype, obj) if admit is not None else None
        if refusal is not None:
            raise ArchiveError(f"{entry.path}: {refusal}")
        counts[entry.folder] = counts.get(entry.folder, 0) + 1
    if export is None:
        raise ArchiveError(f"{EXPORT_FILE} is missing")
    files.check_listed()
    total = sum(counts.values())
    if export.stats.get("objects") != total or export.stats.get("types") != counts:
        raise ArchiveError(f"the stats in {EXPORT_FILE} do not match the archive's objects")
    return Manifest(
        instance=export.instance,
        exported_at=export.exported_at,
        types=types,
        files=files,
        counts=counts,
        objects=total,
        excluded=export.excluded,
        source=export.source,
    )


def objects(
    source: IO[bytes],
    manifest: Manifest,
    *,
    limits: Limits | None = None,
    folders: Collection[str] | None = None,
) -> Iterator[tuple[ResourceType, dict[str, Any]]]:
    """Read every object of an archive that ``verify`` accepted, in archive order.

    Each file's sha256 is checked again, since the bytes may have changed between passes.

    Args:
        source: the same archive ``verify`` read, from its start.
        manifest: what ``verify`` returned for it.
        limits: the sizes and counts beyond which the archive is refused.
        folders: read only the objects of these folders (every file is still checked);
            None reads all. Parsing is most of a pass, so a reader that needs a few
            types at a time pays only for those.

    Yields:
        Each object with its type.

    Raises:
        ArchiveError: the bytes are not those ``verify`` checked: a checksum differs, or a
            file is new, repeated or gone; or the archive is broken (as in ``verify``).
    """
    limits = limits or Limits()
    # ``manifest.files`` lists the files in the order ``verify`` read them: the same
    # bytes give the same order, so each file is matched with the next one listed,
    # without a set of the paths seen that would grow with the archive.
    verified = iter(manifest.files)
    for entry, data in _entries(source, limits):
        if entry.role == "export":
            continue
        path, digest = next(verified, ("", b""))
        if entry.path != path:
            raise ArchiveError(f"{entry.path} was not in the archive as verified")
        if hashlib.sha256(data).digest() != digest:
            raise ArchiveError(f"checksum mismatch for {entry.path}")
        if entry.role == "object" and (folders is None or entry.folder in folders):
            rtype = manifest.types[entry.folder]
            yield rtype, _read_object(entry, rtype, data, limits)
    for path, _ in verified:
        raise ArchiveError(f"{path} is gone from the archive since it was verified")


class _StreamTar(tarfile.TarFile):
    # The list of every header read or written, which typeshed leaves out; a
    # stream pass never looks back, so each pass empties it to keep memory flat.
    members: list[tarfile.TarInfo]


class _BoundedHeader(tarfile.TarInfo):
    """A tar header that refuses an extended header too large to hold.

    tarfile reads a pax or GNU long-name header's data whole, as it parses the
    header, before the member it describes reaches any check of ours.
    """

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        """Parse a header block, refusing an oversized extended header.

        Args:
            buf: the 512-byte header block.
            encoding: the archive's name encoding.
            errors: how to handle undecodable names.

        Returns:
            The header.

        Raises:
            ArchiveError: an extended header's data exceeds ``MAX_EXTENDED_HEADER_BYTES``.
        """
        header = super().frombuf(buf, encoding, errors)
        if header.type in _EXTENDED_HEADERS and header.size > MAX_EXTENDED_HEADER_BYTES:
            raise ArchiveError("an extended tar header is larger than the limit")
        return header


@dataclass(frozen=True)
class _Entry:
    """A regular file of the archive and its place in the layout."""

    path: str
    role: Literal["export", "metadata", "object"]
    folder: str = ""
    namespace: str | None = None
    name: str = ""


@dataclass(frozen=True)
class _Export:
    """The parts of ``export.yaml`` a reader checks."""

    instance: str
    exported_at: datetime
    stats: dict[str, Any]
    excluded: tuple[str, ...]
    source: SourceVersions


class _Tally(io.BufferedIOBase):
    """Hands the compressed bytes to the sink, hashing and counting them on the way."""

    def __init__(self, sink: SupportsWrite[bytes]) -> None:
        super().__init__()
        self._sink = sink
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.discarded = False

    def write(self, buffer: ReadableBuffer, /) -> int:
        """Pass bytes on to the sink.

        Args:
            buffer: the next compressed bytes.

        Returns:
            How many bytes were taken: all of them.
        """
        data = bytes(buffer)
        if self.discarded:
            return len(data)
        self.sha256.update(data)
        self.size += len(data)
        self._sink.write(data)
        return len(data)


class _Chunks:
    """A readable file over byte chunks made on demand, so a member need not be held whole."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = bytearray()

    def read(self, size: int = -1, /) -> bytes:
        """Read up to ``size`` bytes, or all that are left if ``size`` is negative.

        Args:
            size: how many bytes at most.

        Returns:
            The bytes; fewer than ``size`` only at the end.
        """
        while size < 0 or len(self._pending) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._pending += chunk
        taken = len(self._pending) if size < 0 else size
        data = bytes(self._pending[:taken])
        del self._pending[:taken]
        return data


class _Counted(io.RawIOBase):
    """The uncompressed stream, refused once more than ``limit`` bytes are read from it."""

    def __init__(self, stream: gzip.GzipFile, limit: int) -> None:
        super().__init__()
        self._stream = stream
        self._limit = limit
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        self.count += len(data)
        if self.count > self._limit:
            raise ArchiveError(f"the archive unpacks to more than {self._limit} bytes")
        return data


def _entries(
    source: IO[bytes], limits: Limits, export_copy: IO[bytes] | None = None
) -> Iterator[tuple[_Entry, bytes]]:
    """Every regular file of an archive, checked and placed in the layout, with its bytes.

    export.yaml's bytes, which grow with the archive (its file list), are never held:
    they go to ``export_copy`` (or nowhere, when None) and come out empty.
    """
    members = 0
    try:
        # gzip.GzipFile rather than tarfile's "r|gz": it checks the gzip trailer's CRC
        # and length, and says so when the stream ends early.
        with gzip.GzipFile(fileobj=source, mode="rb") as unzipped:
            counted = _Counted(unzipped, limits.max_total_bytes)
            with _StreamTar.open(mode="r|", fileobj=counted, tarinfo=_BoundedHeader) as tar:
                while (member := tar.next()) is not None:
                    tar.members.clear()
                    members += 1
                    if members > limits.max_members:
                        raise ArchiveError(f"the archive has more than {limits.max_members} files")
                    entry = _check_member(member, limits)
                    if entry is None:
                        continue
                    content = tar.extractfile(member)
                    assert content is not None  # a regular file always has content
                    if entry.role != "export":
                        yield entry, content.read()
                        continue
                    if export_copy is not None:
                        shutil.copyfileobj(content, export_copy, _DRAIN_BYTES)
                    yield entry, b""
                # tar stops at its end-of-archive blocks; reading the rest of the gzip
                # stream checks its trailer, so a truncated or corrupt archive is not taken
                # as whole. The writer pads to one tar record; more is refused.
                end = counted.count
                while counted.read(_DRAIN_BYTES):
                    if counted.count - end > limits.max_trailing_bytes:
                        raise ArchiveError(
                            "the archive has more than "
                            f"{limits.max_trailing_bytes} bytes after its end"
                        )
    except EOFError:
        raise ArchiveError("the archive is truncated") from None
    except (gzip.BadGzipFile, zlib.error):
        # The causes quote the archive's bytes.
        raise ArchiveError("not a gzip-compressed archive, or a corrupt one") from None
    except tarfile.TarError:
        raise ArchiveError("not a tar archive, or a corrupt one") from None


def _check_member(member: tarfile.TarInfo, limits: Limits) -> _Entry | None:
    """Place a regular file in the layout; None for a plain directory, to skip."""
    if member.isdir():
        _check_relative(member.name)
        return None
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        what = _LINKS.get(member.type, "a special file")
        raise ArchiveError(f"{_show(member.name)} is {what}, not a regular file")
    entry = _place(member.name)
    limit = limits.max_export_bytes if entry.role == "export" else limits.max_member_bytes
    if member.size > limit:
        raise ArchiveError(f"{entry.path} is larger than the limit of {limit} bytes")
    return entry


def _check_relative(path: str) -> None:
    if path.startswith("/"):
        raise ArchiveError(f"absolute path {_show(path)}")
    if "\\" in path:
        raise ArchiveError(f"path {_show(path)} has a backslash")
    if ".." in path.split("/"):
        raise ArchiveError(f"path {_show(path)} leaves the archive's root")


def _place(path: str) -> _Entry:
    """Where a path sits in the layout, or ArchiveError if it fits nowhere."""
    _check_relative(path)
    if path == EXPORT_FILE:
        return _Entry(path, "export")
    folder, *rest = path.split("/")
    resource, dot, group = folder.partition(".")
    if not dns.is_label(resource) or (dot and not dns.is_subdomain(group)):
        raise _misfit(path)
    if rest == [METADATA_FILE]:
        return _Entry(path, "metadata", folder)
    namespace: str | None
    match rest:
        case ["cluster", file]:
            namespace = None
        case ["namespaces", namespace, file] if dns.is_label(namespace):
            pass
        case _:
            raise _misfit(path)
    name = file.removesuffix(".yaml")
    if name == file or not dns.is_subdomain(name):
        raise _misfit(path)
    return _Entry(path, "object", folder, namespace, name)


def _misfit(path: str) -> ArchiveError:
    return ArchiveError(f"path {_show(path)} does not fit the archive layout")


# The file list as the writer lays it out, last in export.yaml: one path (made of
# Kubernetes names and slashes, which plain YAML reads as they are) and one quoted
# digest a line. Nothing in these lines has a meaning of its own in YAML.
_FILES_HEAD = b"files:\n"
_FILES_LINE = re.compile(rb'  ([a-z0-9][-a-z0-9./]*): "([0-9a-f]{64})"\n')


def _find_file_list(file: IO[bytes]) -> tuple[int, int] | None:
    """Where export.yaml's file list starts, and its length, when laid out as the writer does.

    The list is the last ``files:`` line (not the first line of the file) and every
    line after it. None for any other layout, which is then read as YAML.

    A YAML parser holds a node per path and digest, some hundreds of bytes each, so
    the list is read line by line instead, and never held: this pass only checks it.
    """
    start: int | None = None
    lines = 0
    position = 0
    for line in file:
        if position and line == _FILES_HEAD:
            start, lines = position, 0
        elif start is not None and _FILES_LINE.fullmatch(line):
            lines += 1
        else:
            start = None
        position += len(line)
    return None if start is None else (start, lines)


def _file_lines(file: IO[bytes], start: int) -> Iterator[tuple[str, str]]:
    """The paths and digests of a file list ``_find_file_list`` found, one line at a time."""
    file.seek(start + len(_FILES_HEAD))
    for line in file:
        listed = _FILES_LINE.fullmatch(line)
        # The file is verify's own copy, checked whole by _find_file_list.
        assert listed is not None
        yield listed[1].decode(), listed[2].decode()


def _read_export(file: IO[bytes], limits: Limits, files: FileList) -> _Export:
    """Check export.yaml (``file``, from its start), adding the files it lists to ``files``."""
    max_nodes = limits.max_nodes + 2 * limits.max_members
    file_list = _find_file_list(file)
    if file_list is not None and 2 * file_list[1] > max_nodes:
        raise ArchiveError(f"{EXPORT_FILE} has more than {max_nodes} YAML nodes")
    file.seek(0)
    document = _load(
        EXPORT_FILE, file.read() if file_list is None else file.read(file_list[0]), max_nodes
    )
    if not isinstance(document, dict):
        raise ArchiveError(f"{EXPORT_FILE} is not a mapping")
    # The version comes first: another version may lay out everything else differently.
    if document.get("version") != FORMAT_VERSION:
        raise ArchiveError(
            f"{EXPORT_FILE} has an unknown version; this reader knows {FORMAT_VERSION}"
        )
    exported_at = _field(document, "exportedAt", str, EXPORT_FILE)
    try:
        if not _RFC3339_RE.fullmatch(exported_at):
            raise ValueError
        parsed = datetime.fromisoformat(exported_at).astimezone(UTC)
    except ValueError:
        raise ArchiveError(f"{EXPORT_FILE}: exportedAt is not an RFC 3339 time") from None
    options = _field(document, "options", dict, EXPORT_FILE)
    excluded = options.get("excludedResources") or []
    if not isinstance(excluded, list) or not all(
        isinstance(name, str) and _EXCLUDED_RE.fullmatch(name) for name in excluded
    ):
        raise ArchiveError(
            f'{EXPORT_FILE}: options.excludedResources is not a list of "resource.group"'
        )
    listed: Iterable[tuple[object, object]]
    if file_list is None:
        listed = _field(document, "files", dict, EXPORT_FILE).items()
    else:
        listed = _file_lines(file, file_list[0])
    for path, digest in listed:
        try:
            entry = _place(path) if isinstance(path, str) else None
        except ArchiveError:
            entry = None
        # Unlike a member's name, a listed path is file content: it is not quoted.
        if entry is None or entry.role == "export":
            raise ArchiveError(f"{EXPORT_FILE} lists a path that does not fit the archive layout")
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise ArchiveError(f"{EXPORT_FILE}: the checksum of {path} is not a sha256")
        files.add_listed(entry.path, bytes.fromhex(digest))
    return _Export(
        instance=_field(document, "instance", str, EXPORT_FILE),
        exported_at=parsed,
        stats=_field(document, "stats", dict, EXPORT_FILE),
        excluded=tuple(excluded),
        source=_read_source(document),
    )


def _read_source(document: dict[str, Any]) -> SourceVersions:
    """The ``kubernetes`` and ``crossplane`` sections, each optional; checked, never trusted.

    Their text reaches a condition, an event and a terminal, so it is held to
    the form of a version and of a flag.
    """
    sections = {}
    for key in ("kubernetes", "crossplane"):
        section = document.get(key)
        if section is None:
            section = {}
        if not isinstance(section, dict):
            raise ArchiveError(f"{EXPORT_FILE}: {key} is not a mapping")
        version = section.get("version")
        if version is not None and not (
            isinstance(version, str) and _SOURCE_VERSION_RE.fullmatch(version)
        ):
            raise ArchiveError(
                f"{EXPORT_FILE}: {key}.version is not a version (letters, digits, '.', '+', "
                "'_' and '-', at most 64)"
            )
        sections[key] = section
    flags = sections["crossplane"].get("featureFlags")
    if flags is None:
        flags = []
    if (
        not isinstance(flags, list)
        or len(flags) > MAX_FEATURE_FLAGS
        or not all(isinstance(flag, str) and _FEATURE_FLAG_RE.fullmatch(flag) for flag in flags)
    ):
        raise ArchiveError(
            f"{EXPORT_FILE}: crossplane.featureFlags is not a list of at most "
            f"{MAX_FEATURE_FLAGS} flags such as --enable-usages"
        )
    return SourceVersions(
        kubernetes=str(sections["kubernetes"].get("version") or ""),
        crossplane=str(sections["crossplane"].get("version") or ""),
        feature_flags=tuple(flags),
    )


def _type_document(rtype: ResourceType) -> dict[str, Any]:
    return {
        "categories": list(rtype.categories),
        "withStatusSubresource": rtype.with_status_subresource,
        "resource": rtype.resource,
        "group": rtype.group,
        "version": rtype.version,
        "kind": rtype.kind,
        "namespaced": rtype.namespaced,
    }


def _read_type(entry: _Entry, data: bytes, limits: Limits) -> ResourceType:
    document = _load(entry.path, data, limits.max_nodes)
    if not isinstance(document, dict):
        raise ArchiveError(f"{entry.path} is not a mapping")
    categories = _field(document, "categories", list, entry.path)
    if not all(isinstance(category, str) for category in categories):
        raise ArchiveError(f"{entry.path}: categories are not all strings")
    rtype = ResourceType(
        resource=_field(document, "resource", str, entry.path),
        group=_field(document, "group", str, entry.path),
        version=_field(document, "version", str, entry.path),
        kind=_field(document, "kind", str, entry.path),
        namespaced=_field(document, "namespaced", bool, entry.path),
        categories=tuple(categories),
        with_status_subresource=_field(document, "withStatusSubresource", bool, entry.path),
    )
    if rtype.folder != entry.folder:
        raise ArchiveError(f"{entry.path} describes another folder's type")
    if not dns.is_label(rtype.version) or not rtype.kind:
        raise ArchiveError(f"{entry.path}: version or kind is not valid")
    return rtype


def _read_object(entry: _Entry, rtype: ResourceType, data: bytes, limits: Limits) -> dict[str, Any]:
    if rtype.namespaced != (entry.namespace is not None):
        scope = "namespaced" if rtype.namespaced else "cluster-scoped"
        raise ArchiveError(f"{entry.path} is out of place for a {scope} type")
    obj = _load(entry.path, data, limits.max_nodes)
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or not isinstance(metadata, dict):
        raise ArchiveError(f"{entry.path} does not hold an object with metadata")
    if obj.get("apiVersion") != rtype.api_version or obj.get("kind") != rtype.kind:
        raise ArchiveError(f"{entry.path} holds an object of another type than its folder's")
    # The writer takes an empty namespace for none, as the API server does.
    if metadata.get("name") != entry.name or (metadata.get("namespace") or None) != entry.namespace:
        raise ArchiveError(f"{entry.path} holds an object named otherwise than its path")
    return obj


def _field(document: dict[str, Any], key: str, kind: type[_T], where: str) -> _T:
    value = document.get(key)
    if not isinstance(value, kind):
        raise ArchiveError(f"{where}: {key} is missing or not a {kind.__name__}")
    return value


_NODE_EVENTS = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)


def _load(path: str, data: bytes, max_nodes: int) -> Any:
    """One YAML document of plain data: no alias of any kind, at most ``max_nodes`` nodes.

    A streaming pass over the parser's events comes first, in constant memory, so
    neither an alias bomb nor a file of millions of tiny nodes is ever built. It
    is needed only when the file could hold either: an alias needs an anchor
    (``&``), and a node takes at least one byte.
    """
    try:
        nodes = 0
        suspect = b"&" in data or len(data) > max_nodes
        for event in yaml.parse(data, Loader=yaml.CSafeLoader) if suspect else ():
            if isinstance(event, yaml.AliasEvent):
                raise ArchiveError(f"{path} repeats a value (a YAML alias)")
            if isinstance(event, _NODE_EVENTS):
                nodes += 1
                if nodes > max_nodes:
                    raise ArchiveError(f"{path} has more than {max_nodes} YAML nodes")
        document = yaml.load(data, Loader=yaml.CSafeLoader)
    except (yaml.YAMLError, ValueError) as error:
        if isinstance(error, ArchiveError):
            raise
        # The causes quote the file; a bad date or a huge integer is a ValueError.
        raise ArchiveError(f"{path} is not valid YAML") from None
    problem = _foreign(document)
    if problem is not None:
        raise ArchiveError(f"{path} {problem}")
    return document


def _dump(document: dict[str, Any], path: str) -> bytes:
    problem = _foreign(document)
    if problem is not None:
        raise ArchiveError(f"{path} {problem}")
    text: str = yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)
    return text.encode()


def _foreign(document: object) -> str | None:
    """What in a document JSON cannot carry, or None if nothing.

    A YAML alias loads as one container in two places; refusing them keeps a small
    file from growing exponentially once the object is serialised to be applied.
    """
    seen: set[int] = set()
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, dict | list):
            if id(value) in seen:
                return "repeats a value (a YAML alias)"
            seen.add(id(value))
        if isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, dict):
            if not all(type(key) is str for key in value):
                return "has a key that is not a string"
            pending.extend(value.values())
        # type(), not isinstance(): the safe dumper represents no subclass, not even of str.
        elif type(value) not in _SCALARS:
            return f"holds a {type(value).__name__}, which JSON cannot carry"
    return None


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item) for item in value]
    return value


def _show(value: object) -> str:
    """A name for a message: quoted, escaped and cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."
