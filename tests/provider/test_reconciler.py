"""The generic managed reconciler against in-memory fakes of its Kubernetes side and backend.

Expected outcomes follow crossplane-runtime v2.2.1's managed ``Reconciler.Reconcile``
(``pkg/reconciler/managed/reconciler.go``): condition types, reasons, messages
and event reasons are written out here rather than taken from our module.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provider.managed import conditions
from provider.managed.external import Creation, ManagedObject, Observation, Update
from provider.managed.reconciler import ConflictError, Reconciler, Result

FINALIZER = "finalizer.managedresource.crossplane.io"
EXTERNAL_NAME = "crossplane.io/external-name"
PENDING = "crossplane.io/external-create-pending"
SUCCEEDED = "crossplane.io/external-create-succeeded"
FAILED = "crossplane.io/external-create-failed"
PAUSED = "crossplane.io/paused"

NAMESPACE = "team-a"
NAME = "cp"
GENERATION = 2
NOW = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
STAMP = "2024-05-01T10:00:00Z"
EARLIER_STAMP = "2024-05-01T09:00:00Z"
POLL = 60.0
SHORT_WAIT = 5.0
GRACE = 30.0

NORMAL = "Normal"
WARNING = "Warning"

ERR_CREATE_INCOMPLETE = (
    "cannot determine creation result - remove the crossplane.io/external-create-pending "
    "annotation if it is safe to proceed"
)

UP_TO_DATE = Observation(
    exists=True,
    up_to_date=True,
    ready=conditions.available(),
    connection_details={"endpoint": b"https://cp.example"},
)
DRIFTED = Observation(exists=True, up_to_date=False, ready=conditions.available())
MISSING = Observation(exists=False)

# Everything that reaches the backend.
BACKEND = ("connect", "external.observe", "external.create", "external.update", "external.delete")
EXTERNAL_WRITES = ("external.create", "external.update", "external.delete")


class BackendError(Exception):
    """A backend failure."""


@dataclass
class Recorder:
    """Every call to the fakes, in order, with a snapshot of the resource it was given."""

    calls: list[tuple[str, ManagedObject]] = field(default_factory=list)

    def record(self, name: str, managed: ManagedObject) -> None:
        self.calls.append((name, copy.deepcopy(managed)))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


class FakeAPI:
    """A ManagedAPI holding one stored object; ``update`` never writes the status."""

    def __init__(
        self,
        recorder: Recorder,
        stored: ManagedObject,
        conflict_on: frozenset[str] = frozenset(),
        errors: Mapping[str, Exception] | None = None,
    ) -> None:
        self.recorder = recorder
        self.stored: ManagedObject | None = copy.deepcopy(stored)
        self.conflict_on = conflict_on
        self.errors = dict(errors or {})
        self.events: list[tuple[str, str, str]] = []
        self.published: list[dict[str, bytes]] = []

    def _conflict(self, name: str) -> None:
        if name in self.errors:
            raise self.errors[name]
        if name in self.conflict_on:
            msg = f"{name}: the object has been modified"
            raise ConflictError(msg)

    def _stored(self) -> ManagedObject:
        assert self.stored is not None, "the resource was written after it was gone"
        return self.stored

    async def get(self, namespace: str, name: str) -> ManagedObject | None:
        return copy.deepcopy(self.stored)

    async def update(self, managed: ManagedObject) -> ManagedObject:
        self.recorder.record("api.update", managed)
        self._conflict("api.update")
        fresh = copy.deepcopy(managed)
        fresh.pop("status", None)
        status = self._stored().get("status")
        if status is not None:
            fresh["status"] = copy.deepcopy(status)
        self.stored = fresh
        return copy.deepcopy(fresh)

    async def update_status(self, managed: ManagedObject) -> ManagedObject:
        self.recorder.record("api.update_status", managed)
        self._conflict("api.update_status")
        self._stored()["status"] = copy.deepcopy(managed.get("status"))
        return copy.deepcopy(self._stored())

    async def publish_connection(
        self, managed: ManagedObject, details: Mapping[str, bytes]
    ) -> None:
        self.recorder.record("api.publish_connection", managed)
        self._conflict("api.publish_connection")
        self.published.append(dict(details))

    async def unpublish_connection(self, managed: ManagedObject) -> None:
        self.recorder.record("api.unpublish_connection", managed)

    async def track_provider_config(self, managed: ManagedObject) -> None:
        self.recorder.record("api.track_provider_config", managed)

    async def release_provider_config(self, managed: ManagedObject) -> None:
        self.recorder.record("api.release_provider_config", managed)

    async def event(self, managed: ManagedObject, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


class FakeExternal:
    """An ExternalClient returning a fixed observation; ``errors`` names the calls that fail."""

    def __init__(
        self,
        recorder: Recorder,
        observation: Observation | Exception,
        errors: Mapping[str, Exception],
    ) -> None:
        self.recorder = recorder
        self.observation = observation
        self.errors = errors

    def _call(self, name: str, managed: ManagedObject) -> None:
        self.recorder.record(name, managed)
        if name in self.errors:
            raise self.errors[name]

    async def observe(self, managed: ManagedObject) -> Observation:
        self.recorder.record("external.observe", managed)
        if isinstance(self.observation, Exception):
            raise self.observation
        return self.observation

    async def create(self, managed: ManagedObject) -> Creation:
        self._call("external.create", managed)
        return Creation(connection_details={"endpoint": b"https://cp.example"})

    async def update(self, managed: ManagedObject) -> Update:
        self._call("external.update", managed)
        return Update()

    async def delete(self, managed: ManagedObject) -> None:
        self._call("external.delete", managed)


class FakeConnector:
    """A Connector handing out one FakeExternal, or failing to connect."""

    def __init__(
        self, recorder: Recorder, external: FakeExternal, error: Exception | None = None
    ) -> None:
        self.recorder = recorder
        self.external = external
        self.error = error

    async def connect(self, managed: ManagedObject) -> FakeExternal:
        self.recorder.record("connect", managed)
        if self.error is not None:
            raise self.error
        return self.external


class FakeReferences:
    """A ReferenceResolver that fills ``forProvider.bucket``, or fails with ``error``."""

    def __init__(self, value: str = "", error: Exception | None = None) -> None:
        self.value = value
        self.error = error
        self.recorder: Recorder | None = None

    async def resolve(self, managed: ManagedObject) -> bool:
        assert self.recorder is not None
        self.recorder.record("references.resolve", managed)
        if self.error is not None:
            raise self.error
        for_provider = managed["spec"]["forProvider"]
        changed = bool(for_provider.get("bucket") != self.value)
        for_provider["bucket"] = self.value
        return changed


class MovingClock:
    """A clock the test moves forward."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class World:
    """A reconciler wired to fakes, and what they saw."""

    recorder: Recorder
    api: FakeAPI
    reconciler: Reconciler
    clock: MovingClock

    def run(self, namespace: str = NAMESPACE, name: str = NAME) -> Result:
        return asyncio.run(self.reconciler.reconcile(namespace, name))

    def stored(self) -> ManagedObject:
        assert self.api.stored is not None
        return self.api.stored

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        return conditions.find((self.stored().get("status") or {}).get("conditions") or [], type_)


