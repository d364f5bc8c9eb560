"""The restore-drill metrics: per schedule, bounded labels, gone with the schedule."""

from __future__ import annotations

import pytest

from provider.runtime import metrics

VERIFIED = "controlplane_backup_last_verified_timestamp_seconds"
FAILED = "controlplane_backup_last_drill_failed"
INTERVAL = "controlplane_backup_drill_interval_seconds"


def sample(name: str, namespace: str, schedule: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": namespace, "name": schedule})


@pytest.mark.parametrize(
    ("last_verified", "failed", "reason"),
    [
        (1_780_000_000.0, False, "a passed drill sets when, and not failed"),
        (1_780_000_000.0, True, "a failed drill after a passed one keeps when the last passed"),
        (None, True, "a schedule that never passed a drill has no timestamp, so absent() fires"),
    ],
)
def test_a_schedules_drills_are_exported_by_namespace_and_name(
    last_verified: float | None, failed: bool, reason: str
) -> None:
    metrics.record_drill("team-m", "myctp", last_verified=last_verified, failed=failed)

    assert sample(VERIFIED, "team-m", "myctp") == last_verified, reason
    assert sample(FAILED, "team-m", "myctp") == (1 if failed else 0), reason


def test_a_name_that_is_no_dns_name_is_exported_as_other_and_a_gone_schedule_is_forgotten() -> None:
    metrics.record_drill("team-m", "Not A Name", last_verified=1.0, failed=False)
    assert sample(VERIFIED, "team-m", "other") == 1.0

    metrics.forget_drills("team-m", "Not A Name")

    assert sample(VERIFIED, "team-m", "other") is None
    assert sample(FAILED, "team-m", "other") is None


def test_the_drill_interval_is_exported_while_a_schedule_asks_for_drills() -> None:
    metrics.record_drill_interval("team-m", "drilled", 86_400.0)
    assert sample(INTERVAL, "team-m", "drilled") == 86_400.0

    metrics.forget_drills("team-m", "drilled")

    assert sample(INTERVAL, "team-m", "drilled") is None, "no drills asked for: no interval"
