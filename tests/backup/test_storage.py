"""provider.backup.storage.s3 against a real S3 (SeaweedFS) and a real STS (moto).

Objects are checked by reading them back through the store, multipart uploads
left behind through SeaweedFS's filer, and which credentials signed which
request through IAM's last-used records in moto.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import random
import tarfile
import tracemalloc
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import pytest

from provider.backup.storage.s3 import ABORT_RETRY_DELAYS, MIB, StorageError, StorageSpec, Store
from sandbox.apiserver import free_port
from sandbox.s3 import Moto, SeaweedFS, use_credentials
from tests.servers import proxy
from tests.tokens import write_token

PART = 5 * MIB


@pytest.fixture
def bucket(seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket, with the gateway's key as the pod's identity."""
    seaweed.configure(monkeypatch)
    name = f"test-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(name)
    return name


@pytest.fixture
def store(seaweed: SeaweedFS, bucket: str) -> Store:
    return Store.connect(StorageSpec(bucket, "us-east-1", endpoint=seaweed.endpoint))


class Digest:
    """A sink that keeps only the length and SHA-256 of what it is given."""

    def __init__(self) -> None:
        self.size = 0
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        self._hash.update(data)
        return len(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def blocks(total: int, block: int = 64 * 1024, seed: int = 7) -> Iterator[bytes]:
    """`total` bytes of reproducible noise, `block` at a time."""
    rng = random.Random(seed)
    while total > 0:
        size = min(block, total)
        yield rng.randbytes(size)
        total -= size


def read_back(store: Store, key: str) -> bytes:
    sink = io.BytesIO()
    assert store.download(key, sink) == len(sink.getvalue())
    return sink.getvalue()


# --- the fixture's gateway ------------------------------------------------------


@dataclass(frozen=True)
class AnonymousRequest:
    reason: str
    method: str
    path: str


ANONYMOUS = [
    AnonymousRequest("an anonymous listing is refused", "GET", ""),
    AnonymousRequest("an anonymous read is refused", "GET", "/seeded"),
    AnonymousRequest("an anonymous write is refused", "PUT", "/planted"),
]


@pytest.mark.parametrize("case", ANONYMOUS, ids=lambda c: c.reason)
def test_the_gateway_refuses_anonymous_requests(
    case: AnonymousRequest, seaweed: SeaweedFS, store: Store, bucket: str
) -> None:
    with store.writer("seeded") as out:
        out.write(b"seeded")
    request = urllib.request.Request(
        f"{seaweed.endpoint}/{bucket}{case.path}",
        data=b"planted" if case.method == "PUT" else None,
        method=case.method,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(request, timeout=10)
    assert refused.value.code == 403
    assert not store.exists("planted")


@dataclass(frozen=True)
class WrongCredentials:
    reason: str
    access_key: Callable[[SeaweedFS], str]
    secret_key: str
    code: str


WRONG_CREDENTIALS = [
    WrongCredentials(
        "a wrong secret is refused as SignatureDoesNotMatch",
        lambda server: server.access_key,
        "wrong-secret-Zq8Jv1yP0aW3",
        "SignatureDoesNotMatch",
    ),
    WrongCredentials(
        "an unknown access key is refused as InvalidAccessKeyId",
        lambda _: "AKUNKNOWN7Q2W4E6R8T0",
        "unknown-secret-Mk5Lp9Xc2Vb7",
        "InvalidAccessKeyId",
    ),
]


@pytest.mark.parametrize("case", WRONG_CREDENTIALS, ids=lambda c: c.reason)
def test_wrong_credentials_fail_with_the_aws_code_and_no_credential_in_the_message(
    case: WrongCredentials,
    seaweed: SeaweedFS,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    access_key = case.access_key(seaweed)
    use_credentials(monkeypatch, access_key, case.secret_key)
    store = Store.connect(StorageSpec(bucket, "us-east-1", endpoint=seaweed.endpoint))

    with pytest.raises(StorageError) as failed, store.writer("refused") as out:
        out.write(b"never stored")
    message = str(failed.value)
    assert case.code in message
    assert f"s3://{bucket}/refused" in message
    for credential in (access_key, case.secret_key, seaweed.secret_key):
        assert credential not in message
    # An answer to a HEAD has no body to carry the code.
    with pytest.raises(StorageError, match=r"check s3://\S+/refused failed: Forbidden \(HTTP 403"):
        store.exists("refused")

    seaweed.configure(monkeypatch)
    assert not Store.connect(StorageSpec(bucket, endpoint=seaweed.endpoint)).exists("refused")


# --- round trips ----------------------------------------------------------------


def test_a_30_mib_stream_in_5_mib_parts_round_trips_in_about_one_part_of_memory(
    store: Store, seaweed: SeaweedFS, bucket: str
) -> None:
    total = 30 * MIB
    sent = Digest()
    tracemalloc.start()
    try:
        with store.writer("big.tar.gz", part_size=PART) as out:
            for block in blocks(total):
                sent.write(block)
                out.write(block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 3 * PART, f"peak {peak / MIB:.1f} MiB"
    assert seaweed.pending_uploads(bucket) == []
    received = Digest()
    assert store.download("big.tar.gz", received) == total
    assert (received.size, received.hexdigest()) == (total, sent.hexdigest())


def test_one_write_far_larger_than_a_part_is_held_a_part_at_a_time(store: Store) -> None:
    data = bytes(range(256)) * (12 * MIB // 256)
    tracemalloc.start()
    try:
        with store.writer("one-write", part_size=PART) as out:
            out.write(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 3 * PART, f"peak {peak / MIB:.1f} MiB beyond the caller's own data"
    assert read_back(store, "one-write") == data


@dataclass(frozen=True)
class Size:
    reason: str
    size: int


SIZES = [
    Size("an empty object is stored", 0),
    Size("a one-byte object is stored", 1),
    Size("an object a byte short of a part goes up in one request", PART - 1),
    Size("an object of exactly one part completes with no empty last part", PART),
    Size("an object a byte over a part ends in a one-byte part", PART + 1),
]


@pytest.mark.parametrize("case", SIZES, ids=lambda c: c.reason)
def test_objects_of_every_size_around_a_part_round_trip(
    case: Size, store: Store, seaweed: SeaweedFS, bucket: str
) -> None:
    data = b"".join(blocks(case.size, block=100_003, seed=case.size))
    out = store.writer("object", part_size=PART)
    for start in range(0, len(data), 1_000_003):
        assert out.write(data[start : start + 1_000_003]) == len(data[start : start + 1_000_003])

    assert out.close() == case.size
    assert out.close() == case.size, "closing again changes nothing"
    assert read_back(store, "object") == data
    assert store.exists("object")
    assert seaweed.pending_uploads(bucket) == []


def test_a_tar_gz_stream_written_by_tarfile_reads_back(store: Store) -> None:
    members = {f"objects/{index}.yaml": f"index: {index}\n".encode() * 500 for index in range(20)}
    with store.writer("backup.tar.gz") as out:
        # A stream mode only writes to fileobj; typeshed asks every mode for a whole file.
        stream = cast("IO[bytes]", out)
        with tarfile.open(fileobj=stream, mode="w|gz") as tar:
            for name, content in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))

    archive = io.BytesIO(read_back(store, "backup.tar.gz"))
    with tarfile.open(fileobj=archive, mode="r|gz") as tar:
        restored = {}
        for member in tar:
            extracted = tar.extractfile(member)
            assert extracted is not None
            restored[member.name] = extracted.read()
    assert restored == members


def test_a_part_size_below_s3s_minimum_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="part_size"):
        store.writer("small-parts", part_size=PART - 1)


# --- delete and exists ----------------------------------------------------------


def test_a_deleted_object_no_longer_exists_and_deleting_it_again_is_fine(store: Store) -> None:
    assert not store.exists("doomed")
    with store.writer("doomed") as out:
        out.write(b"short-lived")
    assert store.exists("doomed")

    store.delete("doomed")
    assert not store.exists("doomed")
    store.delete("doomed")


@dataclass(frozen=True)
class Operation:
    reason: str
    run: Callable[[Store], object]


def _write_small(store: Store) -> None:
    with store.writer("key") as out:
        out.write(b"small")


def _write_a_part(store: Store) -> None:
    with store.writer("key", part_size=PART) as out:
        out.write(bytes(PART))


MISSING_BUCKET = [
    Operation("a small upload into a missing bucket fails", _write_small),
    Operation("a multipart upload into a missing bucket fails", _write_a_part),
    Operation("a download from a missing bucket fails", lambda s: s.download("key", io.BytesIO())),
    Operation("a check in a missing bucket fails", lambda s: s.exists("key")),
    Operation("a delete in a missing bucket fails", lambda s: s.delete("key")),
]


@pytest.mark.parametrize("case", MISSING_BUCKET, ids=lambda c: c.reason)
def test_a_missing_bucket_fails_with_no_such_bucket(
    case: Operation, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    store = Store.connect(StorageSpec("no-such-bucket", endpoint=seaweed.endpoint))

    with pytest.raises(StorageError, match=r"s3://no-such-bucket/key failed: NoSuchBucket"):
        case.run(store)


def test_a_missing_object_fails_to_download_with_no_such_key(store: Store, bucket: str) -> None:
    with pytest.raises(StorageError, match=rf"s3://{bucket}/absent failed: NoSuchKey"):
        store.download("absent", io.BytesIO())


# --- failures mid-upload --------------------------------------------------------


def test_a_gateway_stopped_mid_upload_fails_the_writer_and_abort_cleans_up_once_it_is_back(
    store: Store,
    seaweed: SeaweedFS,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    out = store.writer("interrupted", part_size=PART, sleep=lambda _: None)
    out.write(bytes(PART + MIB))
    assert seaweed.pending_uploads(bucket) == ["interrupted"]

    with seaweed.gateway_stopped():
        with pytest.raises(StorageError, match=f"cannot reach {seaweed.endpoint}"):
            out.write(bytes(4 * MIB))
        with pytest.raises(ValueError, match="failed"):
            out.write(b"more")
        with caplog.at_level(logging.WARNING, logger="provider.backup.storage.s3"):
            out.abort()

    *retried, warning = caplog.records
    assert len(retried) == len(ABORT_RETRY_DELAYS), "each failed attempt is tried again"
    fields: dict[str, str] = warning.fields  # type: ignore[attr-defined]
    assert "cannot reach" in fields["error"]
    assert fields["retry"] is False  # type: ignore[comparison-overlap]
    assert seaweed.secret_key not in str(fields)
    assert seaweed.pending_uploads(bucket) == ["interrupted"], "kept for another abort"
    assert not store.exists("interrupted")

    out.abort()
    assert seaweed.pending_uploads(bucket) == []
    assert not store.exists("interrupted")
    out.abort()
    with pytest.raises(ValueError, match="aborted"):
        out.close()


def test_a_failed_abort_is_tried_again_and_succeeds_once_the_gateway_is_back(
    store: Store, seaweed: SeaweedFS, bucket: str
) -> None:
    waits: list[float] = []
    outage = contextlib.ExitStack()

    def wait(seconds: float) -> None:
        """The wait between attempts: the gateway comes back during the first."""
        waits.append(seconds)
        outage.close()

    out = store.writer("retried-abort", part_size=PART, sleep=wait)
    out.write(bytes(PART + MIB))
    outage.enter_context(seaweed.gateway_stopped())

    out.abort()

    assert waits == [ABORT_RETRY_DELAYS[0]], "one failed attempt, then one that worked"
    assert seaweed.pending_uploads(bucket) == []
    assert not store.exists("retried-abort")


def test_an_exception_inside_the_writer_block_aborts_the_upload(
    store: Store, seaweed: SeaweedFS, bucket: str
) -> None:
    with (
        pytest.raises(RuntimeError, match="export failed"),
        store.writer("half", part_size=PART) as out,
    ):
        out.write(bytes(PART + 1))
        assert seaweed.pending_uploads(bucket) == ["half"]
        raise RuntimeError("export failed")

    assert seaweed.pending_uploads(bucket) == []
    assert not store.exists("half")


# --- where credentials and endpoints come from ----------------------------------


def test_a_role_is_assumed_at_sts_and_its_credentials_sign_the_s3_requests(
    moto_sts: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = moto_sts.create_identity("backup-pod")
    role_arn = moto_sts.create_role("backup-writer", trusted=pod)
    moto_sts.create_bucket("role-chain")
    moto_sts.configure(monkeypatch, pod)

    store = Store.connect(
        StorageSpec("role-chain", "us-east-1", role_arn=role_arn, endpoint=moto_sts.endpoint)
    )
    assert moto_sts.key_last_used_by(pod.access_key) == "sts", "AssumeRole signed by the pod"
    assert moto_sts.role_last_used("backup-writer") == "", "nothing signed by the role yet"

    with store.writer("chained", part_size=PART) as out:
        out.write(bytes(PART + 10))
    assert read_back(store, "chained") == bytes(PART + 10)

    assert moto_sts.role_last_used("backup-writer") != "", "S3 requests signed by the role"
    assert moto_sts.key_last_used_by(pod.access_key) == "sts", "none signed by the pod"


def test_a_role_that_cannot_be_assumed_fails_at_connect(
    moto_sts: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = moto_sts.create_identity("cut-off-pod")
    moto_sts.configure(monkeypatch, pod)
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", closed)
    role_arn = "arn:aws:iam::123456789012:role/unreachable"

    with pytest.raises(StorageError) as failed:
        Store.connect(StorageSpec("any", "us-east-1", role_arn=role_arn))
    assert str(failed.value) == (
        f"assume role {role_arn} for s3://any failed: "
        f"cannot reach {closed} (EndpointConnectionError)"
    )
    assert pod.secret_key not in str(failed.value)


@dataclass(frozen=True)
class Unreachable:
    reason: str
    spec: StorageSpec
    # The token file's content; None: AWS_WEB_IDENTITY_TOKEN_FILE is not set.
    token: str | None
    message: str


WEB_IDENTITY_ROLE = "arn:aws:iam::123456789012:role/team-a-myctp-backup"
UNREACHABLE = [
    Unreachable(
        "an assumeRoleWith the writer does not know is refused, naming the field",
        StorageSpec("b", role_arn=WEB_IDENTITY_ROLE, assume_role_with="Magic"),
        None,
        "connect to s3://b refused: storage.assumeRoleWith must be AssumeRole or WebIdentity",
    ),
    Unreachable(
        "WebIdentity without a role is refused: there is nothing to go into",
        StorageSpec("b", assume_role_with="WebIdentity"),
        None,
        "connect to s3://b refused: storage.roleArn is required with assumeRoleWith WebIdentity",
    ),
    Unreachable(
        "WebIdentity without a projected token says which variable is missing",
        StorageSpec("b", role_arn=WEB_IDENTITY_ROLE, assume_role_with="WebIdentity"),
        None,
        f"assume role {WEB_IDENTITY_ROLE} with web identity for s3://b failed: "
        "AWS_WEB_IDENTITY_TOKEN_FILE is not set",
    ),
    Unreachable(
        "WebIdentity with an empty token file says so",
        StorageSpec("b", role_arn=WEB_IDENTITY_ROLE, assume_role_with="WebIdentity"),
        "\n",
        f"assume role {WEB_IDENTITY_ROLE} with web identity for s3://b failed: "
        "AWS_WEB_IDENTITY_TOKEN_FILE is empty",
    ),
]


@pytest.mark.parametrize("case", UNREACHABLE, ids=lambda c: c.reason)
def test_a_role_the_writer_cannot_ask_for_fails_at_connect_before_any_request(
    case: Unreachable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No endpoint answers here: a request would fail otherwise.
    closed = f"http://127.0.0.1:{free_port()}"
    use_credentials(monkeypatch, "AKPOD", "pod-secret", AWS_ENDPOINT_URL_STS=closed)
    if case.token is not None:
        token = tmp_path / "token"
        token.write_text(case.token)
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))

    with pytest.raises(StorageError) as failed:
        Store.connect(case.spec)
    assert str(failed.value) == case.message


def test_an_unreadable_token_file_is_named_by_its_variable_and_its_error_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_credentials(monkeypatch, "AKPOD", "pod-secret")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "gone"))
    spec = StorageSpec("b", role_arn=WEB_IDENTITY_ROLE, assume_role_with="WebIdentity")

    with pytest.raises(StorageError) as failed:
        Store.connect(spec)
    assert str(failed.value) == (
        f"assume role {WEB_IDENTITY_ROLE} with web identity for s3://b failed: "
        "cannot read AWS_WEB_IDENTITY_TOKEN_FILE (FileNotFoundError)"
    )


@dataclass(frozen=True)
class GivenToken:
    reason: str
    # The token file's content; None: AWS_WEB_IDENTITY_TOKEN_FILE is not set.
    file: str | None


GIVEN_TOKENS = [
    GivenToken("A given token is used where no projected token is set", None),
    GivenToken("A given token wins over the pod's own projected token", "eyJ.the-pods-own.token"),
]


@pytest.mark.parametrize("case", GIVEN_TOKENS, ids=lambda c: c.reason)
def test_a_spec_with_a_web_identity_token_assumes_the_role_with_it_and_never_shows_it(
    case: GivenToken, moto_sts: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = f"eyJ.minted-for-a-restore-{uuid.uuid4().hex}.sig"
    spec = StorageSpec(
        "b",
        "us-east-1",
        role_arn=WEB_IDENTITY_ROLE,
        assume_role_with="WebIdentity",
        web_identity_token=given,
    )
    with proxy(moto_sts.endpoint) as sts:
        use_credentials(monkeypatch, "AKPOD", "pod-secret", AWS_ENDPOINT_URL_STS=sts.address)
        if case.file is not None:
            monkeypatch.setenv(
                "AWS_WEB_IDENTITY_TOKEN_FILE", str(write_token(tmp_path / "t", case.file))
            )

        Store.connect(spec)

    forms = [urllib.parse.parse_qs(body.decode()) for body in sts.bodies]
    sent = [
        f["WebIdentityToken"][0] for f in forms if f.get("Action") == ["AssumeRoleWithWebIdentity"]
    ]
    assert sent == [given]
    assert given not in repr(spec)
    assert given not in str(spec)


@dataclass(frozen=True)
class Endpoint:
    reason: str
    variable: str  # empty: the spec names it


ENDPOINTS = [
    Endpoint("an endpoint host name in the spec is addressed path-style", ""),
    Endpoint(
        "an endpoint from AWS_ENDPOINT_URL_S3 is used when the spec has none", "AWS_ENDPOINT_URL_S3"
    ),
    Endpoint(
        "an endpoint from AWS_ENDPOINT_URL is used when the spec has none", "AWS_ENDPOINT_URL"
    ),
]


@pytest.mark.parametrize("case", ENDPOINTS, ids=lambda c: c.reason)
def test_an_endpoint_by_host_name_is_addressed_path_style_from_the_spec_or_the_environment(
    case: Endpoint, seaweed: SeaweedFS, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # <bucket>.localhost does not resolve: a virtual-hosted request fails.
    endpoint = seaweed.endpoint.replace("127.0.0.1", "localhost")
    if case.variable:
        monkeypatch.setenv(case.variable, endpoint)
    store = Store.connect(StorageSpec(bucket, endpoint="" if case.variable else endpoint))

    with store.writer("by-name") as out:
        out.write(b"found by its host name")
    assert read_back(store, "by-name") == b"found by its host name"
