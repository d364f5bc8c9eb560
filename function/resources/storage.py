"""The dedicated backup bucket, hardened: versioned, encrypted, private, expiring."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from function import rules
from function.resources.target import Target

# Objects outlive their Backup's ttl by a day, so the Backup controller's own
# pruning always runs first and the lifecycle rule only catches leftovers.
_LIFECYCLE_GRACE = timedelta(days=1)
# Versioning keeps a deleted backup recoverable for this long, then lets it go,
# so a versioned bucket does not keep every expired archive forever.
_NONCURRENT_DAYS = 7


def bucket_objects(
    target: Target, bucket: str, region: str, ttl: str, *, retain: bool
) -> dict[str, dict[str, Any]]:
    """The Bucket and its four configuration objects, by composition resource name.

    ``retain`` keeps all five when the composite is deleted, not the bucket alone:
    deleting the lifecycle configuration would stop old archives from expiring, and
    deleting versioning, encryption or the public-access block would undo the
    hardening of a bucket that still holds a team's backups.
    """
    name = target.names.bucket_object
    ref = {"bucketRef": {"name": name}, "region": region}
    kms_key = target.settings.backup.kms_key_arn if target.settings.backup else ""
    encryption: dict[str, Any] = {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": kms_key}
    if not kms_key:
        encryption = {"sseAlgorithm": "AES256"}
    expire_days = math.ceil((rules.parse_duration(ttl) + _LIFECYCLE_GRACE) / timedelta(days=1))
    return {
        "backup-bucket": target.aws_object(
            "Bucket", name, {"region": region}, external_name=bucket, retain=retain
        ),
        "backup-bucket-versioning": target.aws_object(
            "BucketVersioning",
            name,
            {**ref, "versioningConfiguration": {"status": "Enabled"}},
            retain=retain,
        ),
        "backup-bucket-encryption": target.aws_object(
            "BucketServerSideEncryptionConfiguration",
            name,
            {
                **ref,
                "rule": [
                    {
                        "applyServerSideEncryptionByDefault": encryption,
                        "bucketKeyEnabled": bool(kms_key),
                    }
                ],
            },
            retain=retain,
        ),
        "backup-bucket-public-access-block": target.aws_object(
            "BucketPublicAccessBlock",
            name,
            {
                **ref,
                "blockPublicAcls": True,
                "blockPublicPolicy": True,
                "ignorePublicAcls": True,
                "restrictPublicBuckets": True,
            },
            retain=retain,
        ),
        "backup-bucket-lifecycle": target.aws_object(
            "BucketLifecycleConfiguration",
            name,
            {
                **ref,
                "rule": [
                    {
                        "id": "expire-backups",
                        "status": "Enabled",
                        "filter": [{"prefix": target.names.backup_prefix}],
                        "expiration": [{"days": expire_days}],
                        "noncurrentVersionExpiration": [{"noncurrentDays": _NONCURRENT_DAYS}],
                        "abortIncompleteMultipartUpload": [{"daysAfterInitiation": 1}],
                    }
                ],
            },
            retain=retain,
        ),
    }
