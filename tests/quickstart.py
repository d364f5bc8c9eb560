"""What examples/team-quickstart/README.md says a Ready ControlPlane's status reads."""

from __future__ import annotations

from typing import Any

import yaml

from sandbox.quickstart import EXAMPLE
from tests.docs.markdown_files import page

STATUS_MARKER = "fragment of platform.acme.io/v1alpha1 ControlPlane"


def expected_status() -> dict[str, Any]:
    """The status block of the README's "What to expect"."""
    (block,) = [b for b in page(EXAMPLE / "README.md").blocks if b.marker == STATUS_MARKER]
    status: dict[str, Any] = yaml.safe_load(block.text)["status"]
    return status


def differences(shown: Any, actual: Any, path: str = "status") -> list[str]:
    """Where ``actual`` differs from what ``shown`` shows; what it leaves out is not compared.

    Conditions are matched by type, and only the keys shown are compared (the
    README leaves out transition times).
    """
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path}: shown {shown!r}, is {actual!r}"]
        return [
            found
            for key, value in shown.items()
            for found in differences(value, actual.get(key), f"{path}.{key}")
        ]
    if isinstance(shown, list) and path.endswith(".conditions"):
        by_type = {c.get("type"): c for c in actual or []}
        return [
            found
            for condition in shown
            for found in differences(
                condition, by_type.get(condition["type"]), f"{path}[{condition['type']}]"
            )
        ]
    if isinstance(shown, list):
        if not isinstance(actual, list) or len(actual) != len(shown):
            return [f"{path}: shown {len(shown)} items, is {actual!r}"]
        return [
            found
            for index, (item, other) in enumerate(zip(shown, actual, strict=True))
            for found in differences(item, other, f"{path}[{index}]")
        ]
    return [] if shown == actual else [f"{path}: shown {shown!r}, is {actual!r}"]
