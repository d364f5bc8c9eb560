"""The restore an Instance asks for, and what its status says about it.

An Instance created with ``spec.forProvider.initialRestorationFrom`` is
restored once its control plane is available. While the restore runs, the
provider writes ``status.atProvider.restore`` (phase, step, objects applied of
total, start time) and a ``Restored`` condition to the Instance, at a bounded
rate (``restore_steps.Throttle``), so a person or a tool watching it sees it move.
The record is also where a restore interrupted by a restart resumes from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from provider import kube
from provider.backup.restore import RestoreError, Restorer
from provider.backup.restore_steps import (
    COMPLETED,
    IN_PROGRESS,
    RESTORED,
    Progress,
    Throttle,
    Verdict,
    pending,
    verdict,
)
from provider.kube import Cluster, KubeError
from provider.managed import conditions
from provider.managed.external import ManagedObject
from provider.model import INSTANCES, InvalidError, RestoreStatus, parse

# At most one progress write per Instance this often, besides one per step.
PROGRESS_INTERVAL_SECONDS = 2.0
# Every key a record may hold: a merge patch drops those the new record lacks.
_RECORD_KEYS = (
    "backupName",
    "phase",
    "step",
    "applied",
    "total",
    "startedAt",
    "message",
    "completedAt",
    "objects",
)

log = logging.getLogger(__name__)


def set_restored(managed: ManagedObject, found: Verdict) -> None:
    """Set the ``Restored`` condition in ``managed``'s status."""
    status = managed.setdefault("status", {})
    status["conditions"] = conditions.merged(
        status.get("conditions") or [],
        [conditions.Condition(RESTORED, found.status, found.reason, found.message)],
        int(managed["metadata"].get("generation") or 0),
    )


class InstanceRestore:
    """Runs an Instance's restore and reports it on the Instance."""

    def __init__(
        self,
        local: Cluster,
        restorer: Restorer,
        *,
        interval: float = PROGRESS_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``local`` holds the Instances; progress is written at most every ``interval`` s."""
        self.local = local
        self.restorer = restorer
        self.interval = interval
        self.clock = clock

    async def run(
        self, managed: ManagedObject, backup_name: str, kubeconfig: bytes | None
    ) -> conditions.Condition | None:
        """Restore ``backup_name`` unless done; a Ready condition while it is not done.

        ``managed``'s status gets the restore's record and its ``Restored`` condition,
        for the reconciler to write with the rest.
        """
        at_provider = managed.setdefault("status", {}).setdefault("atProvider", {})
        recorded = _recorded(at_provider.get("restore"))
        if recorded.get("backupName") == backup_name and recorded.get("phase") == COMPLETED:
            return None
        if not kubeconfig:
            set_restored(managed, pending(backup_name, "its control plane has a kubeconfig"))
            return conditions.unavailable(
                f"waiting for a kubeconfig to restore Backup {backup_name}"
            )
        report = _StatusWriter(self, managed)
        try:
            target = kube.load_kubeconfig_text(kubeconfig.decode())
            await self.restorer.restore(
                managed["metadata"]["namespace"],
                backup_name,
                target,
                progress=report.write,
                recorded=recorded,
            )
        except (RestoreError, KubeError) as error:
            if report.last is None or report.last.phase == IN_PROGRESS:
                # Failed before the restorer could say so (the kubeconfig is refused).
                started = str(recorded.get("startedAt") or "")
                failed = Progress(backup_name, IN_PROGRESS, "", 0, 0, started).failed(str(error))
                await report.write(failed)
            return conditions.unavailable(f"restore from Backup {backup_name} failed: {error}")
        return None


def _recorded(found: object) -> dict[str, Any]:
    """The record a previous run wrote; none when it is not one (never trusted blindly)."""
    try:
        return parse(RestoreStatus, found or {}, "status.atProvider.restore").model_dump(
            by_alias=True
        )
    except InvalidError:
        return {}


class _StatusWriter:
    """Puts each progress in the Instance's status; writes it to the API at a bounded rate."""

    def __init__(self, owner: InstanceRestore, managed: ManagedObject) -> None:
        self.owner = owner
        self.managed = managed
        self.throttle = Throttle(owner.interval)
        self.last: Progress | None = None

    async def write(self, progress: Progress) -> None:
        self.last = progress
        record = progress.record()
        self.managed["status"]["atProvider"]["restore"] = record
        set_restored(self.managed, verdict(progress))
        now = self.owner.clock()
        if progress.phase == IN_PROGRESS and not self.throttle.due(progress, now):
            return
        self.throttle = self.throttle.wrote(progress, now)
        metadata = self.managed["metadata"]
        patch = {
            "status": {
                "atProvider": {"restore": {key: record.get(key) for key in _RECORD_KEYS}},
                "conditions": self.managed["status"]["conditions"],
            }
        }
        try:
            fresh = await self.owner.local.merge_patch(
                INSTANCES, metadata["namespace"], metadata["name"], patch, subresource="status"
            )
        except KubeError as error:
            # Best effort: the reconcile writes the status it ends with all the same.
            log.warning(
                "cannot record restore progress",
                extra={
                    "fields": {
                        "resource": f"{metadata['namespace']}/{metadata['name']}",
                        "error": str(error),
                    }
                },
            )
            return
        # The reconcile writes the Instance again after this: from what is stored now,
        # or its write would conflict with this one (and a change someone else made
        # meanwhile would be lost). The status stays the one this reconcile builds.
        self.managed["metadata"] = fresh["metadata"]
        self.managed["spec"] = fresh.get("spec") or {}
