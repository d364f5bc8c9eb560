"""The stand-in's one module that talks to boto3: S3 (SeaweedFS) and IAM/STS (moto).

Every call is synchronous (the reconcilers run it in a thread) and every
botocore error leaves as a ``CloudError`` whose message names the action, the
AWS error code and the HTTP status, never a credential or a server's text.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import boto3  # type: ignore[import-untyped]
from botocore import UNSIGNED  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
)

_CONFIG: Final = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=5,
    read_timeout=30,
    s3={"addressing_style": "path"},
)
# IAM keeps at most five versions of a managed policy.
_MAX_POLICY_VERSIONS: Final = 5


class CloudError(Exception):
    """A call to S3 or IAM failed; the message is safe to show."""

    def __init__(self, message: str, code: str = "") -> None:
        """A failure with the AWS error code, if there was one."""
        super().__init__(message)
        self.code = code


class NotSupportedError(CloudError):
    """The S3 server does not implement the operation."""


@dataclass(frozen=True)
class Endpoints:
    """Where the stand-in finds S3, IAM and STS; credentials come from the environment."""

    s3: str
    iam: str
    sts: str = ""
    region: str = "us-east-1"


@contextlib.contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code") or "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        kind = NotSupportedError if code == "NotImplemented" else CloudError
        raise kind(f"{action}: {code or 'error'} (HTTP {status})", code) from None
    except BotoCoreError as error:
        # botocore's own messages name endpoints and parameters, never secrets.
        raise CloudError(f"{action}: {error}") from None


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code") or "")


def _status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


class Cloud:
    """S3 with the stand-in's (admin) identity, and IAM and STS."""

    def __init__(self, endpoints: Endpoints) -> None:
        """Clients for ``endpoints``, with boto3's default credential chain."""
        session = boto3.session.Session(region_name=endpoints.region)
        self.endpoints = endpoints
        self._s3 = session.client("s3", endpoint_url=endpoints.s3, config=_CONFIG)
        self._anonymous_s3 = session.client(
            "s3",
            endpoint_url=endpoints.s3,
            config=_CONFIG.merge(Config(signature_version=UNSIGNED)),
        )
        self._iam = session.client("iam", endpoint_url=endpoints.iam, config=_CONFIG)
        self._sts = session.client(
            "sts", endpoint_url=endpoints.sts or endpoints.iam, config=_CONFIG
        )
        self._account = ""

    # --- S3 ---------------------------------------------------------------

    def bucket_exists(self, bucket: str) -> bool:
        """Whether the bucket exists."""
        with _translated(f"head bucket {bucket}"):
            try:
                self._s3.head_bucket(Bucket=bucket)
            except ClientError as error:
                if _status(error) == 404:
                    return False
                raise
        return True

    def create_bucket(self, bucket: str, region: str) -> None:
        """Create the bucket; one we already own is fine."""
        params: dict[str, Any] = {"Bucket": bucket}
        if region and region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": region}
        with _translated(f"create bucket {bucket}"):
            try:
                self._s3.create_bucket(**params)
            except ClientError as error:
                if _code(error) != "BucketAlreadyOwnedByYou":
                    raise

    def delete_bucket(self, bucket: str, *, force: bool) -> None:
        """Delete the bucket; refused while it holds objects unless ``force`` empties it first.

        Raises:
            CloudError: BucketNotEmpty without ``force``, as AWS answers.
        """
        with _translated(f"delete bucket {bucket}"):
            versions = self._s3.list_object_versions(Bucket=bucket, MaxKeys=1000)
            objects = [
                {"Key": item["Key"], "VersionId": item["VersionId"]}
                for group in ("Versions", "DeleteMarkers")
                for item in versions.get(group) or []
            ]
            if objects and not force:
                raise CloudError(
                    f"delete bucket {bucket}: BucketNotEmpty (HTTP 409)", "BucketNotEmpty"
                )
            if objects:
                self._s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
            self._s3.delete_bucket(Bucket=bucket)

    def versioning(self, bucket: str) -> str:
        """The versioning status: Enabled, Suspended, or empty when never set."""
        with _translated(f"get versioning of {bucket}"):
            return str(self._s3.get_bucket_versioning(Bucket=bucket).get("Status") or "")

    def put_versioning(self, bucket: str, status: str) -> None:
        """Set the versioning status."""
        with _translated(f"put versioning of {bucket}"):
            self._s3.put_bucket_versioning(
                Bucket=bucket, VersioningConfiguration={"Status": status}
            )

    def encryption(self, bucket: str) -> list[dict[str, Any]] | None:
        """The default encryption rules, or None when there are none."""
        with _translated(f"get encryption of {bucket}"):
            try:
                answer = self._s3.get_bucket_encryption(Bucket=bucket)
            except ClientError as error:
                if _code(error) == "ServerSideEncryptionConfigurationNotFoundError":
                    return None
                raise
        return list(answer["ServerSideEncryptionConfiguration"]["Rules"])

    def put_encryption(self, bucket: str, rules: list[dict[str, Any]]) -> None:
        """Set the default encryption rules."""
        with _translated(f"put encryption of {bucket}"):
            self._s3.put_bucket_encryption(
                Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": rules}
            )

    def delete_encryption(self, bucket: str) -> None:
        """Remove the default encryption."""
        with _translated(f"delete encryption of {bucket}"):
            self._s3.delete_bucket_encryption(Bucket=bucket)

    def public_access_block(self, bucket: str) -> dict[str, bool] | None:
        """The public access block, or None when there is none.

        Raises:
            NotSupportedError: The server does not implement it.
        """
        with _translated(f"get public access block of {bucket}"):
            try:
                answer = self._s3.get_public_access_block(Bucket=bucket)
            except ClientError as error:
                if _code(error) == "NoSuchPublicAccessBlockConfiguration":
                    return None
                raise
        return dict(answer["PublicAccessBlockConfiguration"])

    def put_public_access_block(self, bucket: str, block: Mapping[str, bool]) -> None:
        """Set the public access block."""
        with _translated(f"put public access block of {bucket}"):
            self._s3.put_public_access_block(
                Bucket=bucket, PublicAccessBlockConfiguration=dict(block)
            )

    def delete_public_access_block(self, bucket: str) -> None:
        """Remove the public access block."""
        with _translated(f"delete public access block of {bucket}"):
            self._s3.delete_public_access_block(Bucket=bucket)

    def anonymous_refused(self, bucket: str) -> bool:
        """Whether an unsigned request to list the bucket is refused."""
        try:
            self._anonymous_s3.list_objects_v2(Bucket=bucket, MaxKeys=1)
        except ClientError as error:
            return _status(error) in (401, 403)
        except BotoCoreError as error:
            raise CloudError(f"list {bucket} anonymously: {error}") from None
        return False

    def lifecycle(self, bucket: str) -> list[dict[str, Any]] | None:
        """The lifecycle rules, or None when there are none."""
        with _translated(f"get lifecycle of {bucket}"):
            try:
                answer = self._s3.get_bucket_lifecycle_configuration(Bucket=bucket)
            except ClientError as error:
                if _code(error) == "NoSuchLifecycleConfiguration":
                    return None
                raise
        return list(answer.get("Rules") or [])

    def put_lifecycle(self, bucket: str, rules: list[dict[str, Any]]) -> None:
        """Set the lifecycle rules."""
        with _translated(f"put lifecycle of {bucket}"):
            self._s3.put_bucket_lifecycle_configuration(
                Bucket=bucket, LifecycleConfiguration={"Rules": rules}
            )

    def delete_lifecycle(self, bucket: str) -> None:
        """Remove the lifecycle rules."""
        with _translated(f"delete lifecycle of {bucket}"):
            self._s3.delete_bucket_lifecycle(Bucket=bucket)

    def key_is_known(self, access_key: str, secret_key: str) -> bool:
        """Whether the S3 server knows the key (any answer but InvalidAccessKeyId)."""
        client = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=self.endpoints.region,
        ).client("s3", endpoint_url=self.endpoints.s3, config=_CONFIG)
        try:
            client.list_buckets()
        except ClientError as error:
            return _code(error) not in ("InvalidAccessKeyId", "SignatureDoesNotMatch")
        except BotoCoreError as error:
            raise CloudError(f"probe a key: {error}") from None
        return True

    def role_policies(self, role: str) -> dict[str, dict[str, Any]] | None:
        """The role's managed policies (name to default document), or None without the role."""
        arns = self.attached_policies(role)
        if arns is None:
            return None
        policies = {}
        for arn in arns:
            found = self.policy(arn)
            if found is not None:
                policies[str(found[0]["PolicyName"])] = found[1]
        return policies

    # --- IAM --------------------------------------------------------------

    def account(self) -> str:
        """The account the IAM credentials belong to."""
        if not self._account:
            with _translated("get caller identity"):
                self._account = str(self._sts.get_caller_identity()["Account"])
        return self._account

    def role(self, name: str) -> dict[str, Any] | None:
        """The role, or None."""
        with _translated(f"get role {name}"):
            try:
                return dict(self._iam.get_role(RoleName=name)["Role"])
            except ClientError as error:
                if _code(error) == "NoSuchEntity":
                    return None
                raise

    def trust_policy(self, name: str) -> dict[str, Any] | None:
        """The role's trust policy (AssumeRolePolicyDocument), or None without the role."""
        role = self.role(name)
        return None if role is None else _document(role["AssumeRolePolicyDocument"])

    def create_role(self, name: str, trust: str, description: str) -> None:
        """Create the role with its trust policy, exactly as given."""
        with _translated(f"create role {name}"):
            self._iam.create_role(
                RoleName=name, AssumeRolePolicyDocument=trust, Description=description
            )

    def update_role(self, name: str, trust: str, description: str) -> None:
        """Set the role's trust policy and description."""
        with _translated(f"update role {name}"):
            self._iam.update_assume_role_policy(RoleName=name, PolicyDocument=trust)
            self._iam.update_role(RoleName=name, Description=description)

    def delete_role(self, name: str) -> None:
        """Delete the role (IAM refuses while policies are attached: DeleteConflict)."""
        with _translated(f"delete role {name}"):
            self._iam.delete_role(RoleName=name)

    def policy_arn(self, name: str) -> str:
        """The ARN of a customer managed policy of this account."""
        return f"arn:aws:iam::{self.account()}:policy/{name}"

    def policy(self, arn: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The policy and its default version's document, or None."""
        with _translated(f"get policy {arn}"):
            try:
                policy = dict(self._iam.get_policy(PolicyArn=arn)["Policy"])
            except ClientError as error:
                if _code(error) == "NoSuchEntity":
                    return None
                raise
            version = self._iam.get_policy_version(
                PolicyArn=arn, VersionId=policy["DefaultVersionId"]
            )["PolicyVersion"]
        return policy, _document(version["Document"])

    def create_policy(self, name: str, document: str, description: str) -> None:
        """Create the managed policy."""
        with _translated(f"create policy {name}"):
            self._iam.create_policy(
                PolicyName=name, PolicyDocument=document, Description=description
            )

    def update_policy(self, arn: str, document: str) -> None:
        """Make ``document`` the default version, dropping the oldest when five exist."""
        with _translated(f"update policy {arn}"):
            versions = self._iam.list_policy_versions(PolicyArn=arn)["Versions"]
            old = sorted(
                (v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"]
            )
            if len(versions) >= _MAX_POLICY_VERSIONS and old:
                self._iam.delete_policy_version(PolicyArn=arn, VersionId=old[0]["VersionId"])
            self._iam.create_policy_version(
                PolicyArn=arn, PolicyDocument=document, SetAsDefault=True
            )

    def delete_policy(self, arn: str) -> None:
        """Delete the policy and its older versions.

        Raises:
            CloudError: DeleteConflict while the policy is attached to a role, as IAM
                answers (moto would delete it and leave the attachment dangling).
        """
        attached = self.policy_roles(arn)
        if attached:
            raise CloudError(
                f"delete policy {arn}: DeleteConflict (HTTP 409): attached to "
                f"{', '.join(attached)}",
                "DeleteConflict",
            )
        with _translated(f"delete policy {arn}"):
            for version in self._iam.list_policy_versions(PolicyArn=arn)["Versions"]:
                if not version["IsDefaultVersion"]:
                    self._iam.delete_policy_version(PolicyArn=arn, VersionId=version["VersionId"])
            self._iam.delete_policy(PolicyArn=arn)

    def policy_roles(self, arn: str) -> list[str]:
        """The names of the roles the policy is attached to."""
        with _translated(f"list roles of policy {arn}"):
            pages = self._iam.get_paginator("list_entities_for_policy").paginate(
                PolicyArn=arn, EntityFilter="Role"
            )
            return [role["RoleName"] for page in pages for role in page["PolicyRoles"]]

    def attached_policies(self, role: str) -> list[str] | None:
        """The ARNs of the managed policies attached to the role, or None without the role."""
        with _translated(f"list policies of role {role}"):
            try:
                pages = self._iam.get_paginator("list_attached_role_policies").paginate(
                    RoleName=role
                )
                return [p["PolicyArn"] for page in pages for p in page["AttachedPolicies"]]
            except ClientError as error:
                if _code(error) == "NoSuchEntity":
                    return None
                raise

    def attach(self, role: str, policy_arn: str) -> None:
        """Attach the managed policy to the role."""
        with _translated(f"attach {policy_arn} to role {role}"):
            self._iam.attach_role_policy(RoleName=role, PolicyArn=policy_arn)

    def detach(self, role: str, policy_arn: str) -> None:
        """Detach the managed policy from the role; one already detached is fine."""
        with _translated(f"detach {policy_arn} from role {role}"):
            try:
                self._iam.detach_role_policy(RoleName=role, PolicyArn=policy_arn)
            except ClientError as error:
                if _code(error) != "NoSuchEntity":
                    raise


def _document(document: Any) -> dict[str, Any]:
    """A policy document as IAM returns it (decoded by botocore, or still JSON text)."""
    if isinstance(document, str):
        decoded: dict[str, Any] = json.loads(document)
        return decoded
    return dict(document)
