"""Everything about backups of hosted control planes to S3, and restores from them.

Pure, tested without servers:

- ``archive``: the archive layout: write a gzip tar as a stream, verify one.
- ``cron``, ``plan``: schedules: when a Backup is due, which have expired.
- ``tenancy``: which prefixes, keys and endpoints a namespace may use.
- ``diff``, ``inventory``, ``progress``: the command line's diffs (Secrets masked),
  contents by kind and namespace, and progress on a terminal or in a log.

Edges (Kubernetes only through ``provider.kube``; S3 only through ``storage``):

- ``storage``: the only module that talks to S3 (boto3): multipart streams, credentials.
- ``export``: what of a control plane goes into an archive.
- ``restore``: an archive back into a control plane, in the contract's order.
- ``backups``, ``schedules``: the Backup and BackupSchedule controllers' reconcilers.
- ``dryrun``: what a restore would create, change or leave, asked of the API server.
- ``cli``: ``controlplane-backup``, the same export, verify and restore from a terminal.
"""
