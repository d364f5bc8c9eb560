"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import servers

pytest_plugins = ["tests.kube.fixtures", "tests.backup.fixtures"]


@pytest.fixture(scope="session")
def function_address() -> Iterator[str]:
    """The address of a real function server, serving for the whole session."""
    with servers.function_server() as address:
        yield address
