"""One external client per kind: observe, create, update and delete the real thing.

Buckets and their configuration go to the S3 server, roles, policies and
attachments to IAM, through ``cloud.Cloud`` (run in a thread: boto3 blocks).
Observe writes `status.atProvider` as upjet would (the echoed parameters, `id`
and, where the kind has one, `arn`). What the S3 server cannot do is said in
the Ready condition's message and, when that message changes, in a Warning event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from provider.managed import conditions, meta
from provider.managed.conditions import Condition
from provider.managed.external import Creation, ExternalClient, ManagedObject, Observation, Update
from sandbox.awsstandin import desired
from sandbox.awsstandin.cloud import Cloud, NotSupportedError
from sandbox.awsstandin.kinds import (
    BUCKET,
    BUCKET_ENCRYPTION,
    BUCKET_LIFECYCLE,
    BUCKET_PUBLIC_ACCESS_BLOCK,
    BUCKET_VERSIONING,
    POLICY,
    ROLE,
    ROLE_POLICY_ATTACHMENT,
    Kind,
)

# Records a Warning event about what could not be applied.
Notify = Callable[[ManagedObject, str], Awaitable[None]]
# Told the name of a role whose managed policies changed.
RoleChanged = Callable[[str], Awaitable[None]]
REASON_NOT_APPLIED = "NotAppliedByStandIn"


def _for_provider(managed: ManagedObject) -> dict[str, Any]:
    return dict((managed.get("spec") or {}).get("forProvider") or {})


def _set_at_provider(managed: ManagedObject, values: dict[str, Any]) -> None:
    at_provider = desired.without_references(_for_provider(managed))
    at_provider.update(values)
    managed.setdefault("status", {})["atProvider"] = at_provider


def _ready(message: str = "") -> Condition:
    return Condition(conditions.READY, "True", conditions.AVAILABLE, message)


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class _Client:
    """What every kind's client shares: the cloud, run in a thread, and the notifier."""

    def __init__(self, cloud: Cloud, notify: Notify, role_changed: RoleChanged) -> None:
        self.cloud = cloud
        self.notify = notify
        self.role_changed = role_changed

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking cloud call in a thread."""
        return await asyncio.to_thread(function, *args, **kwargs)

    async def update(self, managed: ManagedObject) -> Update:
        """Bring the external resource to the spec."""
        await self.apply(managed)
        return Update()

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        await self.apply(managed)
        return Creation()

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        raise NotImplementedError


class BucketClient(_Client):
    """A bucket, named by its external name."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        name = meta.external_name(managed)
        if not await self.call(self.cloud.bucket_exists, name):
            return Observation(exists=False)
        region = str(_for_provider(managed).get("region") or self.cloud.endpoints.region)
        _set_at_provider(
            managed,
            {
                "arn": f"arn:aws:s3:::{name}",
                "id": name,
                "bucketDomainName": f"{name}.s3.amazonaws.com",
                "bucketRegionalDomainName": f"{name}.s3.{region}.amazonaws.com",
                "region": region,
            },
        )
        return Observation(exists=True, up_to_date=True, ready=_ready())

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        region = str(_for_provider(managed).get("region") or "")
        await self.call(self.cloud.create_bucket, meta.external_name(managed), region)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        force = bool(_for_provider(managed).get("forceDestroy"))
        await self.call(self.cloud.delete_bucket, meta.external_name(managed), force=force)


class _BucketPart(_Client):
    """A configuration of a bucket, named after the bucket once created (upjet's ID)."""

    def bucket(self, managed: ManagedObject) -> str:
        return str(_for_provider(managed).get("bucket") or "")

    async def observed(self, managed: ManagedObject, message: str = "") -> Observation:
        """Found and as wanted; what is not applied is said, and told once by an event."""
        bucket = self.bucket(managed)
        conditions_now = (managed.get("status") or {}).get("conditions") or []
        said = (conditions.find(conditions_now, conditions.READY) or {}).get("message", "")
        if message and message != said:
            await self.notify(managed, message)
        # Named after the bucket even when nothing was created (written with the finalizer).
        managed["metadata"].setdefault("annotations", {}).setdefault(meta.EXTERNAL_NAME, bucket)
        _set_at_provider(managed, {"id": bucket, "bucket": bucket})
        return Observation(exists=True, up_to_date=True, ready=_ready(message))

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        await self.apply(managed)
        managed["metadata"].setdefault("annotations", {})[meta.EXTERNAL_NAME] = self.bucket(managed)
        return Creation()


