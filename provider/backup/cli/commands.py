"""``controlplane-backup``: backups of a control plane from a terminal.

For a platform engineer, like ``velero`` or ``up controlplane migration``, with
the controllers' own code: ``export`` writes the archive a Backup writes
(``source.export.write_archive``), ``verify`` and ``describe`` check it as a restore
does (``archive.verify`` with ``source.export.restorable`` and the same ``Limits``),
and ``restore`` applies it as the provider does (``restore.restorer.apply_archive``),
or with ``--dry-run`` shows what it would create, change or leave unchanged
(``restore.dryrun``). ``restore`` first holds the archive's Crossplane version
against the one the control plane reports (``restore.restorer.target_compatibility``)
and refuses an older minor unless ``--force``. An archive is a local file or
``s3://bucket/key``, reached through ``storage.s3`` with the pod-identity chain
the controllers use (the standard AWS environment, then ``--role-arn``).

The kubeconfig is the engineer's own and trusted, as ``--kubeconfig`` is for
the controllers. Errors are one line naming what failed (a bad flag: a usage
error naming it); a Secret's values are never printed.

``ls`` lists a namespace's Backups or the archives under a prefix
(``listing``); ``--verify`` reads each archive as ``verify`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from provider.backup.cli import listing
from provider.backup.cli.progress import Progress
from provider.backup.controllers.backups import BACKUPS
from provider.backup.format import archive, inventory
from provider.backup.restore import verification
from provider.backup.restore.dryrun import DryRun
from provider.backup.restore.restorer import RestoreError, apply_archive, target_compatibility
from provider.backup.source.export import estimate, restorable, write_archive
from provider.backup.storage.s3 import AssumeRoleWith, StorageError, StorageSpec, Store
from provider.kube import Cluster, KubeError

COMMAND = "controlplane-backup"
SESSION_NAME = "controlplane-backup-cli"
S3_SCHEME = "s3://"
ARCHIVE_SUFFIX = ".tar.gz"
ARCHIVE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
# The limits the controllers hold an archive to.
LIMITS = archive.Limits()

_T = TypeVar("_T")


@dataclass(frozen=True)
class S3Location:
    """An object, or a prefix for one, in a bucket."""

    bucket: str
    key: str

    def __str__(self) -> str:
        """The ``s3://`` URL."""
        return f"{S3_SCHEME}{self.bucket}/{self.key}"


class S3Url(click.ParamType[S3Location]):
    """``s3://bucket/key``; ``prefix`` allows a key that is only a prefix (or none)."""

    name = "s3://bucket/key"

    def __init__(self, *, prefix: bool = False) -> None:
        """A URL of an object, or of a prefix when ``prefix``."""
        self.prefix = prefix

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> S3Location:
        """The bucket and key; a usage error naming the flag, with an example, when bad."""
        if isinstance(value, S3Location):
            return value
        text = str(value)
        bucket, _, key = text.removeprefix(S3_SCHEME).partition("/")
        example = (
            "s3://bucket/team-a/myctp/" if self.prefix else "s3://bucket/team-a/myctp/x.tar.gz"
        )
        if not text.startswith(S3_SCHEME) or not bucket:
            self.fail(f"{text!r} is not an s3://bucket/... URL; e.g. {example}", param, ctx)
        if not self.prefix and (not key or key.endswith("/")):
            self.fail(f"{text!r} names no object; e.g. {example}", param, ctx)
        return S3Location(bucket, key)


class ArchiveSource(click.ParamType[S3Location | str]):
    """An archive: ``s3://bucket/key``, or a file that exists."""

    name = "FILE|s3://BUCKET/KEY"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> S3Location | str:
        """The S3 object, or the file's path; a usage error when it is neither."""
        if isinstance(value, S3Location):
            return value
        text = str(value)
        if text.startswith(S3_SCHEME):
            return S3Url().convert(text, param, ctx)
        return str(click.Path(exists=True, dir_okay=False).convert(text, param, ctx))


@dataclass(frozen=True)
class StorageOptions:
    """How to reach S3, as a Backup's ``spec.storage`` says it (bucket and key aside)."""

    region: str
    endpoint: str
    role_arn: str
    external_id: str
    assume_role_with: str = AssumeRoleWith.ASSUME_ROLE

    def store(self, bucket: str) -> Store:
        """A store for ``bucket`` through the controllers' credential chain."""
        spec = StorageSpec(
            bucket=bucket,
            region=self.region,
            role_arn=self.role_arn,
            endpoint=self.endpoint,
            external_id=self.external_id,
            assume_role_with=self.assume_role_with,
        )
        return Store.connect(spec, session_name=SESSION_NAME)


