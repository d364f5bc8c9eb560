"""`python -m sandbox.awsstandin` runs as its own process and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.apiserver import APIServerFactory, free_port
from sandbox.s3 import Moto, SeaweedFS, credentials_environment
from sandbox.spaces import Kube, wait_for
from tests.awsstandin.conftest import PROVIDER_AWS_CRDS
from tests.awsstandin.test_reconcile import apply, wait_ready

STOP_SECONDS = 20.0


@pytest.fixture
def process_kube(apiserver_factory: APIServerFactory) -> Kube:
    """An API server of its own: the session's stand-in must not reconcile its objects."""
    kube = Kube(apiserver_factory())
    kube.apply_crds(PROVIDER_AWS_CRDS)
    return kube


@pytest.fixture
def standin_process(
    process_kube: Kube, seaweed: SeaweedFS, moto_sts: Moto, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    log = tmp_path / "standin.log"
    sts_port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sandbox.awsstandin",
                f"--kubeconfig={process_kube.server.kubeconfig_path}",
                f"--s3-endpoint={seaweed.endpoint}",
                f"--iam-endpoint={moto_sts.endpoint}",
                f"--weed-master={seaweed.master.address}",
                f"--weed-filer={seaweed.filer.address}",
                f"--sts-port={sts_port}",
                "--poll-interval=2",
            ],
            env=credentials_environment(seaweed.access_key, seaweed.secret_key),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process, log, sts_port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_process_reconciles_a_bucket_says_where_sts_is_and_stops_on_sigterm(
    standin_process: tuple[subprocess.Popen[bytes], Path, int],
    process_kube: Kube,
    seaweed: SeaweedFS,
) -> None:
    process, log, sts_port = standin_process
    bucket = {
        "apiVersion": "s3.aws.m.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": "process-bucket", "namespace": "process"},
        "spec": {"forProvider": {"region": "us-east-1"}},
    }
    apply(process_kube, [bucket])

    ready = wait_ready(process_kube, bucket)
    assert ready["status"]["atProvider"]["arn"] == "arn:aws:s3:::process-bucket"
    started = wait_for("the started line", lambda: _started(log))
    assert started["sts_endpoint"] == f"http://127.0.0.1:{sts_port}"

    process.send_signal(signal.SIGTERM)
    assert process.wait(STOP_SECONDS) == 0, log.read_text()


def _started(log: Path) -> dict[str, str] | None:
    for line in log.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("message") == "started":
            return dict(json.loads(line))
    return None
