"""The Backup and BackupSchedule controllers (``controlplane-backup-controller``).

- ``backups``: the Backup reconciler: one archive streamed to S3, its deletion.
- ``schedules``: the BackupSchedule reconciler: Backups when due, pruning, the final one.

Their decisions are pure, tested without servers:

- ``cron``: five-field cron and ``@every``: firing times in UTC.
- ``plan``: which Backup a schedule makes now, which have expired.
- ``final``: what a schedule being deleted does about its final Backup.
- ``retention``: a Backup's deletion policy and when it expires.
"""
