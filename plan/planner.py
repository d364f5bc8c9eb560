"""A plan, stage by stage: build each stage, then compare it offline or against the control plane.

The steps per stage, in Flux's order of the stages (``stages.order``):

1. build the head revision (and the base one, for an offline diff and for
   SOPS ciphertexts) as kustomize-controller would (``plan.build``);
2. offline: compare base and head (``changes.offline``); live: for each
   object in Flux's apply order, a GET and a server-side dry-run apply as
   kustomize-controller, or a note where the server cannot check it yet (a
   kind an earlier stage installs, a namespace this push creates);
3. live: what Flux would prune, from the live Kustomization's inventory;
4. the health checks Flux would evaluate (``plan.health``).

A stage that cannot be planned carries its error, naming the stage and the
object, and the plan goes on with the next one.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plan import build, health, kinds
from plan.changes import (
    DISABLED,
    ENCRYPTED_NOTE,
    PRUNE_ANNOTATION,
    SSA_ANNOTATION,
    SSA_IF_NOT_PRESENT,
    SSA_IGNORE,
    Built,
    Change,
    ObjectId,
    StagePlan,
    annotation,
    in_apply_order,
    masked_diff,
    offline,
    same,
)
from plan.live import LIST_FROM, ControlPlane, ControlPlanes
from plan.stages import Stage, before
from provider.kube import KubeError

# Builds one stage: (stage, checkout root) -> its objects.
Builder = Callable[[Stage, Path], list[Built]]
# Whether a stage must be built at the base revision too, given its head's objects.
BaseNeeded = Callable[[Sequence[Built]], bool]


class ObjectError(Exception):
    """One object cannot be planned; the message names it and says why."""


@dataclass
class Checkouts:
    """The trees a plan builds: the head (what the push makes) and, if given, the base.

    ``base`` is asked for only when a stage needs it (live, only for SOPS objects):
    a revision is written out when first asked for.
    """

    head: Path
    base: Callable[[], Path] | None = None


@dataclass
class _Built:
    stage: Stage
    head: list[Built] | None = None
    base: list[Built] | None = None
    error: str = ""
    installs: kinds.Installs = field(default_factory=lambda: kinds.Installs(""))


def _build_all(
    stages: Sequence[Stage], trees: Checkouts, builder: Builder, *, base: BaseNeeded
) -> list[_Built]:
    """Every stage built at the head and, where ``base`` says it is needed, at the base.

    Each build is a process of its own: they run side by side, one per core.
    """
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(lambda stage: _build_one(stage, trees, builder, base), stages))


def _build_one(stage: Stage, trees: Checkouts, builder: Builder, base: BaseNeeded) -> _Built:
    item = _Built(stage)
    try:
        item.head = builder(stage, trees.head)
    except build.BuildError as error:
        item.error = str(error)
        return item
    if trees.base is not None and base(item.head):
        try:
            item.base = builder(stage, trees.base())
        except build.BuildError:
            # The base did not build (or had no such folder): compare with nothing.
            item.base = None
    return item


def _always(_: Sequence[Built]) -> bool:
    return True


def _has_encrypted(head: Sequence[Built]) -> bool:
    """Live, the base matters only for SOPS objects: their ciphertext is compared with it."""
    return any(item.encrypted for item in head)


def _shell(stage: Stage, names: Mapping[str, str], **fields: Any) -> StagePlan:
    """A stage's plan; ``names`` maps Kustomization names to stage names, for its dependencies."""
    return StagePlan(
        stage=stage.name,
        kustomization=stage.kustomization_name,
        path=stage.path,
        depends_on=tuple(names.get(name, name) for name in stage.depends_on),
        **fields,
    )


def _planned(
    stage: Stage, names: Mapping[str, str], head: Sequence[Built], changes: tuple[Change, ...]
) -> StagePlan:
    """A stage's plan: its changes, and the health checks Flux would run on what it applies."""
    return _shell(
        stage, names, changes=changes, health_checks=health.checks(stage.kustomization, head)
    )


def _stage_names(stages: Sequence[Stage]) -> dict[str, str]:
    return {stage.kustomization_name: stage.name for stage in stages}


def plan_offline(
    stages: Sequence[Stage], trees: Checkouts, builder: Builder
) -> tuple[StagePlan, ...]:
    """Each stage's objects at the head compared with the base (no base: all created)."""
    names = _stage_names(stages)
    plans = []
    for item in _build_all(stages, trees, builder, base=_always):
        stage = item.stage
        if item.error:
            plans.append(_shell(stage, names, error=item.error))
            continue
        assert item.head is not None
        changes = offline(item.base, item.head, prune=stage.prune)
        plans.append(_planned(stage, names, item.head, changes))
    return tuple(plans)


async def plan_live(
    stages: Sequence[Stage],
    trees: Checkouts,
    builder: Builder,
    targets: ControlPlanes,
    inventories: Mapping[str, Sequence[tuple[ObjectId, str]]],
    *,
    default_service_account: str = "",
) -> tuple[StagePlan, ...]:
    """Each stage against the live control plane.

    ``inventories`` are each live Kustomization's inventory (each object's id and the
    apiVersion it was applied at) by its name: a stage without one (new) prunes nothing.
    Each stage is asked of the control plane as Flux applies it: as the service account
    its Kustomization names, else ``default_service_account``, else the kubeconfig's user.
    """
    names = _stage_names(stages)
    built = _build_all(stages, trees, builder, base=_has_encrypted)
    by_name = {item.stage.kustomization_name: item for item in built}
    plans = []
    for item in built:
        stage = item.stage
        if item.error:
            plans.append(_shell(stage, names, error=item.error))
            continue
        earlier = [by_name[s.kustomization_name].installs for s in before(tuple(stages), stage)]
        try:
            target = await targets.as_user(stage.applied_as(default_service_account))
            changes, item.installs = await _stage_live(item, earlier, target)
            changes += await _prunes(item, target, inventories.get(stage.kustomization_name, ()))
        except (ObjectError, KubeError) as error:
            plans.append(_shell(stage, names, error=str(error)))
            continue
        assert item.head is not None
        plans.append(_planned(stage, names, item.head, changes))
    return tuple(plans)


