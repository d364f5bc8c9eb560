"""S3 for backups, and the rules for what a team's Backup may reach there.

- ``s3``: the only module that imports boto3 and botocore: clients for a role,
  multipart uploads, downloads, listings, deletions.
- ``tenancy``: the prefixes, keys and endpoints a namespace may use (pure).
- ``web_identity``: the roles a ``WebIdentity`` Backup may have assumed (pure).
"""