def world(
    stored: ManagedObject,
    *,
    observation: Observation | Exception = UP_TO_DATE,
    connect_error: Exception | None = None,
    errors: Mapping[str, Exception] | None = None,
    conflict_on: frozenset[str] = frozenset(),
    deterministic_external_name: bool = False,
    references: FakeReferences | None = None,
    external_name: Callable[[ManagedObject], str | None] | None = None,
) -> World:
    recorder = Recorder()
    if references is not None:
        references.recorder = recorder
    api = FakeAPI(recorder, stored, conflict_on, errors)
    external = FakeExternal(recorder, observation, errors or {})
    clock = MovingClock(NOW)
    reconciler = Reconciler(
        api,
        FakeConnector(recorder, external, connect_error),
        poll_interval=POLL,
        creation_grace_period=GRACE,
        short_wait=SHORT_WAIT,
        deterministic_external_name=deterministic_external_name,
        references=references,
        clock=clock,
        **({"external_name": external_name} if external_name is not None else {}),
    )
    return World(recorder, api, reconciler, clock)


def managed(
    *,
    policies: list[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    external_name: str | None = "team-a-cp",
    finalizers: tuple[str, ...] = (FINALIZER,),
    deleted: bool = False,
    namespace: str | None = NAMESPACE,
) -> ManagedObject:
    """A managed resource; by default already initialised (external name and finalizer)."""
    metadata: dict[str, Any] = {
        "name": NAME,
        "generation": GENERATION,
        "resourceVersion": "1",
        "annotations": dict(annotations or {}),
        "finalizers": list(finalizers),
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    if external_name is not None:
        metadata["annotations"][EXTERNAL_NAME] = external_name
    if deleted:
        metadata["deletionTimestamp"] = EARLIER_STAMP
    spec: dict[str, Any] = {"forProvider": {"size": "small"}}
    if policies is not None:
        spec["managementPolicies"] = policies
    return {
        "apiVersion": "acme.io/v1alpha1",
        "kind": "Instance",
        "metadata": metadata,
        "spec": spec,
    }


ALL_BUT_DELETE = ["Observe", "Create", "Update", "LateInitialize"]
ALL_BUT_UPDATE = ["Observe", "Create", "Delete", "LateInitialize"]
ALL_BUT_LATE_INIT = ["Observe", "Create", "Update", "Delete"]


@dataclass
class ReconcileCase:
    reason: str
    managed: ManagedObject
    result: Result
    # The Synced condition written, as (reason, message regex); None: none written.
    synced: tuple[str, str] | None
    # The reason of the Ready condition written; None: none written.
    ready: str | None = None
    observation: Observation | Exception = UP_TO_DATE
    connect_error: Exception | None = None
    errors: dict[str, Exception] = field(default_factory=dict)
    conflict_on: frozenset[str] = frozenset()
    deterministic_external_name: bool = False
    called: tuple[str, ...] = ()
    not_called: tuple[str, ...] = ()
    # (type, reason) of an event that must have been recorded.
    event: tuple[str, str] | None = None
    # Annotations expected on the stored object; None: the annotation must be absent.
    annotations: dict[str, str | None] = field(default_factory=dict)
    finalizers: list[str] | None = None
    spec: dict[str, Any] | None = None


CASES = [
    ReconcileCase(
        reason="deleting waits while other finalizers still hold the resource",
        managed=managed(deleted=True, finalizers=(FINALIZER, "example.org/other")),
        result=Result(requeue=True),
        synced=None,
        not_called=("external.delete", "api.update"),
    ),
    ReconcileCase(
        reason="a missing resource with Update but no Create is updated, as in crossplane-runtime",
        managed=managed(policies=["Observe", "Update"]),
        observation=MISSING,
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        called=("external.update",),
        not_called=("external.create",),
    ),
    ReconcileCase(
        reason="a failed write of the resource itself is reported in its status",
        managed=managed(external_name=None),
        errors={"api.update": BackendError("admission webhook denied the request")},
        result=Result(requeue=True),
        synced=("ReconcileError", "cannot update managed resource: admission webhook denied.*"),
        not_called=BACKEND,
        event=(WARNING, "CannotUpdateManagedResource"),
    ),
    ReconcileCase(
        reason="the paused annotation pauses without reaching the backend",
        managed=managed(annotations={PAUSED: "true"}),
        result=Result(),
        synced=("ReconcilePaused", ""),
        called=("api.update_status",),
        not_called=(*BACKEND, "api.track_provider_config", "api.update"),
        event=(NORMAL, "ReconciliationPaused"),
    ),
    ReconcileCase(
        reason="empty management policies pause without reaching the backend",
        managed=managed(policies=[]),
        result=Result(),
        synced=("ReconcilePaused", ""),
        not_called=(*BACKEND, "api.track_provider_config"),
        event=(NORMAL, "ReconciliationPaused"),
    ),
    ReconcileCase(
        reason="the paused annotation pauses even a resource being deleted",
        managed=managed(annotations={PAUSED: "true"}, deleted=True),
        result=Result(),
        synced=("ReconcilePaused", ""),
        not_called=(*BACKEND, "api.unpublish_connection"),
        finalizers=[FINALIZER],
    ),
    ReconcileCase(
        reason="an unsupported management policy is refused naming the field",
        managed=managed(policies=["Create"]),
        result=Result(),
        synced=("ReconcileError", r".*spec\.managementPolicies.*\[Create\].*not supported.*"),
        not_called=(*BACKEND, "api.track_provider_config"),
        event=(WARNING, "CannotUseInvalidManagementPolicy"),
    ),
    ReconcileCase(
        reason="a connect error is reported and requeued with backoff",
        managed=managed(),
        connect_error=BackendError("no credentials"),
        result=Result(requeue=True),
        synced=("ReconcileError", "connect failed: no credentials"),
        called=("connect",),
        not_called=("external.observe", *EXTERNAL_WRITES),
        event=(WARNING, "CannotConnectToProvider"),
    ),
    ReconcileCase(
        reason="an observe error is reported and requeued with backoff",
        managed=managed(),
        observation=BackendError("timed out"),
        result=Result(requeue=True),
        synced=("ReconcileError", "observe failed: timed out"),
        called=("external.observe",),
        not_called=EXTERNAL_WRITES,
        event=(WARNING, "CannotObserveExternalResource"),
    ),
    ReconcileCase(
        reason="observe only on a missing resource reports that it does not exist",
        managed=managed(policies=["Observe"]),
        observation=MISSING,
        result=Result(requeue=True),
        synced=("ReconcileError", "observe failed: external resource does not exist"),
        not_called=EXTERNAL_WRITES,
        event=(WARNING, "CannotObserveExternalResource"),
    ),
    ReconcileCase(
        reason="a missing resource is created and marked creating",
        managed=managed(finalizers=()),
        observation=MISSING,
        result=Result(requeue_after=SHORT_WAIT),
        synced=("ReconcileSuccess", ""),
        ready="Creating",
        called=("external.create", "api.publish_connection"),
        not_called=("external.update", "external.delete"),
        event=(NORMAL, "CreatedExternalResource"),
        annotations={PENDING: STAMP, SUCCEEDED: STAMP, FAILED: None},
        finalizers=[FINALIZER],
    ),
    ReconcileCase(
        reason="a create error records the failure and is requeued with backoff",
        managed=managed(),
        observation=MISSING,
        errors={"external.create": BackendError("quota exceeded")},
        result=Result(requeue=True),
        synced=("ReconcileError", "create failed: quota exceeded"),
        ready="Creating",
        called=("external.create",),
        event=(WARNING, "CannotCreateExternalResource"),
        annotations={PENDING: STAMP, FAILED: STAMP, SUCCEEDED: None},
    ),
    ReconcileCase(
        reason="an incomplete create with an unpredictable name is refused",
        managed=managed(annotations={PENDING: EARLIER_STAMP}),
        observation=MISSING,
        result=Result(),
        synced=("ReconcileError", re.escape(ERR_CREATE_INCOMPLETE)),
        ready="Creating",
        not_called=BACKEND,
        annotations={PENDING: EARLIER_STAMP, SUCCEEDED: None, FAILED: None},
    ),
    ReconcileCase(
        reason="an incomplete create with a deterministic name observes instead",
        managed=managed(annotations={PENDING: EARLIER_STAMP}),
        deterministic_external_name=True,
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        called=("external.observe",),
        not_called=EXTERNAL_WRITES,
    ),
    ReconcileCase(
        reason="an incomplete create with a deterministic name that is missing creates again",
        managed=managed(annotations={PENDING: EARLIER_STAMP}),
        deterministic_external_name=True,
        observation=MISSING,
        result=Result(requeue_after=SHORT_WAIT),
        synced=("ReconcileSuccess", ""),
        ready="Creating",
        called=("external.observe", "external.create"),
        annotations={PENDING: STAMP, SUCCEEDED: STAMP},
    ),
    ReconcileCase(
        reason="a resource just created but not yet visible is looked at again soon",
        managed=managed(
            annotations={PENDING: "2024-05-01T09:59:50Z", SUCCEEDED: "2024-05-01T09:59:51Z"}
        ),
        observation=MISSING,
        result=Result(requeue_after=SHORT_WAIT),
        synced=None,
        not_called=EXTERNAL_WRITES,
        event=(NORMAL, "PendingExternalResource"),
    ),
    ReconcileCase(
        reason="a resource not yet visible near the end of its grace is looked at when it ends",
        managed=managed(
            annotations={PENDING: "2024-05-01T09:59:28Z", SUCCEEDED: "2024-05-01T09:59:32Z"}
        ),
        observation=MISSING,
        result=Result(requeue_after=2.0),
        synced=None,
        not_called=EXTERNAL_WRITES,
        event=(NORMAL, "PendingExternalResource"),
    ),
    ReconcileCase(
        reason="an existing up to date resource succeeds and is polled",
        managed=managed(),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        called=("api.track_provider_config", "external.observe", "api.publish_connection"),
        not_called=(*EXTERNAL_WRITES, "api.update"),
    ),
    ReconcileCase(
        reason="a drifted resource is updated when update is allowed",
        managed=managed(),
        observation=DRIFTED,
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        called=("external.update",),
        not_called=("external.create", "external.delete"),
        event=(NORMAL, "UpdatedExternalResource"),
    ),
    ReconcileCase(
        reason="a drifted resource is left alone when update is not allowed",
        managed=managed(policies=ALL_BUT_UPDATE),
        observation=DRIFTED,
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        not_called=EXTERNAL_WRITES,
    ),
    ReconcileCase(
        reason="an update error is reported and requeued with backoff",
        managed=managed(),
        observation=DRIFTED,
        errors={"external.update": BackendError("conflicting change")},
        result=Result(requeue=True),
        synced=("ReconcileError", "update failed: conflicting change"),
        # Observe's Available stands, as in crossplane-runtime.
        ready="Available",
        event=(WARNING, "CannotUpdateExternalResource"),
    ),
    ReconcileCase(
        reason="late initialised fields are merged and written when allowed",
        managed=managed(),
        observation=Observation(exists=True, late_init={"forProvider": {"region": "eu-west-1"}}),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        called=("api.update",),
        spec={"forProvider": {"size": "small", "region": "eu-west-1"}},
    ),
    ReconcileCase(
        reason="late initialised fields are neither merged nor written when not allowed",
        managed=managed(policies=ALL_BUT_LATE_INIT),
        observation=Observation(exists=True, late_init={"forProvider": {"region": "eu-west-1"}}),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        not_called=("api.update",),
        spec={"forProvider": {"size": "small"}, "managementPolicies": ALL_BUT_LATE_INIT},
    ),
    ReconcileCase(
        reason="a deleted resource that exists is deleted when delete is allowed",
        managed=managed(deleted=True),
        result=Result(requeue_after=SHORT_WAIT),
        synced=("ReconcileSuccess", ""),
        ready="Deleting",
        called=("external.delete",),
        not_called=("external.create", "external.update", "api.unpublish_connection"),
        event=(NORMAL, "DeletedExternalResource"),
        finalizers=[FINALIZER],
    ),
    ReconcileCase(
        reason="a delete error is reported and requeued with backoff",
        managed=managed(deleted=True),
        errors={"external.delete": BackendError("in use")},
        result=Result(requeue=True),
        synced=("ReconcileError", "delete failed: in use"),
        ready="Deleting",
        event=(WARNING, "CannotDeleteExternalResource"),
        finalizers=[FINALIZER],
    ),
    ReconcileCase(
        reason="a deleted resource whose external resource is gone is finalized",
        managed=managed(deleted=True),
        observation=MISSING,
        result=Result(),
        synced=None,
        called=("api.unpublish_connection", "api.release_provider_config"),
        not_called=EXTERNAL_WRITES,
        finalizers=[],
    ),
    ReconcileCase(
        reason="a deleted resource without the delete policy orphans its external resource",
        managed=managed(policies=ALL_BUT_DELETE, deleted=True),
        result=Result(),
        synced=None,
        called=("api.unpublish_connection", "api.release_provider_config"),
        not_called=(*BACKEND, "api.track_provider_config"),
        finalizers=[],
    ),
    ReconcileCase(
        reason="a missing external name defaults to the namespace, the name and their hash",
        managed=managed(external_name=None),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        called=("api.update",),
        annotations={EXTERNAL_NAME: "team-a-cp-f3329163"},
    ),
    ReconcileCase(
        reason="a cluster scoped resource's external name defaults to its name",
        managed=managed(external_name=None, namespace=None),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        annotations={EXTERNAL_NAME: "cp"},
    ),
    ReconcileCase(
        reason="an existing external name is kept",
        managed=managed(external_name="imported-cp"),
        result=Result(requeue_after=POLL),
        synced=("ReconcileSuccess", ""),
        ready="Available",
        not_called=("api.update",),
        annotations={EXTERNAL_NAME: "imported-cp"},
    ),
    ReconcileCase(
        reason="a conflict writing the resource is retried without a status write",
        managed=managed(external_name=None),
        conflict_on=frozenset({"api.update"}),
        result=Result(requeue=True),
        synced=None,
        called=("api.update",),
        not_called=(*BACKEND, "api.update_status"),
    ),
    ReconcileCase(
        reason="a conflict while connecting is retried without a status write",
        managed=managed(),
        connect_error=ConflictError("the object has been modified"),
        result=Result(requeue=True),
        synced=None,
        not_called=("external.observe", "api.update_status"),
    ),
    ReconcileCase(
        reason="a backend refusing the resource is Synced=False in its words, beside its Ready",
        managed=managed(),
        observation=Observation(
            exists=True,
            up_to_date=True,
            ready=conditions.unavailable("not yet"),
            refused="the Space refused the ControlPlane: class small is unknown",
        ),
        result=Result(requeue_after=POLL),
        synced=("ReconcileError", "the Space refused the ControlPlane: class small is unknown"),
        ready="Unavailable",
        not_called=("external.update",),
    ),
    ReconcileCase(
        reason="a refused resource is still updated, since a corrected spec is the cure",
        managed=managed(),
        observation=Observation(
            exists=True, up_to_date=False, ready=conditions.available(), refused="refused: x"
        ),
        result=Result(requeue_after=POLL),
        synced=("ReconcileError", "refused: x"),
        ready="Available",
        called=("external.update",),
    ),
    ReconcileCase(
        reason="a conflict writing the status is retried",
        managed=managed(),
        conflict_on=frozenset({"api.update_status"}),
        result=Result(requeue=True),
        synced=None,
        called=("api.update_status",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_a_reconcile_ends_as_crossplane_runtimes_would(case: ReconcileCase) -> None:
    w = world(
        case.managed,
        observation=case.observation,
        connect_error=case.connect_error,
        errors=case.errors,
        conflict_on=case.conflict_on,
        deterministic_external_name=case.deterministic_external_name,
    )

    result = w.run(NAMESPACE if "namespace" in case.managed["metadata"] else "")

    assert result == case.result
    calls = w.recorder.names()
    for name in case.called:
        assert name in calls, f"{name} was not called; calls: {calls}"
    for name in case.not_called:
        assert name not in calls, f"{name} was called; calls: {calls}"

    synced = w.condition("Synced")
    if case.synced is None:
        assert synced is None, f"unexpected Synced condition {synced}"
    else:
        assert synced is not None, "no Synced condition was written"
        reason, message = case.synced
        assert synced["status"] == ("True" if reason == "ReconcileSuccess" else "False")
        assert synced["reason"] == reason
        assert re.fullmatch(message, synced.get("message", "")), synced.get("message")
        assert synced["observedGeneration"] == GENERATION
    ready = w.condition("Ready")
    assert (ready or {}).get("reason") == case.ready

    if case.event is not None:
        events = [(type_, reason) for type_, reason, _ in w.api.events]
        assert case.event in events, f"no {case.event} event; events: {w.api.events}"
    annotations = w.stored()["metadata"].get("annotations") or {}
    for key, value in case.annotations.items():
        assert annotations.get(key) == value, f"{key}: {annotations}"
    if case.finalizers is not None:
        assert w.stored()["metadata"].get("finalizers") == case.finalizers
    if case.spec is not None:
        assert w.stored()["spec"] == case.spec


def test_the_create_pending_annotation_is_written_before_create_and_success_after_it() -> None:
    w = world(managed(), observation=MISSING)

    w.run()

    calls = w.recorder.calls
    names = w.recorder.names()
    create = names.index("external.create")
    pending_writes = [
        index
        for index, (name, obj) in enumerate(calls)
        if name == "api.update" and PENDING in obj["metadata"]["annotations"]
    ]
    success_writes = [
        index
        for index, (name, obj) in enumerate(calls)
        if name == "api.update" and SUCCEEDED in obj["metadata"]["annotations"]
    ]
    assert pending_writes, f"the pending annotation was never written; calls: {names}"
    assert pending_writes[0] < create, f"create came before the pending write; calls: {names}"
    assert calls[create][1]["metadata"]["annotations"][PENDING] == STAMP
    assert SUCCEEDED not in calls[create][1]["metadata"]["annotations"]
    assert success_writes, f"the success annotation was never written; calls: {names}"
    assert success_writes[0] > create


@dataclass
class FirstWritesCase:
    reason: str
    deterministic_external_name: bool
    observation: Observation
    # What each metadata write of a new resource's first reconcile holds, in order.
    writes: list[set[str]]
    # The backend call the first write must come before.
    first_before: str


NAME_ONLY = {EXTERNAL_NAME}
NAME_AND_FINALIZER = {EXTERNAL_NAME, FINALIZER}
READY_TO_CREATE = {EXTERNAL_NAME, FINALIZER, PENDING}
CREATED = {EXTERNAL_NAME, FINALIZER, PENDING, SUCCEEDED}

FIRST_WRITES_CASES = [
    FirstWritesCase(
        "a deterministic name and the finalizer go with the pending annotation, before the create",
        deterministic_external_name=True,
        observation=MISSING,
        writes=[READY_TO_CREATE, CREATED],
        first_before="external.create",
    ),
    FirstWritesCase(
        "a deterministic name goes with the finalizer in one write when nothing is created",
        deterministic_external_name=True,
        observation=UP_TO_DATE,
        writes=[NAME_AND_FINALIZER],
        first_before="api.update_status",
    ),
    FirstWritesCase(
        "an unpredictable name is written before Observe, as crossplane-runtime does",
        deterministic_external_name=False,
        observation=MISSING,
        writes=[NAME_ONLY, READY_TO_CREATE, CREATED],
        first_before="external.observe",
    ),
]


@pytest.mark.parametrize("case", FIRST_WRITES_CASES, ids=lambda case: case.reason)
def test_a_new_resource_is_written_as_few_times_as_its_guarantees_allow(
    case: FirstWritesCase,
) -> None:
    w = world(
        managed(external_name=None, finalizers=()),
        observation=case.observation,
        deterministic_external_name=case.deterministic_external_name,
    )

    w.run()

    calls = w.recorder.calls
    names = w.recorder.names()
    writes = [(index, obj) for index, (name, obj) in enumerate(calls) if name == "api.update"]
    held = [
        {
            key
            for key in (EXTERNAL_NAME, PENDING, SUCCEEDED)
            if key in obj["metadata"]["annotations"]
        }
        | ({FINALIZER} & set(obj["metadata"].get("finalizers") or []))
        for _, obj in writes
    ]
    assert held == case.writes, f"calls: {names}"
    assert writes[0][0] < names.index(case.first_before), f"calls: {names}"


def test_the_connection_details_of_a_create_are_published() -> None:
    w = world(managed(), observation=MISSING)

    w.run()

    assert {"endpoint": b"https://cp.example"} in w.api.published


@dataclass
class TwiceCase:
    reason: str
    managed: ManagedObject
    observation: Observation | Exception = UP_TO_DATE
    connect_error: Exception | None = None


TWICE_CASES = [
    TwiceCase("an up to date resource", managed()),
    TwiceCase(
        "a new resource that gets its name and finalizer",
        managed(external_name=None, finalizers=()),
    ),
    TwiceCase(
        "a resource that cannot connect", managed(), connect_error=BackendError("no credentials")
    ),
    TwiceCase("a resource whose observe fails", managed(), observation=BackendError("timed out")),
    TwiceCase("a paused resource", managed(annotations={PAUSED: "true"})),
    TwiceCase("a resource with an unsupported policy", managed(policies=["Delete"])),
    TwiceCase(
        "a drifted resource that may not be updated", managed(policies=ALL_BUT_UPDATE), DRIFTED
    ),
]


@pytest.mark.parametrize("case", TWICE_CASES, ids=lambda case: case.reason)
def test_a_second_reconcile_with_nothing_changed_writes_nothing(case: TwiceCase) -> None:
    w = world(case.managed, observation=case.observation, connect_error=case.connect_error)
    first = w.run()
    after_first = copy.deepcopy(w.stored())
    assert "api.update_status" in w.recorder.names(), "the first reconcile wrote no status"
    w.recorder.calls.clear()
    w.clock.now = NOW + timedelta(minutes=5)

    second = w.run()

    writes = [name for name in w.recorder.names() if name in ("api.update", "api.update_status")]
    assert writes == [], f"an unchanged resource was written: {writes}"
    assert second == first
    assert w.stored() == after_first
    for condition in w.stored()["status"]["conditions"]:
        assert condition["lastTransitionTime"] == STAMP


def test_a_changed_outcome_on_the_second_reconcile_is_written_with_a_new_time() -> None:
    w = world(managed(), connect_error=BackendError("no credentials"))
    w.run()
    w.reconciler.connector = FakeConnector(
        w.recorder, FakeExternal(w.recorder, UP_TO_DATE, {}), None
    )
    w.clock.now = NOW + timedelta(minutes=5)
    w.recorder.calls.clear()

    w.run()

    assert "api.update_status" in w.recorder.names()
    synced = w.condition("Synced")
    assert synced is not None
    assert synced["reason"] == "ReconcileSuccess"
    assert synced["lastTransitionTime"] == "2024-05-01T10:05:00Z"


def test_a_resource_that_is_gone_is_not_reconciled() -> None:
    w = world(managed())
    w.api.stored = None

    assert w.run() == Result()
    assert w.recorder.names() == []


def test_a_connect_error_is_recorded_as_one_warning_event_with_the_wrapped_message() -> None:
    w = world(managed(), connect_error=BackendError("no credentials"))

    w.run()

    assert w.api.events == [(WARNING, "CannotConnectToProvider", "connect failed: no credentials")]


def test_references_are_resolved_before_connecting_and_the_resolved_spec_is_written() -> None:
    w = world(managed(), references=FakeReferences("my-bucket"))

    w.run()

    names = w.recorder.names()
    assert names.index("references.resolve") < names.index("connect"), names
    written = [obj for name, obj in w.recorder.calls if name == "api.update"]
    assert written, f"the resolved spec was not written; calls: {names}"
    assert written[0]["spec"]["forProvider"]["bucket"] == "my-bucket"
    assert w.stored()["spec"]["forProvider"]["bucket"] == "my-bucket"


def test_references_already_resolved_write_nothing() -> None:
    stored = managed()
    stored["spec"]["forProvider"]["bucket"] = "my-bucket"
    w = world(stored, references=FakeReferences("my-bucket"))

    w.run()

    assert "api.update" not in w.recorder.names()


def test_an_unresolvable_reference_is_reported_and_reaches_no_backend() -> None:
    error = ValueError("spec.forProvider.Bucket: referenced field was empty")
    w = world(managed(), references=FakeReferences(error=error))

    result = w.run()

    assert result == Result(requeue=True)
    assert not set(BACKEND) & set(w.recorder.names())
    synced = w.condition("Synced")
    assert synced is not None
    assert synced["status"] == "False"
    assert synced["reason"] == "ReconcileError"
    assert synced["message"] == (
        "cannot resolve references: spec.forProvider.Bucket: referenced field was empty"
    )
    assert ("Warning", "CannotResolveResourceReferences") in [
        (type_, reason) for type_, reason, _ in w.api.events
    ]


def test_a_resource_being_deleted_resolves_no_references() -> None:
    w = world(managed(deleted=True), observation=MISSING, references=FakeReferences("b"))

    w.run()

    assert "references.resolve" not in w.recorder.names()


def test_an_external_name_left_to_the_backend_is_not_defaulted() -> None:
    w = world(managed(external_name=None), observation=MISSING, external_name=lambda _: None)

    w.run()

    assert EXTERNAL_NAME not in w.stored()["metadata"]["annotations"]
    assert "external.create" in w.recorder.names()


@dataclass
class LegacyDeletionCase:
    reason: str
    spec: dict[str, Any]
    deletes: bool


LEGACY_DELETIONS = [
    LegacyDeletionCase("a cluster-scoped resource deletes by default", {}, deletes=True),
    LegacyDeletionCase(
        "a cluster-scoped resource with deletionPolicy Orphan orphans",
        {"deletionPolicy": "Orphan"},
        deletes=False,
    ),
]


@pytest.mark.parametrize("case", LEGACY_DELETIONS, ids=lambda case: case.reason)
def test_a_cluster_scoped_resource_weighs_its_deletion_policy(case: LegacyDeletionCase) -> None:
    stored = managed(deleted=True, namespace=None)
    stored["spec"].update(case.spec)
    w = world(stored)

    w.run("")

    assert ("external.delete" in w.recorder.names()) is case.deletes
    if not case.deletes:
        assert w.stored()["metadata"]["finalizers"] == []


@dataclass
class KeptReadyCase:
    reason: str
    connect_error: Exception | None = None
    observation: Observation | Exception = UP_TO_DATE
    errors: dict[str, Exception] = field(default_factory=dict)
    # The Ready written: the one Observe reported when it got that far, as in
    # crossplane-runtime, where Observe sets it on the resource itself.
    ready: tuple[str, str] = ("True", "Available")


@pytest.mark.parametrize(
    "case",
    [
        KeptReadyCase(
            "a provider config that cannot be used keeps the last Ready",
            connect_error=BackendError("no such config"),
        ),
        KeptReadyCase(
            "a backend that cannot be observed keeps the last Ready",
            observation=BackendError("the Space is down"),
        ),
        KeptReadyCase(
            "a connection secret that cannot be written keeps the last Ready",
            errors={"api.publish_connection": BackendError("not controllable")},
        ),
        KeptReadyCase(
            "a failure after Observe still writes the Ready that Observe reported",
            observation=Observation(
                exists=True,
                up_to_date=True,
                ready=conditions.unavailable("restoring"),
                connection_details={"endpoint": b"https://cp.example"},
            ),
            errors={"api.publish_connection": BackendError("not controllable")},
            ready=("False", "Unavailable"),
        ),
    ],
    ids=lambda c: c.reason,
)
def test_a_failed_reconcile_keeps_the_ready_condition(case: KeptReadyCase) -> None:
    stored = managed()
    stored["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "lastTransitionTime": EARLIER_STAMP,
            }
        ]
    }
    w = world(
        stored, observation=case.observation, connect_error=case.connect_error, errors=case.errors
    )

    assert w.run() == Result(requeue=True)

    kept = w.condition("Ready")
    assert kept is not None, w.stored()["status"]
    assert (kept["status"], kept["reason"]) == case.ready, kept
    assert (w.condition("Synced") or {}).get("reason") == "ReconcileError"
