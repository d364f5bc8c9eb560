"""The generic managed reconciler: crossplane-runtime's loop, step for step.

It reads and writes the managed resource through ``ManagedAPI`` and the
external resource through a ``Connector``; it never touches a Kubernetes
client itself. Every failure ends in Synced=False with a message (never a
secret) and a rate-limited requeue; an unchanged resource gets no write.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from provider.managed import conditions, meta
from provider.managed.conditions import Condition
from provider.managed.external import Connector, ExternalClient, ManagedObject, Observation
from provider.managed.policy import DELETION_DELETE, Policies, UnsupportedPolicyError

ERR_CREATE_INCOMPLETE = (
    "cannot determine creation result - remove the "
    f"{meta.EXTERNAL_CREATE_PENDING} annotation if it is safe to proceed"
)
ERR_EXTERNAL_NOT_EXIST = "observe failed: external resource does not exist"

# Event reasons, as crossplane-runtime records them.
REASON_CANNOT_CONNECT = "CannotConnectToProvider"
REASON_CANNOT_INITIALIZE = "CannotInitializeManagedResource"
REASON_CANNOT_RESOLVE_REFS = "CannotResolveResourceReferences"
REASON_CANNOT_OBSERVE = "CannotObserveExternalResource"
REASON_CANNOT_CREATE = "CannotCreateExternalResource"
REASON_CANNOT_DELETE = "CannotDeleteExternalResource"
REASON_CANNOT_PUBLISH = "CannotPublishConnectionDetails"
REASON_CANNOT_UNPUBLISH = "CannotUnpublishConnectionDetails"
REASON_CANNOT_UPDATE = "CannotUpdateExternalResource"
REASON_CANNOT_UPDATE_MANAGED = "CannotUpdateManagedResource"
REASON_POLICY_INVALID = "CannotUseInvalidManagementPolicy"
REASON_DELETED = "DeletedExternalResource"
REASON_CREATED = "CreatedExternalResource"
REASON_UPDATED = "UpdatedExternalResource"
REASON_PAUSED = "ReconciliationPaused"
REASON_PENDING = "PendingExternalResource"
MESSAGE_PAUSED = (
    "Reconciliation is paused either through the `spec.managementPolicies` or the pause annotation"
)

NORMAL = "Normal"
WARNING = "Warning"

log = logging.getLogger(__name__)


class ConflictError(Exception):
    """The object changed since it was read; the reconcile is simply retried."""


class _ManagedWriteError(Exception):
    """Writing the managed resource's metadata or spec failed (not a conflict)."""


class ManagedAPI(Protocol):
    """The Kubernetes side of one kind of managed resource."""

    async def get(self, namespace: str, name: str) -> ManagedObject | None:
        """The resource, or None when it is gone."""
        ...

    async def update(self, managed: ManagedObject) -> ManagedObject:
        """Write metadata and spec; return the stored object. Raises ConflictError."""
        ...

    async def update_status(self, managed: ManagedObject) -> ManagedObject:
        """Write the status; return the stored object. Raises ConflictError."""
        ...

    async def publish_connection(
        self, managed: ManagedObject, details: Mapping[str, bytes]
    ) -> None:
        """Write the connection secret (owned by the resource) when its data changed."""
        ...

    async def unpublish_connection(self, managed: ManagedObject) -> None:
        """Delete the connection secret."""
        ...

    async def track_provider_config(self, managed: ManagedObject) -> None:
        """Record that the resource uses its provider config."""
        ...

    async def release_provider_config(self, managed: ManagedObject) -> None:
        """Forget that the resource uses its provider config."""
        ...

    async def event(self, managed: ManagedObject, type_: str, reason: str, message: str) -> None:
        """Record an event about the resource."""
        ...


class ReferenceResolver(Protocol):
    """Resolves a resource's references to other resources, as crossplane-runtime's."""

    async def resolve(self, managed: ManagedObject) -> bool:
        """Fill the referenced values into ``managed``'s spec; whether anything changed.

        Raises:
            Exception: A reference cannot be resolved; the message says which and why.
        """
        ...


@dataclass(frozen=True)
class Result:
    """When to reconcile again: after an error with backoff, after a delay, or on change."""

    requeue: bool = False
    requeue_after: float | None = None