class VersioningClient(_BucketPart):
    """Bucket versioning; deleting it suspends versioning, as provider-aws does."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        bucket = self.bucket(managed)
        if not await self.call(self.cloud.bucket_exists, bucket):
            return Observation(exists=False)
        status = await self.call(self.cloud.versioning, bucket)
        if meta.was_deleted(managed):
            return Observation(exists=status == "Enabled")
        if not status:
            return Observation(exists=False)
        observation = await self.observed(managed)
        up_to_date = status == desired.versioning_status(_for_provider(managed))
        return Observation(exists=True, up_to_date=up_to_date, ready=observation.ready)

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        status = desired.versioning_status(_for_provider(managed))
        await self.call(self.cloud.put_versioning, self.bucket(managed), status)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        await self.call(self.cloud.put_versioning, self.bucket(managed), "Suspended")


class EncryptionClient(_BucketPart):
    """Default server-side encryption: SSE-S3 is applied; a KMS key cannot be."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        bucket = self.bucket(managed)
        if not await self.call(self.cloud.bucket_exists, bucket):
            return Observation(exists=False)
        current = await self.call(self.cloud.encryption, bucket)
        if meta.was_deleted(managed):
            return Observation(exists=current is not None)
        wanted = desired.encryption_rules(_for_provider(managed))
        message = desired.not_applied_message(wanted.not_applied)
        if wanted.value is None:
            return await self.observed(managed, message)
        if current is None:
            return Observation(exists=False)
        observation = await self.observed(managed, message)
        up_to_date = desired.encryption_matches(wanted.value, current)
        return Observation(exists=True, up_to_date=up_to_date, ready=observation.ready)

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        wanted = desired.encryption_rules(_for_provider(managed))
        if wanted.value is not None:
            await self.call(self.cloud.put_encryption, self.bucket(managed), wanted.value)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        await self.call(self.cloud.delete_encryption, self.bucket(managed))


class PublicAccessBlockClient(_BucketPart):
    """The public access block, where the server has one; else the bucket is checked private."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        bucket = self.bucket(managed)
        if not await self.call(self.cloud.bucket_exists, bucket):
            return Observation(exists=False)
        try:
            current = await self.call(self.cloud.public_access_block, bucket)
        except NotSupportedError:
            if meta.was_deleted(managed):
                return Observation(exists=False)
            return await self._without_block(managed, bucket)
        if meta.was_deleted(managed):
            return Observation(exists=current is not None)
        if current is None:
            return Observation(exists=False)
        observation = await self.observed(managed)
        up_to_date = current == desired.public_access_block(_for_provider(managed))
        return Observation(exists=True, up_to_date=up_to_date, ready=observation.ready)

    async def _without_block(self, managed: ManagedObject, bucket: str) -> Observation:
        refused = await self.call(self.cloud.anonymous_refused, bucket)
        if not refused:
            return Observation(
                exists=True,
                up_to_date=True,
                ready=conditions.unavailable(
                    "the S3 server has no public access block and lets anonymous requests "
                    "list this bucket"
                ),
            )
        return await self.observed(
            managed,
            desired.not_applied_message(
                ["the public access block (NotImplemented); anonymous requests are refused"]
            ),
        )

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        block = desired.public_access_block(_for_provider(managed))
        with contextlib.suppress(NotSupportedError):
            # Observe says so, having checked that the bucket refuses anonymous requests.
            await self.call(self.cloud.put_public_access_block, self.bucket(managed), block)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        await self.call(self.cloud.delete_public_access_block, self.bucket(managed))


class LifecycleClient(_BucketPart):
    """Lifecycle rules: expiry of current and noncurrent versions and of stale uploads."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        bucket = self.bucket(managed)
        if not await self.call(self.cloud.bucket_exists, bucket):
            return Observation(exists=False)
        current = await self.call(self.cloud.lifecycle, bucket)
        if meta.was_deleted(managed):
            return Observation(exists=current is not None)
        if current is None:
            return Observation(exists=False)
        wanted = desired.lifecycle_rules(_for_provider(managed))
        observation = await self.observed(managed, desired.not_applied_message(wanted.not_applied))
        up_to_date = desired.lifecycle_matches(wanted.value, current)
        return Observation(exists=True, up_to_date=up_to_date, ready=observation.ready)

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        wanted = desired.lifecycle_rules(_for_provider(managed))
        await self.call(self.cloud.put_lifecycle, self.bucket(managed), wanted.value)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        await self.call(self.cloud.delete_lifecycle, self.bucket(managed))


