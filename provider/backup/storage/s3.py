"""S3 for backups: the one module that imports boto3 and botocore.

``Store.connect`` builds an S3 client for the storage's role, reached as the
storage's ``assumeRoleWith`` says: ``AssumeRole`` chains from the pod's own
identity (boto3's default credential chain: environment, web identity, EKS Pod
Identity) with the namespace as ExternalId; ``WebIdentity`` calls
``sts:AssumeRoleWithWebIdentity`` with the pod's projected service account token
(or one the caller minted for the account the role trusts: a restore's) straight
into the role. Either way the role's credentials are refreshed before
they expire. ``Store.writer`` hands out a ``MultipartWriter``: a writable
binary stream (what ``tarfile.open(fileobj=..., mode="w|gz")`` needs) that holds
at most one part in memory and uploads the parts as they fill.

Every botocore error leaves this module as a ``StorageError`` whose message names
the action, the bucket and key, and the AWS error code or the endpoint that could
not be reached: never a credential, so it can go into events and conditions.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, StrEnum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self
from urllib.parse import urlsplit

import boto3  # type: ignore[import-untyped]
from botocore import UNSIGNED  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.credentials import (  # type: ignore[import-untyped]
    CredentialProvider,
    CredentialResolver,
    RefreshableCredentials,
)
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    HTTPClientError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.session import Session as BotocoreSession  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
# S3's limits on a multipart upload: every part but the last at least 5 MiB, none
# above 5 GiB, at most 10,000 of them.
MIN_PART_SIZE: Final = 5 * MIB
MAX_PART_SIZE: Final = 5 * 1024 * MIB
MAX_PARTS: Final = 10_000

# Bounded: a dead endpoint fails an attempt within seconds rather than minutes,
# and the controller retries the backup as a whole.
_CLIENT_CONFIG: Final = Config(
    retries={"mode": "standard", "max_attempts": 4},
    connect_timeout=10,
    read_timeout=60,
)
# An endpoint that is not AWS's may not resolve <bucket>.<host> names. botocore
# already addresses any endpoint it is given, or finds in AWS_ENDPOINT_URL_S3 or
# AWS_ENDPOINT_URL, path-style unless told "virtual"; this pins it for ours.
_PATH_STYLE: Final = Config(s3={"addressing_style": "path"})
_DOWNLOAD_CHUNK: Final = 1 * MIB
# Per-part checksums the server verifies on upload and on completion.
_CHECKSUM: Final = "CRC32"
# Waits between abort attempts, after botocore's own retries of each: an upload
# left behind holds its parts (and their cost) until a lifecycle rule ends it.
ABORT_RETRY_DELAYS: Final = (1.0, 5.0)


# Where EKS (and the AWS SDKs) find the pod's projected service account token.
WEB_IDENTITY_TOKEN_FILE: Final = "AWS_WEB_IDENTITY_TOKEN_FILE"  # noqa: S105 (a variable name)
# The audience of the tokens EKS projects for IRSA, which an IAM OIDC provider's
# ``aud`` condition names.
STS_AUDIENCE: Final = "sts.amazonaws.com"


class StorageError(Exception):
    """An S3 operation failed; the message is safe to show (it holds no credential)."""


class AssumeRoleWith(StrEnum):
    """How the writer gets into the storage's role (``storage.assumeRoleWith``)."""

    ASSUME_ROLE = "AssumeRole"
    WEB_IDENTITY = "WebIdentity"


@dataclass(frozen=True)
class StorageSpec:
    """Where backups go.

    Attributes:
        bucket: The bucket.
        region: The bucket's region; empty for boto3's own resolution (AWS_REGION, ...).
        role_arn: The role to write with; empty to use the pod's own identity directly
            (only with ``AssumeRole``).
        endpoint: An S3-compatible endpoint URL; empty for boto3's own resolution,
            where AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL work too.
        external_id: The ExternalId of an ``AssumeRole`` (the Backup's namespace:
            each team's role trusts only its own); empty for none.
        assume_role_with: ``AssumeRole`` (chain from the pod's own identity) or
            ``WebIdentity`` (the pod's projected token straight into the role); any
            other value is refused at ``Store.connect``.
        web_identity_token: With ``WebIdentity``, the token to use instead of the
            one in AWS_WEB_IDENTITY_TOKEN_FILE (a token a restore minted for the
            account the role trusts); empty for the file. Never in the repr.
    """

    bucket: str
    region: str = ""
    role_arn: str = ""
    endpoint: str = ""
    external_id: str = ""
    assume_role_with: str = AssumeRoleWith.ASSUME_ROLE
    web_identity_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class StoredObject:
    """An object in a bucket, as a listing shows it."""

    key: str
    size: int
    last_modified: datetime