Command = Callable[..., None]


def _storage_flags(command: Command) -> Command:
    flags = [
        click.option("--region", default="", help="The bucket's region (default: AWS_REGION)."),
        click.option(
            "--endpoint",
            default="",
            help="An S3-compatible endpoint URL (default: AWS_ENDPOINT_URL_S3, AWS's own).",
        ),
        click.option(
            "--role-arn",
            default="",
            help="A role to assume (sts:AssumeRole) from your own AWS identity.",
        ),
        click.option(
            "--external-id",
            default="",
            help="The ExternalId the role's trust policy asks for (a team role's: its namespace).",
        ),
        click.option(
            "--assume-role-with",
            type=click.Choice([mode.value for mode in AssumeRoleWith]),
            default=AssumeRoleWith.ASSUME_ROLE.value,
            show_default=True,
            help="How to get into --role-arn, as a Backup's storage.assumeRoleWith says: "
            "AssumeRole from your own identity, or WebIdentity with the token in "
            "AWS_WEB_IDENTITY_TOKEN_FILE.",
        ),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


def _storage(flags: dict[str, Any]) -> StorageOptions:
    return StorageOptions(
        region=flags.pop("region"),
        endpoint=flags.pop("endpoint"),
        role_arn=flags.pop("role_arn"),
        external_id=flags.pop("external_id"),
        assume_role_with=flags.pop("assume_role_with"),
    )


KUBECONFIG = click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    show_envvar=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The control plane's kubeconfig (yours: its exec plugins and files are used).",
)
QUIET = click.option("-q", "--quiet", is_flag=True, help="No progress on standard error.")


