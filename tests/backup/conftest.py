"""Fixtures of the backup tests."""

from tests.backup.test_roundtrip import planes  # noqa: F401 (shared by every module here)