async def _stage_live(
    item: _Built, earlier: Sequence[kinds.Installs], target: ControlPlane
) -> tuple[tuple[Change, ...], kinds.Installs]:
    assert item.head is not None
    objects = [
        obj
        for obj in in_apply_order(item.head)
        if annotation(obj.object, SSA_ANNOTATION) != SSA_IGNORE
    ]
    # What this stage defines for its own later objects: its CRDs, applied first.
    own = kinds.installs(item.stage.name, (obj for obj in objects if obj.apply_stage == 0))
    base = {obj.id: obj for obj in item.base or ()}
    await _prefetch(target, [(obj.api_version, obj.id) for obj in objects])
    changes = await asyncio.gather(
        *(_object_live(obj, base.get(obj.id), own, earlier, target) for obj in objects)
    )
    moving = [
        obj
        for obj, change in zip(objects, changes, strict=True)
        if change.action in {"create", "change"}
    ]
    return tuple(changes), kinds.installs(item.stage.name, moving)


async def _prefetch(target: ControlPlane, objects: Sequence[tuple[str, ObjectId]]) -> None:
    """Read with one list each the kinds and namespaces that hold many of ``objects``."""
    groups = Counter((api_version, key.kind, key.namespace) for api_version, key in objects)
    for (api_version, kind, namespace), count in groups.items():
        if count < LIST_FROM:
            continue
        try:
            resource = await target.discovery.resource(api_version, kind)
        except KubeError:
            continue  # each object says why, on its own
        if resource is not None:
            target.prefetch(resource, namespace if resource.namespaced else "")


async def _object_live(
    item: Built,
    base: Built | None,
    own: kinds.Installs,
    earlier: Sequence[kinds.Installs],
    target: ControlPlane,
) -> Change:
    key, obj = item.id, item.object
    try:
        resource = await target.discovery.resource(item.api_version, key.kind)
    except KubeError as error:
        raise ObjectError(f"{key}: discovery failed: {error}") from None
    if resource is None:
        why = kinds.installed_by(key, own, earlier)
        if not why:
            msg = (
                f"{key}: kind {key.kind} of {item.api_version} is not served by the control plane, "
                "and no earlier stage installs it"
            )
            raise ObjectError(msg)
        return Change("create", key, item.api_version, note=why)
    if resource.namespaced and not key.namespace:
        msg = f"{key}: is namespaced but has no namespace (set one, or the stage's targetNamespace)"
        raise ObjectError(msg)
    if resource.namespaced and kinds.namespace_created(key.namespace, own, earlier):
        return Change(
            "create",
            key,
            item.api_version,
            note=f"namespace {key.namespace} is created by this push",
        )
    try:
        live = await target.get(resource, key.namespace, key.name)
        if item.encrypted:
            return _encrypted(item, base, live)
        if live is not None and annotation(obj, SSA_ANNOTATION) == SSA_IF_NOT_PRESENT:
            return Change("unchanged", key, item.api_version, note="ssa: IfNotPresent")
        planned = await target.dry_run(resource, obj)
    except KubeError as error:
        raise ObjectError(f"{key}: the control plane refuses it: {error}") from None
    if live is None:
        return Change("create", key, item.api_version)
    if same(live, planned):
        return Change("unchanged", key, item.api_version)
    return Change("change", key, item.api_version, masked_diff(live, planned, key))


def _encrypted(item: Built, base: Built | None, live: Mapping[str, Any] | None) -> Change:
    """A SOPS object: never decrypted, so compared with the base revision by its ciphertext."""
    key = item.id
    if live is None:
        return Change("create", key, item.api_version, note=ENCRYPTED_NOTE)
    if base is None:
        return Change(
            "change",
            key,
            item.api_version,
            note=f"{ENCRYPTED_NOTE}; no base revision holds it, so it is taken as changed",
        )
    if same(base.object, item.object):
        return Change("unchanged", key, item.api_version, note=ENCRYPTED_NOTE)
    text = masked_diff(base.object, item.object, key, encrypted=True)
    return Change("change", key, item.api_version, text, ENCRYPTED_NOTE)


async def _prunes(
    item: _Built, target: ControlPlane, inventory: Sequence[tuple[ObjectId, str]]
) -> tuple[Change, ...]:
    """What Flux would delete: in the live inventory, gone from the build, still there."""
    if not item.stage.prune or not inventory:
        return ()
    assert item.head is not None
    kept = {obj.id for obj in item.head}
    gone = sorted((key, version) for key, version in inventory if key not in kept)
    await _prefetch(target, [(version, key) for key, version in gone])

    async def pruned(key: ObjectId, api_version: str) -> Change | None:
        try:
            resource = await target.discovery.resource(api_version, key.kind)
            if resource is None:
                return None
            live = await target.get(resource, key.namespace, key.name)
        except KubeError as error:
            raise ObjectError(f"{key}: cannot read it to plan its pruning: {error}") from None
        if live is None or annotation(live, PRUNE_ANNOTATION) == DISABLED:
            return None
        return Change("delete", key, api_version)

    found = await asyncio.gather(*(pruned(key, version) for key, version in gone))
    return tuple(change for change in found if change is not None)
