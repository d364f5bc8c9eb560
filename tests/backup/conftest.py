"""Fixtures of the backup tests."""

from collections.abc import Iterator

import pytest

from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.spaces import SPACES_CRD, Kube, SpacesSimulator
from tests.backup.test_credentials import aws  # noqa: F401 (IAM, STS and S3 of AWS's stand-in)
from tests.backup.test_roundtrip import planes  # noqa: F401 (shared by every module here)
from tests.backup.test_schedule import local  # noqa: F401 (an API server with the backup CRDs)
from tests.provider.conftest import SPACE_GROUP


@pytest.fixture(scope="module")
def space(kube_etcd: Etcd) -> Iterator[tuple[Kube, Kube]]:
    """A Space whose simulated control planes are all one fresh API server."""
    with APIServerFactory(kube_etcd) as factory:
        space = Kube(factory(name="restore-space"))
        space.apply_crds(SPACES_CRD)
        space.namespace(SPACE_GROUP)
        hosted = Kube(factory(name="restore-hosted"))
        with SpacesSimulator(space, hosted.server):
            yield space, hosted
