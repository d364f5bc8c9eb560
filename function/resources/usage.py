"""Usages: Crossplane deletes nothing before what depends on it is gone."""

from __future__ import annotations

from typing import Any

from function.resources.target import Target

API_VERSION = "protection.crossplane.io/v1beta1"
KIND = "Usage"


def _ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "resourceRef": {"name": obj["metadata"]["name"]},
    }


def usage(
    target: Target, of_name: str, of: dict[str, Any], by_name: str, by: dict[str, Any]
) -> dict[str, Any]:
    """A Usage in which ``by`` (a namespaced object beside it) holds ``of``.

    ``replayDeletion`` re-issues a blocked deletion of ``of`` once ``by`` is
    gone, so deleting the composite finishes without waiting for a resync.
    """
    return target.object(
        API_VERSION,
        KIND,
        target.names.usage(of_name, by_name),
        {
            "replayDeletion": True,
            "of": _ref(of),
            "by": _ref(by),
        },
    )