def _run(work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work``; what fails is one line on standard error and exit code 1."""
    try:
        return asyncio.run(work)
    except (StorageError, KubeError, RestoreError, archive.ArchiveError) as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        what = error.strerror or type(error).__name__
        raise click.ClickException(
            f"{what}: {error.filename}" if error.filename else what
        ) from None
    except click.ClickException:
        raise
    except Exception as error:  # noqa: BLE001 (one line, never a traceback, never a value)
        raise click.ClickException(f"unexpected error ({type(error).__name__})") from None


@click.group(COMMAND)
def main() -> None:
    """Export, verify, describe and restore control plane backups."""


# Reading an archive.


@dataclass(frozen=True)
class Verified:
    """An archive that passed every check a restore makes, open for reading."""

    file: IO[bytes]
    manifest: archive.Manifest
    sha256: str
    size: int


@contextlib.contextmanager
def _opened(source: S3Location | str, storage: StorageOptions) -> Iterator[IO[bytes]]:
    """The archive at ``source``, from its start, no larger than a restore takes."""
    if isinstance(source, S3Location):
        location = source
        with tempfile.TemporaryFile() as file:
            storage.store(location.bucket).download(
                location.key, file, limit=LIMITS.max_archive_bytes
            )
            file.seek(0)
            yield file
        return
    with Path(source).open("rb") as file:
        if os.fstat(file.fileno()).st_size > LIMITS.max_archive_bytes:
            msg = f"{source} is larger than the limit of {LIMITS.max_archive_bytes} bytes"
            raise archive.ArchiveError(msg)
        yield file


def _verify(file: IO[bytes]) -> Verified:
    """Check ``file`` as a restore does; ArchiveError if it would be refused."""
    digest = hashlib.file_digest(file, "sha256").hexdigest()  # type: ignore[arg-type]
    size = file.tell()
    file.seek(0)
    manifest = archive.verify(file, limits=LIMITS, admit=restorable)
    return Verified(file, manifest, digest, size)


SOURCE = click.argument("source", type=ArchiveSource())
OUTPUT_FORMAT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="The format.",
)


@main.command()
@SOURCE
@click.option(
    "--restore",
    "restore_into",
    type=click.Path(exists=True, dir_okay=False),
    help="Also restore the archive into the control plane of this kubeconfig (one you name "
    "for it: it is written to) and check it holds what the archive promised.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=verification.SETTLE_TIMEOUT_SECONDS,
    show_default=True,
    help="With --restore: seconds to wait for each CRD the restore needs, and then for the "
    "control plane to install its packages and serve its CRDs, before what fails is reported.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --restore: restore although the control plane runs an older Crossplane minor.",
)
@QUIET
@_storage_flags
def verify(
    source: S3Location | str,
    restore_into: str | None,
    timeout: float,
    *,
    force: bool,
    quiet: bool,
    **flags: Any,
) -> None:
    """Check an archive as a restore would: checksums, paths, layout and limits.

    With --restore KUBECONFIG, restore it into that control plane too and check
    it there: every object of the archive present, CRDs Established, packages
    Installed and Healthy, managed resources paused exactly as in the archive.

    Exit code 0 when a restore would take it (and, with --restore, the control
    plane holds it), 1 when not, with what failed.
    """
    storage = _storage(flags)

    async def check() -> tuple[Verified, str] | str:
        try:
            with _opened(source, storage) as file:
                verified = _verify(file)
                if restore_into is None:
                    return verified, ""
                with verified.manifest:
                    return verified, await _restore_and_check(
                        verified, restore_into, timeout=timeout, force=force, quiet=quiet
                    )
        except archive.ArchiveError as error:
            return str(error)

    outcome = _run(check())
    if isinstance(outcome, str):
        click.echo(f"{source}: refused: {outcome}", err=True)
        sys.exit(1)
    verified, restored = outcome
    with verified.manifest as manifest:
        click.echo(
            f"{source}: OK: {manifest.objects} objects of {len(manifest.types)} types from "
            f"{inventory.printable(manifest.instance)}, exported at "
            f"{manifest.exported_at.isoformat().replace('+00:00', 'Z')}; "
            f"{verified.size} bytes, sha256 {verified.sha256}"
        )
    if restored:
        click.echo(restored)


async def _restore_and_check(
    verified: Verified, kubeconfig: str, *, timeout: float, force: bool, quiet: bool
) -> str:
    """Restore into ``kubeconfig``'s control plane and check it; exit 1 with each failure."""
    target = await Cluster.from_environment(kubeconfig)
    try:
        await _compatible(target, verified, force=force)
        progress = None if quiet else Progress(sys.stderr, "restore", verified.manifest.objects)
        found = await verification.restore_and_check(
            target,
            verified.file,
            verified.manifest,
            limits=LIMITS,
            timeout=timeout,
            crd_timeout=timeout,
            progress=progress.advance if progress is not None else None,
        )
        if progress is not None:
            progress.finish()
        if not found.passed:
            click.echo(f"restore check failed in {target.server}:", err=True)
            for problem in found.problems():
                click.echo(f"  {problem}", err=True)
            sys.exit(1)
        return f"restored into {target.server} and checked: {found.message()}"
    finally:
        await target.close()


async def _compatible(target: Cluster, verified: Verified, *, force: bool) -> None:
    """Refuse a target on an older Crossplane minor unless ``force``; say what was found."""
    found = await target_compatibility(target, verified.manifest.source.crossplane)
    if not found.allowed and not force:
        msg = f"refused: {found.message} (--force restores anyway)"
        raise click.ClickException(msg)
    if found.message:
        refused = "" if found.allowed else "a restore without --force is refused: "
        click.echo(f"crossplane version: {refused}{found.message}", err=True)


@main.command()
@SOURCE
@OUTPUT_FORMAT
@_storage_flags
def describe(source: S3Location | str, output: str, **flags: Any) -> None:
    """Show what an archive holds, by kind and namespace (verified first)."""
    storage = _storage(flags)

    async def read() -> archive.Manifest:
        with _opened(source, storage) as file:
            return _verify(file).manifest

    with _run(read()) as manifest:
        if output == "json":
            click.echo(json.dumps(inventory.document(manifest), indent=2))
        else:
            click.echo(inventory.table(manifest), nl=False)


# Listing backups.


def _checked(entry: listing.Entry, storage: StorageOptions) -> listing.Entry:
    """The entry with what reading its archive found: verified, or why not."""
    bucket, _, key = entry.location.removeprefix(S3_SCHEME).partition("/")
    try:
        with _opened(S3Location(bucket, key), storage) as file:
            verified = _verify(file)
            with verified.manifest as manifest:
                found = replace(
                    entry,
                    objects=manifest.objects,
                    instance=entry.instance or inventory.printable(manifest.instance),
                    sha256=verified.sha256,
                    kubernetes=manifest.source.kubernetes,
                    crossplane=manifest.source.crossplane,
                    verified=True,
                )
    except (archive.ArchiveError, StorageError) as error:
        return replace(entry, verified=False, problem=str(error))
    if entry.sha256 and entry.sha256 != verified.sha256:
        return replace(found, verified=False, problem="its sha256 is not the Backup's")
    return found


@main.command("ls")
@click.argument("prefix", required=False, type=S3Url(prefix=True))
@click.option(
    "-n",
    "--namespace",
    default="",
    help="List this namespace's Backups (from the API server of --kubeconfig) instead.",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    show_envvar=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The kubeconfig of the cluster holding the Backups (with --namespace).",
)
@click.option(
    "--verify",
    "check",
    is_flag=True,
    help="Download each archive and check it as a restore would (reads every archive in full).",
)
@OUTPUT_FORMAT
@_storage_flags
def ls(
    prefix: S3Location | None,
    namespace: str,
    kubeconfig: str | None,
    *,
    check: bool,
    output: str,
    **flags: Any,
) -> None:
    """List backups, newest first: a namespace's Backups, or the archives under s3://bucket/prefix/.

    Sizes and object counts come from the Backups' status, or sizes from the
    bucket's listing; --verify reads each archive (the whole of it) for its
    object count and whether a restore would take it. The archives are read with
    your AWS identity and the storage flags, never with a Backup's endpoint.
    """
    storage = _storage(flags)
    if (prefix is None) == (not namespace):
        raise click.UsageError("pass exactly one of s3://bucket/prefix/ and -n/--namespace")
    if namespace and kubeconfig is None:
        raise click.UsageError("-n/--namespace needs --kubeconfig (or KUBECONFIG)")

    async def entries() -> list[listing.Entry]:
        if prefix is not None:
            stored = storage.store(prefix.bucket).objects_under(
                prefix.key, suffix=listing.ARCHIVE_SUFFIX
            )
            found = [listing.from_object(prefix.bucket, item) for item in stored]
        else:
            assert kubeconfig is not None  # checked above
            cluster = await Cluster.from_environment(kubeconfig)
            try:
                backups, _ = await cluster.list(BACKUPS, namespace)
            finally:
                await cluster.close()
            found = [listing.from_backup(backup) for backup in backups]
        found = listing.newest_first(found)
        if check:
            found = [_checked(entry, storage) if entry.location else entry for entry in found]
        return found

    found = _run(entries())
    if output == "json":
        click.echo(json.dumps(listing.document(found), indent=2))
    else:
        click.echo(listing.table(found), nl=False)


# Writing an archive.


def _archive_name(value: str, param: click.Parameter, ctx: click.Context) -> str:
    """A name as a Backup's: lower-case letters, digits, '-' and '.', so one key, no folders."""
    if value and not ARCHIVE_NAME.fullmatch(value):
        msg = (
            f"{value!r} is not a name of lower-case letters, digits, '-' and '.'; e.g. --name=v1-4"
        )
        raise click.BadParameter(msg, ctx, param)
    return value


def _key(location: S3Location, name: str) -> str:
    """A key ending in ``.tar.gz`` is the object; anything else is a prefix for ``name``."""
    if location.key.endswith(ARCHIVE_SUFFIX):
        return location.key
    prefix = location.key if not location.key or location.key.endswith("/") else f"{location.key}/"
    return f"{prefix}{name}{ARCHIVE_SUFFIX}"


@main.command()
@KUBECONFIG
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the archive to this file (mode 0600: it holds Secrets).",
)
@click.option(
    "--s3",
    "s3",
    type=S3Url(prefix=True),
    help="Upload to s3://bucket/prefix/ (as <prefix><name>.tar.gz) or s3://bucket/key.tar.gz.",
)
@click.option(
    "--name",
    default="",
    callback=lambda ctx, param, value: _archive_name(value, param, ctx),
    help="The archive's name under an --s3 prefix (default: export-<UTC yyyymmddhhmmss>).",
)
@click.option(
    "--instance",
    default="",
    help="The instance export.yaml names (default: the API server's URL).",
)
@click.option(
    "--exclude-resource",
    "excluded",
    multiple=True,
    help="A type to leave out, as resource.group (resource for the core group); repeatable.",
)
@click.option("--overwrite", is_flag=True, help="Replace an archive already there.")
@QUIET
@_storage_flags
def export(
    kubeconfig: str,
    output: str | None,
    s3: S3Location | None,
    *,
    name: str,
    instance: str,
    excluded: tuple[str, ...],
    overwrite: bool,
    quiet: bool,
    **flags: Any,
) -> None:
    """Export a control plane into an archive, as a Backup does, without a Backup."""
    storage = _storage(flags)
    if (output is None) == (s3 is None):
        msg = "pass exactly one of -o/--output FILE and --s3 s3://bucket/prefix/"
        raise click.UsageError(msg)
    if name and s3 is None:
        raise click.UsageError("--name names an archive under an --s3 prefix; -o names a file")
    exported_at = datetime.now(UTC)
    name = name or f"export-{exported_at.strftime('%Y%m%d%H%M%S')}"

    async def run() -> tuple[str, archive.Summary]:
        cluster = await Cluster.from_environment(kubeconfig)
        try:
            progress = (
                None if quiet else Progress(sys.stderr, "export", await estimate(cluster, excluded))
            )

            async def write(sink: Any) -> archive.Summary:
                summary = await write_archive(
                    cluster,
                    sink,
                    instance=instance or cluster.server,
                    exported_at=exported_at,
                    excluded=excluded,
                    progress=progress.advance if progress is not None else None,
                )
                if progress is not None:
                    progress.finish()
                return summary

            if s3 is not None:
                key = _key(s3, name)
                store = storage.store(s3.bucket)
                if not overwrite and store.exists(key):
                    raise _exists(f"s3://{s3.bucket}/{key}")
                with store.writer(key) as sink:
                    return f"s3://{s3.bucket}/{key}", await write(sink)
            assert output is not None  # exactly one of the two, checked above
            with _new_file(output, overwrite=overwrite) as file:
                return output, await write(file)
        finally:
            await cluster.close()

    where, summary = _run(run())
    click.echo(
        f"wrote {where}: {summary.objects} objects, {summary.size} bytes, sha256 {summary.sha256}"
    )


