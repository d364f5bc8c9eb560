"""What a plan says: per stage, each object to create, change, delete or leave unchanged.

And the pure rules that decide it without a control plane: an offline plan
compares a stage's objects built from the base revision with those built
from the head; Flux's own identity of an object (its inventory entry),
its ``kustomize.toolkit.fluxcd.io`` annotations and its apply order. Secret
values never appear: diffs mask them (the restore's ``diff``), and a SOPS
object is compared by its ciphertext. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from provider.backup.format.archive import SERVER_MANAGED_METADATA, strip
from provider.backup.restore import diff

Action = Literal["create", "change", "delete", "unchanged"]
ACTIONS: tuple[Action, ...] = ("create", "change", "delete", "unchanged")

# Flux's per-object annotations (kustomize-controller's docs, "Controlling the apply
# behavior of resources" and "Prune"): kept as they are, or not applied at all.
SSA_ANNOTATION = "kustomize.toolkit.fluxcd.io/ssa"
PRUNE_ANNOTATION = "kustomize.toolkit.fluxcd.io/prune"
DISABLED = "disabled"
SSA_IGNORE = "ignore"
SSA_IF_NOT_PRESENT = "ifnotpresent"
ENCRYPTED_NOTE = "SOPS-encrypted: compared by its ciphertext, never decrypted"


@dataclass(frozen=True, order=True)
class ObjectId:
    """An object as Flux's inventory names it: group, kind, namespace and name (no version)."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectId:
        """The id of a Kubernetes object."""
        metadata = obj.get("metadata") or {}
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        return cls(
            group, str(obj.get("kind")), str(metadata.get("namespace") or ""), str(metadata["name"])
        )

    @classmethod
    def from_inventory(cls, entry: str) -> ObjectId:
        """An id from a Kustomization's ``status.inventory.entries[].id``.

        Flux writes ``<namespace>_<name>_<group>_<kind>`` (cli-utils' ObjMetadata);
        Kubernetes names, groups and kinds hold no ``_``.

        Raises:
            ValueError: ``entry`` is not of that form.
        """
        parts = entry.split("_")
        if len(parts) != 4 or not parts[1] or not parts[3]:
            msg = f"{entry!r} is not a Flux inventory id"
            raise ValueError(msg)
        namespace, name, group, kind = parts
        return cls(group, kind, namespace, name)

    def __str__(self) -> str:
        """``Kind namespace/name``, or ``Kind name`` for a cluster-scoped object."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


def inventory(kustomization: Mapping[str, Any] | None) -> list[tuple[ObjectId, str]]:
    """Each object of a live Kustomization's ``status.inventory`` and its applied apiVersion."""
    entries = (((kustomization or {}).get("status") or {}).get("inventory") or {}).get("entries")
    found = []
    for entry in entries or ():
        key = ObjectId.from_inventory(str(entry.get("id")))
        version = str(entry.get("v") or "v1")
        found.append((key, f"{key.group}/{version}" if key.group else version))
    return found


@dataclass(frozen=True)
class Built:
    """One object of a stage as kustomize-controller would apply it (``plan.build``)."""

    object: Mapping[str, Any]
    # SOPS-encrypted in the repository: never decrypted here.
    encrypted: bool = False
    # Flux applies a stage in steps: 0 cluster definitions, 1 classes, 2 the rest.
    apply_stage: int = 2

    @property
    def id(self) -> ObjectId:
        """The object's inventory id."""
        return ObjectId.of(self.object)

    @property
    def api_version(self) -> str:
        """The object's apiVersion."""
        return str(self.object.get("apiVersion"))


def in_apply_order(objects: Iterable[Built]) -> list[Built]:
    """The objects in the order Flux applies them: by step, then by id."""
    return sorted(objects, key=lambda item: (item.apply_stage, item.id))


@dataclass(frozen=True)
class Change:
    """What the push does to one object."""

    action: Action
    object: ObjectId
    api_version: str = ""
    diff: str = ""
    note: str = ""


@dataclass(frozen=True)
class HealthCheck:
    """How Flux decides the stage's objects of one kind are ready (``wait: true``)."""

    group_kind: str
    count: int
    rule: str


@dataclass(frozen=True)
class StagePlan:
    """What one stage would do, or why it cannot be planned."""

    stage: str
    kustomization: str
    path: str
    depends_on: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    health_checks: tuple[HealthCheck, ...] = ()
    notes: tuple[str, ...] = ()
    error: str = ""

    def count(self, action: Action) -> int:
        """How many objects this stage would ``action``."""
        return sum(1 for change in self.changes if change.action == action)

    @property
    def changed(self) -> bool:
        """Whether the stage creates, changes or deletes anything."""
        return any(change.action != "unchanged" for change in self.changes)


