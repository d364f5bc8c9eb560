"""EKS Pod Identity's agent, for one pod: container credentials from the stand-in's STS.

On EKS the Pod Identity agent (a DaemonSet on 169.254.170.23) answers the AWS
SDKs' container credential provider: the pod's environment names the agent
(``AWS_CONTAINER_CREDENTIALS_FULL_URI``) and a token file
(``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``) whose content the SDK sends as the
``Authorization`` header. The agent has EKS assume the associated role as the
service principal ``pods.eks.amazonaws.com``, with session tags that are all
transitive, and hands the SDK the role's credentials.

Here the agent listens on loopback (botocore allows http there), checks the
header against its token (EKS checks the projected service account token) and
assumes the role through the bridge's ``assume_for_service``, so the role's
trust policy must trust the service for sts:AssumeRole and sts:TagSession,
exactly as on EKS.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sandbox.awsstandin.loopback import LoopbackServer
from sandbox.awsstandin.sts import AccessRefusedError, Bridge

POD_IDENTITY_SERVICE: Final = "pods.eks.amazonaws.com"


@dataclass(frozen=True)
class Association:
    """A Pod Identity association: a service account of a cluster, and its role."""

    cluster_arn: str
    namespace: str
    service_account: str
    role_arn: str
    pod_name: str = "controlplane-backup-controller-0"
    pod_uid: str = "00000000-0000-4000-8000-000000000000"

    def session_tags(self) -> dict[str, str]:
        """The tags EKS Pod Identity puts on the role's session."""
        return {
            "eks-cluster-arn": self.cluster_arn,
            "eks-cluster-name": self.cluster_arn.rpartition("/")[2],
            "kubernetes-namespace": self.namespace,
            "kubernetes-service-account": self.service_account,
            "kubernetes-pod-name": self.pod_name,
            "kubernetes-pod-uid": self.pod_uid,
        }


class PodIdentityAgent:
    """The agent for one pod's association; ``start`` listens, ``stop`` stops."""

    def __init__(self, bridge: Bridge, association: Association, workdir: Path) -> None:
        """Serve ``association``'s credentials; the token file is written under ``workdir``."""
        self.bridge = bridge
        self.association = association
        self._token = secrets.token_urlsafe(32)
        self.token_file = workdir / "eks-pod-identity-token"
        self.token_file.touch(mode=0o600)
        self.token_file.write_text(self._token)
        self._server = LoopbackServer(self._answer, "standin-pod-identity")

    @property
    def endpoint(self) -> str:
        """The URL the pod's SDK asks for credentials."""
        return f"{self._server.url}/v1/credentials"

    def environment(self) -> dict[str, str]:
        """The variables EKS sets in a pod with this association."""
        return {
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": self.endpoint,
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(self.token_file),
        }

    def start(self) -> None:
        """Listen in a thread of its own."""
        self._server.start()

    def stop(self) -> None:
        """Stop listening."""
        self._server.stop()

    def _answer(
        self, _: str, __: str, headers: Mapping[str, str], ___: bytes
    ) -> tuple[int, str, bytes]:
        status, answer = self.answer(headers.get("Authorization") or "")
        return status, "application/json", json.dumps(answer).encode()

    def answer(self, authorization: str) -> tuple[int, dict[str, str]]:
        """The status and JSON body for a request carrying ``authorization``."""
        if not hmac.compare_digest(authorization.encode(), self._token.encode()):
            return 401, {"Code": "Unauthorized", "Message": "the pod's token is not valid"}
        session = f"eks-{self.association.namespace}-{self.association.pod_name}"[:64]
        try:
            credentials = self.bridge.assume_for_service(
                POD_IDENTITY_SERVICE,
                self.association.role_arn,
                session,
                self.association.session_tags(),
            )
        except AccessRefusedError as refused:
            return 403, {"Code": "AccessDenied", "Message": str(refused)}
        return 200, {
            "AccessKeyId": credentials["AccessKeyId"],
            "SecretAccessKey": credentials["SecretAccessKey"],
            "Token": credentials["SessionToken"],
            "Expiration": credentials["Expiration"],
        }
