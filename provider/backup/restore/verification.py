"""Restore an archive into a control plane and check it holds what the archive promised.

A restore that has just ended is not settled: packages install and CRDs get
served over the next minutes, so ``settle`` observes (``verify.observe``) again
until the check passes or its deadline passes, and then reports what still fails.

``restore_and_check`` is what ``controlplane-backup verify --restore`` does:
apply the archive (``restorer.apply_archive``), then settle. (A
BackupSchedule's drill has the provider restore a throwaway Instance instead,
and checks it with the same ``verify`` package.) A restore that fails is
still checked once, so the report says why in the control plane's own words
(a package that cannot install names its error), beside the restore's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import IO

from provider.backup.format import archive
from provider.backup.restore.restorer import (
    CRD_TIMEOUT_SECONDS,
    Progress,
    RestoreError,
    apply_archive,
)
from provider.backup.verify import checks
from provider.backup.verify.observe import observe
from provider.kube import Cluster

# How long a restored control plane has to settle (packages Installed and
# Healthy, CRDs Established) before what still fails is reported.
SETTLE_TIMEOUT_SECONDS = 300.0
SETTLE_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Verification:
    """What a restore and its check found."""

    # The restore's own error; empty when it applied everything.
    restore_error: str
    report: checks.Report

    @property
    def passed(self) -> bool:
        """Whether the archive restored and the control plane holds all it promised."""
        return not self.restore_error and self.report.passed

    def problems(self) -> list[str]:
        """Each failure, in words: the restore's error first, then the check's."""
        found = [f"the restore failed: {self.restore_error}"] if self.restore_error else []
        return found + [problem.message for problem in self.report.problems]

    def message(self) -> str:
        """One line: what was checked, or every failure."""
        return self.report.summary() if self.passed else "; ".join(self.problems())


async def expected_of(
    file: IO[bytes], manifest: archive.Manifest, limits: archive.Limits
) -> checks.Expected:
    """What a verified archive promises, read in a worker thread (it may be large)."""

    def read() -> checks.Expected:
        file.seek(0)
        return checks.expect(manifest.types, archive.objects(file, manifest, limits=limits))

    return await asyncio.to_thread(read)


async def settle(
    target: Cluster,
    expected: checks.Expected,
    *,
    timeout: float = SETTLE_TIMEOUT_SECONDS,
    poll: float = SETTLE_POLL_SECONDS,
) -> checks.Report:
    """Check ``target`` until it holds what ``expected`` promises or ``timeout`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        report = checks.check(expected, await observe(target, expected))
        if report.passed or loop.time() + poll > deadline:
            return report
        await asyncio.sleep(poll)


async def restore_and_check(
    target: Cluster,
    file: IO[bytes],
    manifest: archive.Manifest,
    *,
    limits: archive.Limits,
    timeout: float = SETTLE_TIMEOUT_SECONDS,
    crd_timeout: float = CRD_TIMEOUT_SECONDS,
    progress: Progress | None = None,
) -> Verification:
    """Restore a verified archive into ``target``, then check what it holds.

    ``timeout`` bounds the wait for the control plane to settle after the
    restore; ``crd_timeout`` the restore's own wait for each CRD.
    """
    expected = await expected_of(file, manifest, limits)
    file.seek(0)
    try:
        await apply_archive(
            target, file, manifest, crd_timeout=crd_timeout, limits=limits, progress=progress
        )
    except RestoreError as error:
        # Checked once, not settled: the restore stopped, so what fails now stays failing.
        report = checks.check(expected, await observe(target, expected))
        return Verification(str(error), report)
    return Verification("", await settle(target, expected, timeout=timeout))