def _merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Deep-merge ``patch`` into ``into``."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class Reconciler:
    """Reconciles one kind of managed resource with one backend."""

    def __init__(
        self,
        api: ManagedAPI,
        connector: Connector,
        *,
        poll_interval: float = 60.0,
        creation_grace_period: float = 30.0,
        short_wait: float = 5.0,
        external_name: Callable[[ManagedObject], str | None] = meta.default_external_name,
        deterministic_external_name: bool = False,
        references: ReferenceResolver | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Wire the reconciler to its Kubernetes side and its backend."""
        self.api = api
        self.connector = connector
        self.poll_interval = poll_interval
        self.creation_grace_period = creation_grace_period
        self.short_wait = short_wait
        self.external_name = external_name
        self.deterministic_external_name = deterministic_external_name
        self.references = references
        self.clock = clock

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Reconcile one managed resource."""
        managed = await self.api.get(namespace, name)
        if managed is None:
            return Result()
        try:
            return await _Run(self, managed).run_reporting()
        except ConflictError:
            # Someone wrote the object since we read it: read it again soon.
            return Result(requeue=True)


class _Run:
    """One reconcile of one resource: the state it carries between steps."""

    def __init__(self, reconciler: Reconciler, managed: ManagedObject) -> None:
        self.r = reconciler
        self.api = reconciler.api
        self.managed = managed
        self.observed_status = copy.deepcopy(managed.get("status") or {})
        spec = managed.get("spec") or {}
        # Only a cluster-scoped (legacy) resource has a deletion policy.
        legacy = not managed["metadata"].get("namespace")
        self.policies = Policies.of(
            spec.get("managementPolicies"),
            (spec.get("deletionPolicy") or DELETION_DELETE) if legacy else None,
        )
        # The Ready condition Observe reported, written with the Synced outcome.
        self.ready: list[Condition] = []
        # Metadata changed here but not written yet: a deterministic external
        # name and the finalizer wait for the next write (the create-pending one
        # when a create follows), so a new resource costs one write, not three.
        self.unsaved = False

    async def run_reporting(self) -> Result:
        """Run; a failed write of the resource itself is reported in its status."""
        try:
            return await self.run()
        except _ManagedWriteError as error:
            cause = error.__cause__ if isinstance(error.__cause__, Exception) else error
            return await self._failed(
                REASON_CANNOT_UPDATE_MANAGED, "cannot update managed resource", cause
            )

    async def run(self) -> Result:
        stopped = await self._preflight()
        if stopped is not None:
            return stopped
        try:
            await self.api.track_provider_config(self.managed)
            external = await self.r.connector.connect(self.managed)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001 (every backend failure is reported the same way)
            return await self._failed(REASON_CANNOT_CONNECT, "connect failed", error)
        try:
            observation = await external.observe(self.managed)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            return await self._failed(REASON_CANNOT_OBSERVE, "observe failed", error)
        if observation.ready is not None:
            self.ready = [observation.ready]
        if not observation.exists:
            if self.policies.should_only_observe:
                await self._event(
                    WARNING, REASON_CANNOT_OBSERVE, "external resource does not exist"
                )
                missing = conditions.reconcile_error(ERR_EXTERNAL_NOT_EXIST)
                return await self._finish(Result(requeue=True), missing)
            grace = meta.create_grace_left(
                self.managed, self.r.creation_grace_period, self.r.clock()
            )
            if grace > 0:
                # The backend may not list what it just made yet: look again soon. Not
                # a failure, so no growing backoff (crossplane-runtime's requeue): it
                # overshot the grace by up to a minute, holding a deletion as long.
                await self._event(
                    NORMAL,
                    REASON_PENDING,
                    "Waiting for external resource existence to be confirmed",
                )
                return Result(requeue_after=min(grace, self.r.short_wait))
        if meta.was_deleted(self.managed):
            if len(self.managed["metadata"].get("finalizers") or []) > 1:
                # Others still hold the resource: delete the external one last.
                return Result(requeue=True)
            return await self._delete(external, observation.exists)
        published = await self._publish(observation.connection_details)
        if published is not None:
            return published
        creating = not observation.exists and self.policies.should_create
        # A create writes the pending annotation before it calls the backend,
        # and the finalizer with it: the external resource never exists unguarded.
        await self._add_finalizer(write=not creating)
        if creating:
            return await self._create(external)
        return await self._converge(external, observation)

    async def _preflight(self) -> Result | None:
        """The checks before any backend call; a Result when the run stops there."""
        if meta.is_paused(self.managed) or self.policies.paused:
            await self._event(NORMAL, REASON_PAUSED, MESSAGE_PAUSED)
            return await self._finish(Result(), conditions.reconcile_paused())
        try:
            self.policies.validate()
        except UnsupportedPolicyError as error:
            await self._event(WARNING, REASON_POLICY_INVALID, str(error))
            return await self._finish(Result(), conditions.reconcile_error(str(error)))
        if meta.was_deleted(self.managed) and not self.policies.should_delete:
            return await self._orphan()
        await self._initialize()
        if self.r.references is not None and not meta.was_deleted(self.managed):
            try:
                changed = await self.r.references.resolve(self.managed)
            except ConflictError:
                raise
            except Exception as error:  # noqa: BLE001 (every resolution failure is reported)
                return await self._failed(
                    REASON_CANNOT_RESOLVE_REFS, "cannot resolve references", error
                )
            if changed:
                await self._write_metadata()
        # With a deterministic external name Observe finds what an interrupted
        # create made, so only an unpredictable name must stop here.
        if meta.create_incomplete(self.managed) and not self.r.deterministic_external_name:
            await self._event(WARNING, REASON_CANNOT_INITIALIZE, ERR_CREATE_INCOMPLETE)
            return await self._finish(
                Result(), conditions.creating(), conditions.reconcile_error(ERR_CREATE_INCOMPLETE)
            )
        return None

    async def _converge(self, external: ExternalClient, observation: Observation) -> Result:
        """The external resource exists: late-initialise, then correct drift if allowed."""
        if observation.late_init and self.policies.should_late_initialize:
            _merge(self.managed.setdefault("spec", {}), observation.late_init)
            await self._write_metadata()
        synced = (
            conditions.reconcile_error(observation.refused)
            if observation.refused
            else conditions.reconcile_success()
        )
        if observation.up_to_date or not self.policies.should_update:
            return await self._finish(self._poll(), *self.ready, synced)
        try:
            update = await external.update(self.managed)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            return await self._failed(REASON_CANNOT_UPDATE, "update failed", error)
        await self._event(
            NORMAL, REASON_UPDATED, "Successfully requested update of external resource"
        )
        published = await self._publish(update.connection_details)
        if published is not None:
            return published
        return await self._finish(self._poll(), *self.ready, synced)

    async def _publish(self, details: Mapping[str, bytes]) -> Result | None:
        """Publish connection details; a Result when that failed."""
        try:
            await self.api.publish_connection(self.managed, details)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            return await self._failed(
                REASON_CANNOT_PUBLISH, "cannot publish connection details", error
            )
        return None

    # Steps.

    async def _initialize(self) -> None:
        """Default the external name, as crossplane-runtime's initializer does.

        An ``external_name`` of None leaves it to the backend to name the
        resource on create (upjet's identifier-from-provider kinds).
        """
        metadata = self.managed["metadata"]
        if meta.external_name(self.managed):
            return
        name = self.r.external_name(self.managed)
        if name is None:
            return
        metadata.setdefault("annotations", {})[meta.EXTERNAL_NAME] = name
        if self.r.deterministic_external_name:
            # Every run computes the same name, so it need not be written before
            # Observe; it is written with the finalizer, before any create.
            self.unsaved = True
            return
        await self._write_metadata()

    async def _add_finalizer(self, *, write: bool = True) -> None:
        """Add the finalizer; written now unless ``write`` is False (a later write carries it)."""
        finalizers = self.managed["metadata"].setdefault("finalizers", [])
        if meta.FINALIZER not in finalizers:
            finalizers.append(meta.FINALIZER)
            self.unsaved = True
        if self.unsaved and write:
            await self._write_metadata()

    async def _remove_finalizer(self) -> None:
        finalizers = self.managed["metadata"].get("finalizers") or []
        if meta.FINALIZER in finalizers:
            self.managed["metadata"]["finalizers"] = [f for f in finalizers if f != meta.FINALIZER]
            await self._write_metadata()

    async def _write_metadata(self) -> None:
        """Write metadata and spec, keeping the status this run is building."""
        status = self.managed.get("status")
        self.unsaved = False
        try:
            self.managed = await self.api.update(self.managed)
        except ConflictError:
            raise
        except Exception as error:
            raise _ManagedWriteError from error
        if status is not None:
            self.managed["status"] = status

    async def _orphan(self) -> Result:
        """Deleted without the Delete policy: let go of the external resource."""
        try:
            await self.api.unpublish_connection(self.managed)
            await self.api.release_provider_config(self.managed)
            await self._remove_finalizer()
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            return await self._failed(
                REASON_CANNOT_UNPUBLISH, "cannot release", error, conditions.deleting()
            )
        return Result()

    async def _delete(self, external: ExternalClient, exists: bool) -> Result:
        if exists and self.policies.should_delete:
            try:
                await external.delete(self.managed)
            except ConflictError:
                raise
            except Exception as error:  # noqa: BLE001
                return await self._failed(
                    REASON_CANNOT_DELETE, "delete failed", error, conditions.deleting()
                )
            await self._event(
                NORMAL, REASON_DELETED, "Successfully requested deletion of external resource"
            )
            return await self._finish(
                Result(requeue_after=self.r.short_wait),
                conditions.deleting(),
                conditions.reconcile_success(),
            )
        return await self._orphan()

    async def _create(self, external: ExternalClient) -> Result:
        # Record that a create is under way before making the call, so that a
        # crash between the call and recording its result never creates twice.
        self.managed["metadata"].setdefault("annotations", {})[meta.EXTERNAL_CREATE_PENDING] = (
            meta.timestamp(self.r.clock())
        )
        await self._write_metadata()
        try:
            creation = await external.create(self.managed)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            await self._annotate(meta.EXTERNAL_CREATE_FAILED)
            return await self._failed(
                REASON_CANNOT_CREATE, "create failed", error, conditions.creating()
            )
        await self._event(
            NORMAL, REASON_CREATED, "Successfully requested creation of external resource"
        )
        await self._annotate(meta.EXTERNAL_CREATE_SUCCEEDED)
        try:
            await self.api.publish_connection(self.managed, creation.connection_details)
        except ConflictError:
            raise
        except Exception as error:  # noqa: BLE001
            return await self._failed(
                REASON_CANNOT_PUBLISH, "cannot publish connection details", error
            )
        return await self._finish(
            Result(requeue_after=self.r.short_wait),
            conditions.creating(),
            conditions.reconcile_success(),
        )

    async def _annotate(self, key: str) -> None:
        """Record a create result; retried on conflict since losing it would block creation."""
        stamp = meta.timestamp(self.r.clock())
        for _ in range(3):
            self.managed["metadata"].setdefault("annotations", {})[key] = stamp
            try:
                await self._write_metadata()
                return
            except ConflictError:
                fresh = await self.api.get(
                    self.managed["metadata"].get("namespace", ""), self.managed["metadata"]["name"]
                )
                if fresh is None:
                    return
                fresh["metadata"].setdefault("annotations", {}).update(
                    self.managed["metadata"].get("annotations", {})
                )
                fresh["status"] = self.managed.get("status")
                self.managed = fresh
        await self._write_metadata()

    # Outcomes.

    def _poll(self) -> Result:
        return Result(requeue_after=self.r.poll_interval)

    async def _failed(self, reason: str, what: str, error: Exception, *extra: Condition) -> Result:
        message = f"{what}: {error}"
        log.warning(
            "reconcile failed",
            extra={"fields": {"resource": self._key(), "reason": reason, "error": message}},
        )
        await self._event(WARNING, reason, message)
        # Observe's Ready stands whatever failed after it (crossplane-runtime's
        # Observe sets it on the resource itself); an explicit one (Creating,
        # Deleting) comes after it and wins.
        return await self._finish(
            Result(requeue=True), *self.ready, *extra, conditions.reconcile_error(message)
        )

    async def _finish(self, result: Result, *updates: Condition) -> Result:
        """Write the status only when it changed."""
        status = self.managed.setdefault("status", {})
        status["conditions"] = conditions.merged(
            status.get("conditions") or [],
            updates,
            int(self.managed["metadata"].get("generation") or 0),
            self.r.clock(),
        )
        if status != self.observed_status:
            self.managed = await self.api.update_status(self.managed)
        return result

    async def _event(self, type_: str, reason: str, message: str) -> None:
        try:
            await self.api.event(self.managed, type_, reason, message)
        except Exception:  # noqa: BLE001 (an event is best effort)
            log.debug("cannot record event", extra={"fields": {"resource": self._key()}})

    def _key(self) -> str:
        metadata = self.managed["metadata"]
        return f"{metadata.get('namespace', '')}/{metadata['name']}"
