"""Backups of hosted control planes to S3, and restores from them.

- ``archive``: the archive layout (pure): write a gzip tar as a stream, verify one.
- ``cron``, ``plan``: schedules (pure): when a Backup is due, which have expired.
- ``storage``: the only module that talks to S3 (boto3): multipart streams, credentials.
"""
