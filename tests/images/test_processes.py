"""The images' processes work: RunFunction over mTLS, the controllers' health and readiness.

Each runs from the unpacked image (sandbox.rootfs: its own mount and pid
namespaces, chroot, uid 65532, read-only root) against real servers on loopback.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.render import request
from sandbox import rootfs
from sandbox.apiserver import _PKI, APIServerFactory, free_port
from sandbox.spaces import PROVIDER_CRDS, Kube, wait_for
from tests import builders as b
from tests.images.conftest import Running, owned_by, running
from tests.provider.test_process import http_status
from tests.schemas import ROOT

STARTUP_SECONDS = 60
CALL_TIMEOUT_SECONDS = 10
BACKUP_CRDS = ROOT / "deploy" / "backup-controller" / "crds"


@pytest.fixture
def pki() -> _PKI:
    return _PKI.generate("function")


@pytest.fixture
def tls_dir(pki: _PKI, function_image: rootfs.Image, tmp_path: Path) -> Path:
    """The function's serving pair and the CA of its callers, as Crossplane mounts them."""
    folder = tmp_path / "tls"
    folder.mkdir()
    files = []
    for name, data in (
        ("tls.crt", pki.serving_cert),
        ("tls.key", pki.serving_key),
        ("ca.crt", pki.ca_cert),
    ):
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)
        files.append(folder / name)
    owned_by(function_image, folder, *files)
    return folder


def run_function(
    address: str, credentials: grpc.ChannelCredentials, req: fnv1.RunFunctionRequest
) -> fnv1.RunFunctionResponse:
    with grpc.secure_channel(address, credentials) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
        rsp: fnv1.RunFunctionResponse = stub.RunFunction(req, timeout=CALL_TIMEOUT_SECONDS)
        return rsp


def until_listening(process: Running, address: str, credentials: grpc.ChannelCredentials) -> None:
    with grpc.secure_channel(address, credentials) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=STARTUP_SECONDS)
        except grpc.FutureTimeoutError:
            pytest.fail(f"the function image did not listen on {address}: {process.log()}")


def test_the_function_image_answers_run_function_over_mtls_and_refuses_strangers(
    function_image: rootfs.Image, pki: _PKI, tls_dir: Path, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    caller = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_cert,
        private_key=pki.admin_key,
        certificate_chain=pki.admin_cert,
    )
    stranger = grpc.ssl_channel_credentials(root_certificates=pki.ca_cert)
    req = request(b.composite({"source": b.SOURCE}), b.example_input())
    req.meta.tag = "from-the-image"
    # The entrypoint is `function-controlplane serve`; Crossplane passes the
    # certificates' folder in TLS_SERVER_CERTS_DIR.
    with running(
        function_image,
        ["--address", address],
        tmp_path / "function.log",
        env={"TLS_SERVER_CERTS_DIR": "/tmp/tls"},
        binds=[rootfs.Bind(tls_dir, "/tmp/tls")],
    ) as process:
        until_listening(process, address, caller)
        rsp = run_function(address, caller, req)
        with pytest.raises(grpc.RpcError) as refused:
            run_function(address, stranger, req)
    assert rsp.meta.tag == "from-the-image"
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert "instance" in rsp.desired.resources
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, "the TLS handshake fails"
    assert process.exit_code == 0, f"SIGTERM stops it cleanly: {process.log()}"


@dataclass
class ControllerCase:
    reason: str
    command: list[str] | None
    crds: tuple[Path, ...]


CONTROLLERS = [
    ControllerCase("the provider is the image's entrypoint", None, (PROVIDER_CRDS,)),
    ControllerCase(
        "the backup controller is the provider image with another command; its restore "
        "drills watch the provider's Instances too",
        ["/venv/bin/controlplane-backup-controller"],
        (BACKUP_CRDS, PROVIDER_CRDS),
    ),
]


@pytest.mark.parametrize("case", CONTROLLERS, ids=lambda case: case.reason)
def test_a_controller_of_the_provider_image_becomes_healthy_and_ready_against_an_api_server(
    provider_image: rootfs.Image,
    apiserver_factory: APIServerFactory,
    tmp_path: Path,
    case: ControllerCase,
) -> None:
    server = apiserver_factory()
    Kube(server).apply_crds(*case.crds)
    kube = tmp_path / "kube"
    kube.mkdir()
    shutil.copy(server.kubeconfig_path, kube / "kubeconfig")
    owned_by(provider_image, kube, kube / "kubeconfig")
    port = free_port()
    with running(
        provider_image,
        ["--kubeconfig", "/tmp/kube/kubeconfig", "--metrics-bind-address", f"127.0.0.1:{port}"],
        tmp_path / "controller.log",
        command=case.command,
        binds=[rootfs.Bind(kube, "/tmp/kube")],
    ) as process:
        wait_for(
            "/readyz 200 (every controller synced with the API server)",
            lambda: http_status(port, "/readyz") == 200 or not process.alive() or None,
            timeout=STARTUP_SECONDS,
        )
        assert process.alive(), process.log()
        assert http_status(port, "/healthz") == 200
        assert http_status(port, "/readyz") == 200
    assert process.exit_code == 0, f"SIGTERM stops it cleanly: {process.log()}"