class Store:
    """One bucket, reached with one S3 client. Use ``Store.connect`` to make one."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket
        self._endpoint = str(client.meta.endpoint_url)

    @classmethod
    def connect(cls, spec: StorageSpec, *, session_name: str = "controlplane-backup") -> Store:
        """Make an S3 client for ``spec``, signing as its role.

        With ``AssumeRole`` the pod's identity is boto3's default credential chain
        (environment, web identity, EKS Pod Identity, instance metadata, ...) and,
        with ``spec.role_arn``, an STS client (its endpoint from AWS_ENDPOINT_URL_STS
        or AWS_ENDPOINT_URL when set) assumes the role with ``spec.external_id``.
        With ``WebIdentity`` an unsigned STS client calls AssumeRoleWithWebIdentity
        into ``spec.role_arn`` (never the pod's AWS_ROLE_ARN) with
        ``spec.web_identity_token`` when given (at every refresh too, so it must
        outlive the store's use), else with the token in AWS_WEB_IDENTITY_TOKEN_FILE,
        reading the file again at every refresh (the kubelet rotates it). Either
        way the role is assumed at once, so a role that cannot be assumed fails
        here, and again before its credentials expire.

        Args:
            spec: The bucket, region, role and endpoint.
            session_name: The role session name, seen in the role's CloudTrail events.

        Returns:
            The store.

        Raises:
            StorageError: The role cannot be assumed, the token cannot be read, or the
                endpoint, region or ``assume_role_with`` is invalid.
        """
        method = _method(spec)
        action = _connect_action(spec)
        endpoint = spec.endpoint or None
        config = _CLIENT_CONFIG.merge(_PATH_STYLE) if endpoint else _CLIENT_CONFIG
        with _translated(action, endpoint or "the default endpoint"):
            try:
                session = boto3.session.Session(region_name=spec.region or None)
                if method is AssumeRoleWith.WEB_IDENTITY:
                    token = _token_source(spec.web_identity_token, action)
                    session = _role_session(
                        session, _web_identity(session, spec.role_arn, session_name, token)
                    )
                elif spec.role_arn:
                    session = _role_session(
                        session,
                        _assume_role(session, spec.role_arn, session_name, spec.external_id),
                    )
                client = session.client("s3", endpoint_url=endpoint, config=config)
            except ValueError as error:
                # botocore's own check of an endpoint URL, before any request.
                raise StorageError(f"{action} failed: {error}") from error
        return cls(client, spec.bucket)

    def writer(
        self, key: str, *, part_size: int = 8 * MIB, sleep: Callable[[float], None] = time.sleep
    ) -> MultipartWriter:
        """A stream that uploads what is written to ``key``, one part at a time.

        Args:
            key: The object's key.
            part_size: Bytes per part, between 5 MiB and 5 GiB; about the memory the
                writer holds. At most 10,000 parts fit in one object.
            sleep: How the writer waits between abort attempts.

        Returns:
            The writer; nothing is sent before the first part fills or it is closed.
        """
        return MultipartWriter(self._client, self._bucket, key, part_size=part_size, sleep=sleep)

    def download(self, key: str, sink: SupportsWrite[bytes], *, limit: int | None = None) -> int:
        """Stream the object at ``key`` into ``sink``.

        Args:
            key: The object's key.
            sink: Where the bytes go, in chunks of at most 1 MiB.
            limit: The most bytes to take (a Backup's recorded size); a larger
                object is refused before, or as soon as, it passes the limit.

        Returns:
            The number of bytes written to ``sink``.

        Raises:
            StorageError: The object cannot be read (NoSuchKey for a missing one), or
                is larger than ``limit``.
        """
        total = 0
        action = f"download {self._url(key)}"
        with _translated(action, self._endpoint):
            answer = self._client.get_object(Bucket=self._bucket, Key=key)
            body = answer["Body"]
            try:
                if limit is not None and int(answer.get("ContentLength") or 0) > limit:
                    raise StorageError(f"{action} refused: larger than its recorded size")
                # The body checks its length at the end: a cut stream raises.
                for chunk in body.iter_chunks(_DOWNLOAD_CHUNK):
                    total += len(chunk)
                    if limit is not None and total > limit:
                        raise StorageError(f"{action} refused: larger than its recorded size")
                    sink.write(chunk)
            finally:
                body.close()
        return total

    def delete(self, key: str) -> None:
        """Delete the object at ``key``; one that is already gone is fine.

        Args:
            key: The object's key.

        Raises:
            StorageError: The object cannot be deleted (NoSuchBucket, AccessDenied, ...).
        """
        with _translated(f"delete {self._url(key)}", self._endpoint):
            try:
                self._client.delete_object(Bucket=self._bucket, Key=key)
            except ClientError as error:
                # AWS answers 204 either way; some S3-compatible stores say NoSuchKey.
                if _error_code(error) != "NoSuchKey":
                    raise

    def objects_under(self, prefix: str, *, suffix: str = "") -> list[StoredObject]:
        """The objects whose keys start with ``prefix`` (and end with ``suffix``), a page at a time.

        Args:
            prefix: The key prefix; empty lists the whole bucket.
            suffix: Only keys ending so (such as ``.tar.gz``).

        Returns:
            Key, size and last-modified time of each, in key order.

        Raises:
            StorageError: The bucket is missing or cannot be listed.
        """
        found: list[StoredObject] = []
        with _translated(f"list {self._url(prefix)}", self._endpoint):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=prefix
            )
            for page in pages:
                found.extend(
                    StoredObject(str(item["Key"]), int(item["Size"]), item["LastModified"])
                    for item in page.get("Contents") or []
                    if str(item["Key"]).endswith(suffix)
                )
        return found

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``.

        Args:
            key: The object's key.

        Returns:
            True if it is there, False if not.

        Raises:
            StorageError: The bucket is missing or cannot be read.
        """
        with _translated(f"check {self._url(key)}", self._endpoint):
            try:
                self._client.head_object(Bucket=self._bucket, Key=key)
            except ClientError as error:
                if _http_status(error) != 404:
                    raise
                # A HEAD answer has no body to tell a missing key from a missing bucket.
                self._client.head_bucket(Bucket=self._bucket)
                return False
        return True

    def _url(self, key: str) -> str:
        return f"s3://{self._bucket}/{key}"


class _State(Enum):
    OPEN = "open"
    FAILED = "failed"
    CLOSED = "closed"
    ABORTED = "aborted"


class MultipartWriter:
    """A writable binary stream onto one S3 object, uploaded in parts as it is written.

    The multipart upload starts when the first part fills; an object smaller than a
    part goes up in one PutObject on ``close``. At most one part is held in memory.
    As a context manager it closes (completes the object) on a normal exit and
    aborts on an exception. After a failed request it refuses further writes, so a
    gap can never be completed into an object: ``abort`` is what is left to do.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        *,
        part_size: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise ValueError(
                f"part_size must be between {MIN_PART_SIZE} and {MAX_PART_SIZE}, not {part_size}"
            )
        self._client = client
        self._bucket = bucket
        self._key = key
        self._part_size = part_size
        self._endpoint = str(client.meta.endpoint_url)
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._total = 0
        self._state = _State.OPEN
        self._sleep = sleep

    def write(self, data: bytes) -> int:
        """Buffer ``data``, uploading each part as it fills.

        Args:
            data: The next bytes of the object.

        Returns:
            ``len(data)``: all of it is taken.

        Raises:
            StorageError: A part could not be uploaded; the writer is then failed.
            ValueError: The writer is closed, aborted or failed.
        """
        self._require_open()
        view = memoryview(data)
        start = 0
        while start < len(view):
            end = start + self._part_size - len(self._buffer)
            self._buffer += view[start:end]
            start = end
            if len(self._buffer) == self._part_size:
                self._upload_part()
        self._total += len(view)
        return len(view)

    def close(self) -> int:
        """Upload what is buffered and complete the object.

        Closing again returns the same total.

        Returns:
            The object's size in bytes.

        Raises:
            StorageError: The object could not be completed; the writer is then failed.
            ValueError: The writer was aborted or has failed before.
        """
        if self._state is _State.CLOSED:
            return self._total
        self._require_open()
        if self._upload_id is None:
            self._call(self._client.put_object, Body=self._buffer)
        else:
            if self._buffer:
                self._upload_part()
            self._call(
                self._client.complete_multipart_upload,
                UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts},
            )
        self._buffer = bytearray()
        self._state = _State.CLOSED
        return self._total

    def abort(self) -> None:
        """Abort the multipart upload, dropping its parts; never raises.

        A no-op once closed or aborted. A failed abort request is tried again after
        each of ``ABORT_RETRY_DELAYS``; when every attempt fails it is logged and the
        next call tries again, and a bucket lifecycle rule for incomplete multipart
        uploads is the backstop.
        """
        if self._state is _State.CLOSED:
            return
        self._state = _State.ABORTED
        self._buffer = bytearray()
        if self._upload_id is None:
            return
        action = f"abort the upload to {self._url()}"
        for delay in (*ABORT_RETRY_DELAYS, None):
            try:
                with _translated(action, self._endpoint):
                    try:
                        self._client.abort_multipart_upload(
                            Bucket=self._bucket, Key=self._key, UploadId=self._upload_id
                        )
                    except ClientError as error:
                        if _error_code(error) != "NoSuchUpload":
                            raise
            except StorageError as error:
                # "object", not "key": the log redaction hides fields named like secrets.
                log.warning(
                    "multipart upload not aborted",
                    extra={
                        "fields": {
                            "bucket": self._bucket,
                            "object": self._key,
                            "error": str(error),
                            "retry": delay is not None,
                        }
                    },
                )
                if delay is None:
                    return
                self._sleep(delay)
                continue
            self._upload_id = None
            return

    def __enter__(self) -> Self:
        """Return the writer itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Abort on an exception, else close; a failed close aborts too."""
        if exc_type is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise

    def _require_open(self) -> None:
        if self._state is not _State.OPEN:
            raise ValueError(f"the writer to {self._url()} is {self._state.value}")

    def _upload_part(self) -> None:
        if len(self._parts) == MAX_PARTS:
            self._state = _State.FAILED
            raise StorageError(
                f"upload {self._url()} failed: more than {MAX_PARTS} parts of "
                f"{self._part_size} bytes; use larger parts"
            )
        if self._upload_id is None:
            created = self._call(self._client.create_multipart_upload, ChecksumAlgorithm=_CHECKSUM)
            self._upload_id = str(created["UploadId"])
        number = len(self._parts) + 1
        uploaded = self._call(
            self._client.upload_part,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=self._buffer,
            ChecksumAlgorithm=_CHECKSUM,
        )
        part = {"PartNumber": number, "ETag": uploaded["ETag"]}
        # An S3-compatible store may not do checksums; completing then needs none.
        if f"Checksum{_CHECKSUM}" in uploaded:
            part[f"Checksum{_CHECKSUM}"] = uploaded[f"Checksum{_CHECKSUM}"]
        self._parts.append(part)
        self._buffer = bytearray()

    def _call(self, operation: Callable[..., Any], **params: Any) -> Any:
        try:
            with _translated(f"upload {self._url()}", self._endpoint):
                return operation(Bucket=self._bucket, Key=self._key, **params)
        except StorageError:
            self._state = _State.FAILED
            raise

    def _url(self) -> str:
        return f"s3://{self._bucket}/{self._key}"


class _FixedCredentials(CredentialProvider):  # type: ignore[misc]
    """A credential chain of one link: credentials made beforehand."""

    METHOD = "assume-role"

    def __init__(self, credentials: Any) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Any:
        return self._credentials


Assume = Callable[[], dict[str, str]]


def _credentials(answer: Mapping[str, Any]) -> dict[str, str]:
    """An STS answer's credentials, as botocore's refreshable credentials take them."""
    return {
        "access_key": answer["AccessKeyId"],
        "secret_key": answer["SecretAccessKey"],
        "token": answer["SessionToken"],
        "expiry_time": answer["Expiration"].isoformat(),
    }


def _assume_role(base: Any, role_arn: str, session_name: str, external_id: str) -> Assume:
    """sts:AssumeRole into the role, signed with ``base``'s own identity.

    No session tags of ours: an EKS Pod Identity session's tags are transitive and
    go along by themselves (which is why such a role's trust allows sts:TagSession).
    """
    sts = base.client("sts", config=_CLIENT_CONFIG)
    bound = {"ExternalId": external_id} if external_id else {}

    def assume() -> dict[str, str]:
        answer = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name, **bound)
        return _credentials(answer["Credentials"])

    return assume


def _web_identity(base: Any, role_arn: str, session_name: str, token: Callable[[], str]) -> Assume:
    """sts:AssumeRoleWithWebIdentity into the role with the web identity ``token()``."""
    # Unsigned, as the call is: the pod's own credentials (the default chain would
    # itself assume AWS_ROLE_ARN with the same token) are neither needed nor used.
    sts = base.client("sts", config=_CLIENT_CONFIG.merge(Config(signature_version=UNSIGNED)))

    def assume() -> dict[str, str]:
        answer = sts.assume_role_with_web_identity(
            RoleArn=role_arn,
            RoleSessionName=session_name,
            WebIdentityToken=token(),
        )
        return _credentials(answer["Credentials"])

    return assume


def _token_source(given: str, action: str) -> Callable[[], str]:
    """Where each assumption takes its token from: ``given``, or else the projected file."""
    if given:
        return lambda: given
    return lambda: _read_token(action)


def _read_token(action: str) -> str:
    """The projected service account token, read afresh (the kubelet rotates it)."""
    path = os.environ.get(WEB_IDENTITY_TOKEN_FILE, "")
    if not path:
        raise StorageError(f"{action} failed: {WEB_IDENTITY_TOKEN_FILE} is not set")
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        # The message names the variable and the error, never the path or what it holds.
        raise StorageError(
            f"{action} failed: cannot read {WEB_IDENTITY_TOKEN_FILE} ({type(error).__name__})"
        ) from error
    if not token:
        raise StorageError(f"{action} failed: {WEB_IDENTITY_TOKEN_FILE} is empty")
    return token


def _role_session(base: Any, assume: Assume) -> Any:
    """A boto3 session signing with the role's credentials, assumed again before they expire."""
    credentials = RefreshableCredentials.create_from_metadata(
        metadata=assume(), refresh_using=assume, method=_FixedCredentials.METHOD
    )
    session = BotocoreSession()
    # botocore has no setter for a credentials object, but its credential chain is
    # a session component that a caller may replace.
    session.register_component(
        "credential_provider", CredentialResolver([_FixedCredentials(credentials)])
    )
    if base.region_name:
        session.set_config_variable("region", base.region_name)
    return boto3.session.Session(botocore_session=session)


def _method(spec: StorageSpec) -> AssumeRoleWith:
    """The spec's ``assume_role_with``, checked against what it needs."""
    try:
        method = AssumeRoleWith(spec.assume_role_with)
    except ValueError:
        raise StorageError(
            f"connect to s3://{spec.bucket} refused: storage.assumeRoleWith must be "
            f"{AssumeRoleWith.ASSUME_ROLE} or {AssumeRoleWith.WEB_IDENTITY}"
        ) from None
    if method is AssumeRoleWith.WEB_IDENTITY and not spec.role_arn:
        raise StorageError(
            f"connect to s3://{spec.bucket} refused: storage.roleArn is required "
            f"with assumeRoleWith {AssumeRoleWith.WEB_IDENTITY}"
        )
    return method


def _connect_action(spec: StorageSpec) -> str:
    if spec.assume_role_with == AssumeRoleWith.WEB_IDENTITY:
        return f"assume role {spec.role_arn} with web identity for s3://{spec.bucket}"
    if spec.role_arn:
        return f"assume role {spec.role_arn} for s3://{spec.bucket}"
    return f"connect to s3://{spec.bucket}"


@contextlib.contextmanager
def _translated(action: str, endpoint: str) -> Iterator[None]:
    """Turn botocore's errors raised inside into StorageErrors about ``action``."""
    try:
        yield
    except ClientError as error:
        raise StorageError(f"{action} failed: {_describe(error)}") from error
    except (BotoConnectionError, HTTPClientError) as error:
        raise StorageError(
            f"{action} failed: cannot reach {_reached(error, endpoint)} ({type(error).__name__})"
        ) from error
    except BotoCoreError as error:
        # botocore's own messages hold names and URLs, never credential values.
        raise StorageError(f"{action} failed: {error}") from error


def _error_code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code") or "")


def _http_status(error: Any) -> int | None:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _describe(error: Any) -> str:
    """The AWS error code, HTTP status and operation; not the server's message text."""
    code = _error_code(error)
    status = _http_status(error)
    if error.operation_name == "HeadBucket" and status == 404:
        code = "NoSuchBucket"
    elif not code or code.isdigit():
        # An answer to a HEAD request has no body, so no code: the status is all there is.
        code = http.client.responses.get(status or 0, "UnknownError").replace(" ", "")
    return f"{code} (HTTP {status}, {error.operation_name})"


def _reached(error: Any, fallback: str) -> str:
    """The scheme and host that could not be reached, without the request's path."""
    url = str(error.kwargs.get("endpoint_url") or "")
    parts = urlsplit(url)
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return fallback
