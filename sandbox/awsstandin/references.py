"""Reference resolution as crossplane-runtime's APISimpleReferenceResolver does it.

For each `<field>Ref` or `<field>Selector` of `spec.forProvider`, the value the
referenced managed resource offers (its external name, or its
`status.atProvider.arn`) is written into `spec.forProvider.<field>`, and a
selector is turned into the `<field>Ref` it matched. A value already there is
kept unless the reference's policy says `resolve: Always`. A namespaced
resource's references stay in its namespace unless they name another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from provider import kube
from provider.kube import Cluster
from provider.managed import meta
from provider.managed.external import ManagedObject
from sandbox.awsstandin.kinds import BY_NAME, Extract, Kind, Reference

ERR_EMPTY = "referenced field was empty (referenced resource may not yet be ready)"
ERR_NO_MATCH = "no resources matched selector"


class UnresolvedReferenceError(Exception):
    """A reference could not be resolved; the message names the field."""


def extract(obj: Mapping[str, Any], how: Extract) -> str:
    """The value a referenced object offers, empty when it has none yet."""
    if how is Extract.EXTERNAL_NAME:
        return meta.external_name(obj)
    return str(((obj.get("status") or {}).get("atProvider") or {}).get("arn") or "")


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def select(
    managed: Mapping[str, Any],
    selector: Mapping[str, Any],
    candidates: Sequence[Mapping[str, Any]],
    how: Extract,
) -> tuple[str, str]:
    """The first candidate the selector matches that offers a value: (its name, the value).

    Raises:
        UnresolvedReferenceError: None matched with a value.
    """
    labels = selector.get("matchLabels") or {}
    same_controller = bool(selector.get("matchControllerRef"))
    owner = _controller_uid(managed)
    for candidate in candidates:
        metadata = candidate.get("metadata") or {}
        if any((metadata.get("labels") or {}).get(k) != v for k, v in labels.items()):
            continue
        if same_controller and (owner is None or _controller_uid(candidate) != owner):
            continue
        value = extract(candidate, how)
        if value:
            return str(metadata["name"]), value
    raise UnresolvedReferenceError(ERR_NO_MATCH)


def _field_path(reference: Reference) -> str:
    field = reference.field
    return f"spec.forProvider.{field[0].upper()}{field[1:]}"


class References:
    """Resolves the references of one kind against the API server."""

    def __init__(self, cluster: Cluster, kind: Kind) -> None:
        """Resolve ``kind``'s references with ``cluster``."""
        self.cluster = cluster
        self.kind = kind

    async def resolve(self, managed: ManagedObject) -> bool:
        """Fill every reference's value into ``managed``; whether anything changed.

        Raises:
            UnresolvedReferenceError: A reference cannot be resolved, with the field and the reason.
        """
        for_provider = managed.setdefault("spec", {}).setdefault("forProvider", {})
        before = repr(for_provider)
        for reference in self.kind.references:
            try:
                await self._resolve_one(managed, for_provider, reference)
            except (UnresolvedReferenceError, kube.KubeError) as error:
                raise UnresolvedReferenceError(f"{_field_path(reference)}: {error}") from None
        return repr(for_provider) != before

    async def _resolve_one(
        self, managed: ManagedObject, for_provider: dict[str, Any], reference: Reference
    ) -> None:
        ref = for_provider.get(reference.ref)
        selector = for_provider.get(reference.selector)
        current = str(for_provider.get(reference.field) or "")
        policy = (ref or selector or {}).get("policy") or {}
        if current and policy.get("resolve") != "Always":
            return
        namespaced = bool(managed["metadata"].get("namespace"))
        target = BY_NAME[reference.kind].resource(namespaced=namespaced)
        if ref:
            namespace = ref.get("namespace") or managed["metadata"].get("namespace")
            referenced = await self.cluster.get(target, namespace, str(ref["name"]))
            if referenced is None:
                msg = f"cannot get referenced resource: {ref['name']} not found"
                raise UnresolvedReferenceError(msg)
            value = extract(referenced, reference.extract)
            if not value:
                raise UnresolvedReferenceError(ERR_EMPTY)
            for_provider[reference.field] = value
            return
        if selector:
            namespace = selector.get("namespace") or managed["metadata"].get("namespace")
            candidates, _ = await self.cluster.list(target, namespace)
            name, value = select(managed, selector, candidates, reference.extract)
            for_provider[reference.field] = value
            for_provider[reference.ref] = {"name": name}