def _exists(where: str) -> click.ClickException:
    return click.ClickException(f"{where} already exists; pass --overwrite to replace it")


@contextlib.contextmanager
def _new_file(path: str, *, overwrite: bool) -> Iterator[IO[bytes]]:
    """A private file that appears at ``path`` only once complete; never half written."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise _exists(path)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            yield file
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


# Restoring.


def _report(progress: Progress | None) -> Callable[[str], None]:
    """Print a line of the plan on standard output, clear of the progress line."""

    def echo(line: str) -> None:
        if progress is not None:
            progress.clear()
        click.echo(line)

    return echo


async def _dry_run(
    target: Cluster, verified: Verified, progress: Progress | None
) -> dict[str, int]:
    echo = _report(progress)
    counts = {"create": 0, "change": 0, "unchanged": 0, "skip": 0}
    run = DryRun(
        target,
        verified.file,
        verified.manifest,
        limits=LIMITS,
        progress=progress.advance if progress is not None else None,
    )
    async for planned in run.changes():
        counts[planned.action] += 1
        where = f"{planned.namespace}/{planned.name}" if planned.namespace else planned.name
        note = f" ({planned.note})" if planned.note else ""
        echo(f"{planned.action:<9} {inventory.printable(planned.kind)} {where}{note}")
        if planned.diff:
            echo(planned.diff.rstrip("\n"))
    return counts


@main.command()
@SOURCE
@KUBECONFIG
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show what would be created, changed (a diff) or left unchanged; change nothing.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Restore although the control plane runs an older Crossplane minor than the archive's.",
)
@QUIET
@_storage_flags
def restore(
    source: S3Location | str,
    kubeconfig: str,
    *,
    dry_run: bool,
    force: bool,
    quiet: bool,
    **flags: Any,
) -> None:
    """Restore an archive into a control plane, as the provider restores a Backup."""
    storage = _storage(flags)

    async def run() -> str:
        with _opened(source, storage) as file:
            verified = _verify(file)
            with verified.manifest:
                return await _restore_verified(
                    verified, kubeconfig, dry_run=dry_run, force=force, quiet=quiet
                )

    click.echo(_run(run()))


async def _restore_verified(
    verified: Verified, kubeconfig: str, *, dry_run: bool, force: bool, quiet: bool
) -> str:
    """Restore (or dry-run) a verified archive; what was done, in one line."""
    target = await Cluster.from_environment(kubeconfig)
    try:
        await _compatible(target, verified, force=force or dry_run)
        action = "dry run" if dry_run else "restore"
        total = verified.manifest.objects
        progress = None if quiet else Progress(sys.stderr, action, total)
        if dry_run:
            counts = await _dry_run(target, verified, progress)
            done = (
                f"dry run: {counts['create']} to create, {counts['change']} to change, "
                f"{counts['unchanged']} unchanged, {counts['skip']} skipped (Crossplane makes "
                f"them again); nothing was changed in {target.server}"
            )
        else:
            outcome = await apply_archive(
                target,
                verified.file,
                verified.manifest,
                limits=LIMITS,
                progress=progress.advance if progress is not None else None,
            )
            done = f"restored {outcome.objects} objects into {target.server}"
        if progress is not None:
            progress.finish()
        return done
    finally:
        await target.close()