class RoleClient(_Client):
    """An IAM role with the trust policy exactly as rendered."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        name = meta.external_name(managed)
        role = await self.call(self.cloud.role, name)
        if role is None:
            return Observation(exists=False)
        for_provider = _for_provider(managed)
        _set_at_provider(
            managed,
            {
                "arn": role["Arn"],
                "id": name,
                "uniqueId": role["RoleId"],
                "createDate": _iso(role["CreateDate"]),
                "path": role.get("Path", "/"),
                "maxSessionDuration": role.get("MaxSessionDuration", 3600),
            },
        )
        up_to_date = desired.same_json(
            role["AssumeRolePolicyDocument"], for_provider.get("assumeRolePolicy") or "{}"
        ) and (role.get("Description") or "") == (for_provider.get("description") or "")
        return Observation(exists=True, up_to_date=up_to_date, ready=_ready())

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        await self._with_spec(self.cloud.create_role, managed)
        return Creation()

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        await self._with_spec(self.cloud.update_role, managed)

    async def _with_spec(
        self, function: Callable[[str, str, str], None], managed: ManagedObject
    ) -> None:
        """Call ``function`` with the role's name, trust policy and description."""
        for_provider = _for_provider(managed)
        await self.call(
            function,
            meta.external_name(managed),
            str(for_provider.get("assumeRolePolicy") or ""),
            str(for_provider.get("description") or ""),
        )

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        await self.call(self.cloud.delete_role, meta.external_name(managed))


class PolicyClient(_Client):
    """A customer managed IAM policy; a changed document becomes its new default version."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        arn = await self.call(self.cloud.policy_arn, meta.external_name(managed))
        found = await self.call(self.cloud.policy, arn)
        if found is None:
            return Observation(exists=False)
        policy, document = found
        _set_at_provider(
            managed,
            {
                "arn": arn,
                "id": arn,
                "policyId": policy["PolicyId"],
                "path": policy.get("Path", "/"),
                "attachmentCount": policy.get("AttachmentCount", 0),
            },
        )
        up_to_date = desired.same_json(document, _for_provider(managed).get("policy") or "{}")
        return Observation(exists=True, up_to_date=up_to_date, ready=_ready())

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        for_provider = _for_provider(managed)
        await self.call(
            self.cloud.create_policy,
            meta.external_name(managed),
            str(for_provider.get("policy") or ""),
            str(for_provider.get("description") or ""),
        )
        return Creation()

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        arn = await self.call(self.cloud.policy_arn, meta.external_name(managed))
        await self.call(self.cloud.update_policy, arn, str(_for_provider(managed).get("policy")))
        for role in await self.call(self.cloud.policy_roles, arn):
            await self.role_changed(role)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        arn = await self.call(self.cloud.policy_arn, meta.external_name(managed))
        await self.call(self.cloud.delete_policy, arn)


class AttachmentClient(_Client):
    """A managed policy attached to a role; its external name is `<role>/<policy ARN>`."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the external resource and write what it is into the status."""
        for_provider = _for_provider(managed)
        role, arn = str(for_provider.get("role") or ""), str(for_provider.get("policyArn") or "")
        attached = await self.call(self.cloud.attached_policies, role)
        if attached is None or arn not in attached:
            return Observation(exists=False)
        _set_at_provider(managed, {"id": f"{role}/{arn}"})
        return Observation(exists=True, up_to_date=True, ready=_ready())

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        for_provider = _for_provider(managed)
        role, arn = str(for_provider.get("role") or ""), str(for_provider.get("policyArn") or "")
        await self.call(self.cloud.attach, role, arn)
        managed["metadata"].setdefault("annotations", {})[meta.EXTERNAL_NAME] = f"{role}/{arn}"
        await self.role_changed(role)
        return Creation()

    async def apply(self, managed: ManagedObject) -> None:
        """Bring the external resource to the spec."""
        # Role and policy are the attachment's identity: a change is a new attachment.
        await self.create(managed)

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource, or undo the configuration."""
        for_provider = _for_provider(managed)
        role = str(for_provider.get("role") or "")
        await self.call(self.cloud.detach, role, str(for_provider.get("policyArn") or ""))
        await self.role_changed(role)


_CLIENTS: dict[str, type[_Client]] = {
    BUCKET.name: BucketClient,
    BUCKET_VERSIONING.name: VersioningClient,
    BUCKET_ENCRYPTION.name: EncryptionClient,
    BUCKET_PUBLIC_ACCESS_BLOCK.name: PublicAccessBlockClient,
    BUCKET_LIFECYCLE.name: LifecycleClient,
    ROLE.name: RoleClient,
    POLICY.name: PolicyClient,
    ROLE_POLICY_ATTACHMENT.name: AttachmentClient,
}


class Connector:
    """Hands out the one client of a kind; the stand-in has one set of credentials."""

    def __init__(self, kind: Kind, cloud: Cloud, notify: Notify, role_changed: RoleChanged) -> None:
        """The connector for ``kind``; ``role_changed`` hears of changed role policies."""
        self._client = _CLIENTS[kind.name](cloud, notify, role_changed)

    async def connect(self, managed: ManagedObject) -> ExternalClient:
        """The kind's client (the provider config is not read: see the package's notes)."""
        return self._client  # type: ignore[return-value]
