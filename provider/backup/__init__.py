"""Everything about backups of hosted control planes to S3, and restores from them.

Laid out by concern, each layer importing only those above it
(``tests/test_architecture.py`` enforces it):

- ``format``: the archive format: write a gzip tar as a stream, verify one, tell
  what it holds. Pure: no Kubernetes, no S3, nothing else of ``provider.backup``.
- ``storage``: S3 and how a team may reach it. ``storage.s3`` is the only module
  that imports boto3 (multipart streams, credentials); ``tenancy`` and
  ``web_identity`` are the pure rules for prefixes, keys, endpoints and roles.
- ``source``: the control plane a Backup reads (through ``provider.kube``): the one
  Secret its kubeconfig may come from, the versions it runs, and what of it goes
  into an archive (``export``).
- ``controllers``: the Backup and BackupSchedule controllers' reconcilers, and
  their pure decisions: cron, which Backup is due (``plan``), the final Backup,
  retention.
- ``restore``: an archive back into a control plane, in the contract's order:
  the restorer, its pure steps and version check, the pool restores run in, the
  restore an Instance asks for, and the dry run with its diffs.
- ``cli``: ``controlplane-backup``, the same export, verify and restore from a
  terminal, with its listing and progress. Nothing else imports it.
"""
