"""Fixtures of the backup tests."""

from tests.backup.test_roundtrip import planes  # noqa: F401 (shared by every module here)
from tests.backup.test_schedule import local  # noqa: F401 (an API server with the backup CRDs)
