"""What EKS gives the platform's pods for IRSA, played by the sandbox.

On EKS the cluster's API server issues ServiceAccount tokens as the cluster's
OIDC provider (``https://oidc.eks.<region>.amazonaws.com/id/<id>``), which IAM
trusts, and EKS's pod identity webhook gives a pod whose ServiceAccount carries
an ``eks.amazonaws.com/role-arn`` annotation two variables: ``AWS_ROLE_ARN``
(the annotation) and ``AWS_WEB_IDENTITY_TOKEN_FILE``, a token the kubelet
projects for that ServiceAccount with audience ``sts.amazonaws.com`` and renews
before it expires (at 80% of its life; 24 hours by default). Sources: the
amazon-eks-pod-identity-webhook README (the variables, the audience, the
``eks.amazonaws.com/token-expiration`` default of 86400 s) and Kubernetes'
projected ServiceAccount token volumes (the kubelet's renewal).

The sandbox plays both: its management API server issues tokens as the OIDC
provider the shipped composition's ``irsa`` trust names (``issuer``), and
``ProjectedToken`` mints the backup controller's token with the TokenRequest
API, writes it where the controller reads it and renews it as the kubelet does.
The ServiceAccount, with its annotation, is the one ``deploy/backup-controller``
ships. What is not played: the webhook itself (the sandbox sets the variables),
and the OIDC provider's discovery document, which only AWS reads (the AWS
stand-in reads a token's claims, not its signature).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from sandbox.paths import REPO_ROOT
from sandbox.spaces import Kube

log = logging.getLogger(__name__)

BACKUP_CONTROLLER_DEPLOY = REPO_ROOT / "deploy" / "backup-controller"
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
TOKEN_FILE_VARIABLE = "AWS_WEB_IDENTITY_TOKEN_FILE"
STS_AUDIENCE = "sts.amazonaws.com"
# The webhook's default token lifetime, and the kubelet's renewal at 80% of it.
TOKEN_SECONDS = 86400
RENEW_AFTER = 0.8
RETRY_SECONDS = 60.0
_OIDC_PROVIDER = ":oidc-provider/"


def issuer(composition: Path) -> str:
    """The OIDC issuer URL of the cluster a composition's ``irsa`` trust names.

    The trust names the IAM OIDC provider ``arn:aws:iam::<account>:oidc-provider/<host/path>``,
    whose issuer is ``https://<host/path>``.

    Raises:
        ValueError: the composition's input has no ``backup.trust.irsa``.
    """
    found: dict[str, Any] = yaml.safe_load(composition.read_text())
    for step in found["spec"]["pipeline"]:
        irsa = (((step.get("input") or {}).get("backup") or {}).get("trust") or {}).get("irsa")
        if irsa:
            arn = str(irsa["oidcProviderArn"])
            return "https://" + arn.partition(_OIDC_PROVIDER)[2]
    msg = f"{composition}: its input has no backup.trust.irsa"
    raise ValueError(msg)


def shipped_service_account() -> tuple[str, str, str]:
    """The backup controller's ServiceAccount as deploy/ ships it: namespace, name, IRSA role."""
    kustomization = yaml.safe_load((BACKUP_CONTROLLER_DEPLOY / "kustomization.yaml").read_text())
    account = yaml.safe_load((BACKUP_CONTROLLER_DEPLOY / "serviceaccount.yaml").read_text())
    metadata = account["metadata"]
    return kustomization["namespace"], metadata["name"], metadata["annotations"][IRSA_ANNOTATION]


class ProjectedToken:
    """The backup controller's IRSA: its ServiceAccount, and the token the kubelet projects.

    ``start`` makes the namespace and the ServiceAccount as deploy/ ships them and
    writes the first token; a thread renews it at 80% of its life, in place (a
    bind mount of the file into an image sees the new token). ``environment`` is
    what the pod identity webhook adds to the pod.
    """

    def __init__(self, kube: Kube, folder: Path) -> None:
        """Mint tokens on ``kube`` into ``folder``."""
        self.kube = kube
        self.namespace, self.name, self.role_arn = shipped_service_account()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "token"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="irsa-token", daemon=True)

    def start(self) -> None:
        """Make the ServiceAccount, write the first token, start renewing it."""
        self.kube.namespace(self.namespace)
        account = {"metadata": {"name": self.name, "annotations": {IRSA_ANNOTATION: self.role_arn}}}
        try:
            self.kube.core.create_namespaced_service_account(self.namespace, account)
        except ApiException as error:
            if error.status != HTTPStatus.CONFLICT:
                raise
        self._write()
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def environment(self) -> Mapping[str, str]:
        """The variables the webhook sets, but the token file's (a file: ``path``)."""
        return {"AWS_ROLE_ARN": self.role_arn, "AWS_STS_REGIONAL_ENDPOINTS": "regional"}

    def _write(self) -> None:
        minted = self.kube.core.create_namespaced_service_account_token(
            self.name,
            self.namespace,
            {"spec": {"audiences": [STS_AUDIENCE], "expirationSeconds": TOKEN_SECONDS}},
        )
        if not self.path.exists():
            self.path.touch(mode=0o600)
        # In place, never renamed over: a bind mount of the file follows its contents.
        with self.path.open("r+") as file:
            file.truncate(0)
            file.write(minted.status.token)

    def _renew(self) -> None:
        wait = TOKEN_SECONDS * RENEW_AFTER
        while not self._stop.wait(wait):
            try:
                self._write()
                wait = TOKEN_SECONDS * RENEW_AFTER
            except Exception as error:  # noqa: BLE001 (the kubelet retries; so does this)
                log.warning("cannot renew the IRSA token: %s", type(error).__name__)
                wait = RETRY_SECONDS
