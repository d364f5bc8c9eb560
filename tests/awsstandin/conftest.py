"""A kube-apiserver with the upstream provider-aws CRDs, SeaweedFS, moto and the stand-in.

- `aws_kube` (package): its own API server on the session's etcd, with every
  provider-aws CRD of `.tools/crds/provider-aws` installed and Established.
- `standin` (package): the stand-in reconciling that API server's S3 and IAM
  kinds into the session's SeaweedFS (`seaweed`) and moto (`moto_sts`),
  signing with SeaweedFS's admin key, and serving its STS bridge.
- `cloud`: the stand-in's own S3 and IAM client with the same key, to look at
  what is really there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.apiserver import Etcd, run_apiserver
from sandbox.awsstandin.cloud import Cloud, Endpoints
from sandbox.awsstandin.identities import SeaweedAdmin
from sandbox.awsstandin.standin import AwsStandin, Settings, running_in_thread
from sandbox.paths import UPSTREAM_CRDS
from sandbox.s3 import Moto, SeaweedFS, credentials_environment
from sandbox.spaces import Kube

PROVIDER_AWS_CRDS = UPSTREAM_CRDS / "provider-aws"


@pytest.fixture(scope="package")
def aws_kube(kube_etcd: Etcd) -> Iterator[Kube]:
    """An API server serving the upstream provider-aws kinds."""
    if not PROVIDER_AWS_CRDS.is_dir():
        pytest.skip(f"{PROVIDER_AWS_CRDS} is missing: run tools/build.sh crds")
    with run_apiserver(kube_etcd, name="awsstandin", etcd_prefix="/awsstandin") as server:
        kube = Kube(server)
        kube.apply_crds(PROVIDER_AWS_CRDS)
        yield kube


def _endpoints(seaweed: SeaweedFS, moto_sts: Moto) -> Endpoints:
    return Endpoints(s3=seaweed.endpoint, iam=moto_sts.endpoint)


@pytest.fixture(scope="package")
def standin(aws_kube: Kube, seaweed: SeaweedFS, moto_sts: Moto) -> Iterator[AwsStandin]:
    """The stand-in, polling every two seconds, with SeaweedFS's admin key."""
    with pytest.MonkeyPatch.context() as environment:
        for name, value in credentials_environment(seaweed.access_key, seaweed.secret_key).items():
            environment.setenv(name, value)
        settings = Settings(
            _endpoints(seaweed, moto_sts),
            poll_interval=2.0,
            short_wait=0.5,
            seaweed=SeaweedAdmin(seaweed.master.address, seaweed.filer.address),
        )
        # boto3 reads the credentials when the stand-in makes its clients, at start.
        with running_in_thread(aws_kube.server.kubeconfig_path, settings) as running:
            environment.undo()
            yield running


@pytest.fixture
def cloud(seaweed: SeaweedFS, moto_sts: Moto, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """S3 and IAM with SeaweedFS's admin key, to look at what the stand-in made."""
    for name, value in credentials_environment(seaweed.access_key, seaweed.secret_key).items():
        monkeypatch.setenv(name, value)
    return Cloud(_endpoints(seaweed, moto_sts))
