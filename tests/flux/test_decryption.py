"""SOPS decryption on the real kustomize-controller: the team's keys, never Flux's identity.

The function renders ``decryption`` as ``provider: sops`` and the team's
``secretRef``; Flux's API has no field that says "only this Secret's keys". A
SOPS file naming a cloud KMS key the team's Secret has no credentials for is
decrypted, by default, with kustomize-controller's own cloud identity
(controller-level workload identity): the platform's KMS access, used for a
team. The Security model requires ``--feature-gates=ObjectLevelWorkloadIdentity=true``
and ``--default-decryption-service-account``: then a Kustomization without a
``serviceAccountName`` (the function never renders one) authenticates as that
ServiceAccount of its own namespace, never as the controller.

The controller's "cloud identity" here is static AWS credentials in its
environment, with AWS KMS's endpoint pointed at a loopback server that records
who signed each request: that is what AWS would see.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sandbox.spaces import condition, wait_for
from tests.system.sops import AGE_KEY_NAME, SOPS_BIN, age_key, encrypt

from .conftest import TARGET_NAMESPACE, FluxWorld, build_outcome

CONTROLLER_KEY_ID = "AKIAFLUXCONTROLLER00"
KMS_KEY = "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"
DEFAULT_DECRYPTION_ACCOUNT = "flux-decryption"
LOCKDOWN = (
    "--feature-gates=ObjectLevelWorkloadIdentity=true",
    f"--default-decryption-service-account={DEFAULT_DECRYPTION_ACCOUNT}",
)
BUILD_DEADLINE = 90.0


@pytest.fixture
def kms() -> Iterator[tuple[str, list[str]]]:
    """A loopback stand-in for AWS KMS that refuses everything: its URL, and the
    Authorization header of every request it got (who signed it)."""
    signed: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            signed.append(self.headers.get("Authorization", ""))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"__type":"AccessDeniedException","message":"not for you"}'
            self.send_response(400)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}", signed
    finally:
        server.shutdown()
        server.server_close()


def _secret(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": TARGET_NAMESPACE},
            "stringData": {"password": "s3cr3t-of-the-team"},
        }
    )


def _for_kms(encrypted: str) -> str:
    """An age-encrypted SOPS file re-addressed to a KMS key alone, as `sops --kms` writes it."""
    document = yaml.safe_load(encrypted)
    document["sops"].pop("age", None)
    document["sops"]["kms"] = [
        {
            "arn": KMS_KEY,
            "created_at": "2026-12-01T00:00:00Z",
            "enc": "AQICAHhGZmx1eC1rbXMtdGVzdC1jaXBoZXJ0ZXh0LW5vdC1yZWFs",
            "aws_profile": "",
        }
    ]
    return yaml.safe_dump(document)


@dataclass(frozen=True)
class DecryptionCase:
    reason: str
    flags: tuple[str, ...]
    uses_controller_identity: bool


CASES = [
    DecryptionCase(
        "Flux's defaults: a file for a KMS key the team holds no credentials for is decrypted "
        "with the controller's own identity (the attack)",
        (),
        uses_controller_identity=True,
    ),
    DecryptionCase(
        "With the lockdown flags the controller's identity is never used, and the team's own "
        "age key still decrypts",
        LOCKDOWN,
        uses_controller_identity=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_decryption_uses_the_teams_keys_and_never_the_controllers_identity_when_locked_down(
    flux_world: Callable[..., FluxWorld],
    kms: tuple[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: DecryptionCase,
) -> None:
    if not SOPS_BIN.is_file():
        pytest.skip(f"not built: {SOPS_BIN.name}: run tools/build.sh sops age_keygen")
    url, signed = kms
    # kustomize-controller's environment: its cloud identity, and where AWS KMS is.
    for name, value in {
        "AWS_ACCESS_KEY_ID": CONTROLLER_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": "controller-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_KMS": url,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    # A CA bundle of the machine's would make the SDK refuse Flux's HTTP client before it
    # signs anything; a pod has none unless the operator mounts one.
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    world = flux_world(kustomize_flags=case.flags)
    key = age_key(tmp_path)
    age_file = encrypt(_secret("by-age"), key.recipient, tmp_path)
    kms_file = _for_kms(encrypt(_secret("by-kms"), key.recipient, tmp_path))
    for namespace, files in (("team-a", {"s.yaml": kms_file}), ("team-b", {"s.yaml": age_file})):
        world.team(namespace)
        world.kube.put_secret(namespace, "sops-keys", {AGE_KEY_NAME: key.identity.encode()})
        repository = world.repository(namespace, files)
        source = {
            "url": repository.url,
            "interval": "10s",
            "decryption": {"secretRef": {"name": "sops-keys"}},
        }
        world.apply(world.compose(namespace, source))

    kms_ready = wait_for(
        "the KMS file's outcome",
        lambda: build_outcome(condition(world.kustomization("team-a", "ctp"), "Ready")),
        BUILD_DEADLINE,
    )
    assert kms_ready["status"] == "False"
    by_controller = [header for header in signed if CONTROLLER_KEY_ID in header]
    if case.uses_controller_identity:
        assert by_controller, kms_ready["message"]
    else:
        assert by_controller == [], "the controller's identity reached KMS for a team"
        assert DEFAULT_DECRYPTION_ACCOUNT in kms_ready["message"]
        age_ready = wait_for(
            "the age file's outcome",
            lambda: build_outcome(condition(world.kustomization("team-b", "ctp"), "Ready")),
            BUILD_DEADLINE,
        )
        assert age_ready["status"] == "True", age_ready
        assert world.kube.core.read_namespaced_secret("by-age", TARGET_NAMESPACE)
    print(f"\n{kms_ready['message'][:400]}")  # the words a team reads
