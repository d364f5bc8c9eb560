"""Pytest fixtures that run a real kube-apiserver on a real etcd.

Load them from tests/conftest.py with `pytest_plugins = ["tests.kube.fixtures"]`.

- `kube_etcd` (session): one etcd on loopback, shared by every API server.
- `apiserver` (session): a kube-apiserver on that etcd under the default prefix.
- `apiserver_factory` (test): starts more API servers on the same etcd, each
  under a prefix of its own (a separate, cheap cluster); stopped after the test.

Tests using them are skipped when `.tools/bin/kube-apiserver` has not been built.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.apiserver import (
    KUBE_APISERVER_BIN,
    APIServer,
    APIServerFactory,
    Etcd,
    run_apiserver,
    run_etcd,
)


def _require_kube_apiserver() -> None:
    if not KUBE_APISERVER_BIN.is_file():
        pytest.skip(
            f"kube-apiserver is not built ({KUBE_APISERVER_BIN} is missing): "
            "run tools/build.sh kube_apiserver etcd"
        )


@pytest.fixture(scope="session")
def kube_etcd() -> Iterator[Etcd]:
    """One etcd for the whole session; every API server stores its objects in it."""
    _require_kube_apiserver()
    with run_etcd() as etcd:
        yield etcd


@pytest.fixture(scope="session")
def apiserver(kube_etcd: Etcd) -> Iterator[APIServer]:
    """A kube-apiserver for the whole session, with an admin kubeconfig."""
    with run_apiserver(kube_etcd, name="kube") as server:
        yield server


@pytest.fixture
def apiserver_factory(kube_etcd: Etcd) -> Iterator[APIServerFactory]:
    """Starts extra API servers (separate clusters) on the session's etcd; stops them after."""
    with APIServerFactory(kube_etcd) as factory:
        yield factory