@dataclass(frozen=True)
class Plan:
    """Every stage's plan, in the order Flux applies the stages."""

    controlplane: str
    mode: Literal["live", "offline"]
    stages: tuple[StagePlan, ...]
    revision: str = ""
    base: str = ""
    crossplane_version: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        """Whether a stage could not be planned."""
        return any(stage.error for stage in self.stages)

    @property
    def changed(self) -> bool:
        """Whether the push would change the control plane."""
        return any(stage.changed for stage in self.stages)

    def count(self, action: Action) -> int:
        """How many objects of every stage the push would ``action``."""
        return sum(stage.count(action) for stage in self.stages)


# `terraform plan -detailed-exitcode`'s codes.
EXIT_NO_CHANGES = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2


def exit_code(plan: Plan) -> int:
    """0 when nothing changes, 2 when something does, 1 when a stage could not be planned."""
    if plan.failed:
        return EXIT_ERROR
    return EXIT_CHANGES if plan.changed else EXIT_NO_CHANGES


def annotation(obj: Mapping[str, Any], name: str) -> str:
    """An annotation's value, lowercased (Flux compares them so), or empty."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(name) or "").lower()


def comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a plan shows it: a copy without server-managed metadata or status."""
    plain = strip(obj)
    plain.pop("status", None)
    return plain


def same(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether two objects are equal but for server-managed metadata and status.

    ``comparable(one) == comparable(other)`` without copying either: a plan asks
    it of every object.
    """
    return _view(one) == _view(other)


def _view(obj: Mapping[str, Any]) -> dict[str, Any]:
    view = {key: value for key, value in obj.items() if key != "status"}
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        view["metadata"] = {
            key: value for key, value in metadata.items() if key not in SERVER_MANAGED_METADATA
        }
    return view


def offline(
    base: Iterable[Built] | None, head: Iterable[Built], *, prune: bool = True
) -> tuple[Change, ...]:
    """A stage's changes from its objects at the base revision to those at the head.

    ``base`` None: the stage is new (or no base revision was given), so every
    object is created. SOPS objects compare by ciphertext and their diff shows
    no value. Without ``prune`` nothing removed is deleted.
    """
    before = {item.id: item for item in base or ()}
    changes = []
    for item in in_apply_order(head):
        key, obj = item.id, item.object
        old = before.pop(key, None)
        if annotation(obj, SSA_ANNOTATION) == SSA_IGNORE:
            continue
        note = ENCRYPTED_NOTE if item.encrypted else ""
        if old is None:
            changes.append(Change("create", key, item.api_version, note=note))
        elif same(old.object, obj):
            changes.append(Change("unchanged", key, item.api_version, note=note))
        elif annotation(obj, SSA_ANNOTATION) == SSA_IF_NOT_PRESENT:
            changes.append(Change("unchanged", key, item.api_version, note="ssa: IfNotPresent"))
        else:
            text = masked_diff(
                old.object, obj, key, encrypted=item.encrypted, labels=("base", "head")
            )
            changes.append(Change("change", key, item.api_version, text, note))
    if prune:
        changes.extend(
            Change("delete", key, old.api_version)
            for key, old in sorted(before.items())
            if annotation(old.object, PRUNE_ANNOTATION) != DISABLED
        )
    return tuple(changes)


def masked_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    key: ObjectId,
    *,
    encrypted: bool = False,
    labels: tuple[str, str] = ("live", "planned"),
) -> str:
    """A unified diff from ``before`` to ``after`` with every Secret value masked.

    An encrypted object shows neither its ciphertext nor its SOPS metadata,
    only that its values changed.
    """
    old, new = comparable(before), comparable(after)
    if encrypted:
        old, new = _ciphertext_masked(old, new)
    return diff.unified(old, new, str(key).replace(" ", "/"), labels=labels)


def _ciphertext_masked(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides with each encrypted value, and the SOPS metadata, masked.

    As ``kubectl diff`` masks a Secret: ``***`` where a value is the same,
    ``*** (before)`` and ``*** (after)`` where it differs, so a changed key shows.
    """
    old, new = dict(before), dict(after)
    for name in (before.keys() | after.keys()) - {"apiVersion", "kind", "metadata"}:
        masked = _mask_pair(before.get(name), after.get(name))
        if name in before:
            old[name] = masked[0]
        if name in after:
            new[name] = masked[1]
    return old, new


def _mask_pair(before: Any, after: Any) -> tuple[Any, Any]:
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        old, new = {}, {}
        for key in before.keys() | after.keys():
            pair = _mask_pair(before.get(key), after.get(key))
            if key in before:
                old[key] = pair[0]
            if key in after:
                new[key] = pair[1]
        return old, new
    if before == after:
        return diff.MASK, diff.MASK
    return f"{diff.MASK} (before)", f"{diff.MASK} (after)"


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value in it masked, longest first (no value is half-shown)."""
    for value in sorted({value for value in secrets if value}, key=len, reverse=True):
        text = text.replace(value, diff.MASK)
    return text
