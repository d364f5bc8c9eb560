"""The monitoring tests share promtool and Prometheus, which they build on demand."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One worker runs them all: two workers would build the same binary at once."""
    for item in items:
        if "tests/monitoring/" in str(item.fspath):
            item.add_marker(pytest.mark.xdist_group("monitoring"))
