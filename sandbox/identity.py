"""Who each process of the platform is: a ServiceAccount's kubeconfig, as a pod would have.

The API servers authorise with RBAC and issue ServiceAccount tokens
(`sandbox.apiserver`). Only the harness (the tests, the sandbox arranging
things, the operator's `kubectl apply`) holds the admin certificate; every
controller is given a kubeconfig carrying a token of the ServiceAccount its
install ships (Crossplane's Helm chart, its package runtime, `deploy/`), made
with the TokenRequest API as the kubelet projects one into a pod. It is
bound to no pod, so it lasts `TOKEN_LIFETIME`: longer than any sandbox runs
(its certificates last a day), since nothing here refreshes it.

`whoami` asks the API server who a kubeconfig is (a SelfSubjectReview), so a
test can hold each process to the identity it was given.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from sandbox.apiserver import APIServer

TOKEN_LIFETIME_SECONDS = 24 * 3600
# The group the admin certificate carries: it bypasses RBAC.
ADMIN_GROUP = "system:masters"


@dataclass(frozen=True)
class ServiceAccount:
    """A ServiceAccount, and the user name the API server knows it by."""

    namespace: str
    name: str

    @property
    def username(self) -> str:
        """What RBAC and a SelfSubjectReview call it."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def _admin(server: APIServer) -> Any:
    return config.new_client_from_config(str(server.kubeconfig_path))  # type: ignore[no-untyped-call]


def token(server: APIServer, account: ServiceAccount) -> str:
    """A token of `account` from the TokenRequest API (the account must exist)."""
    api: Any = client.CoreV1Api(_admin(server))
    answer = api.create_namespaced_service_account_token(
        account.name,
        account.namespace,
        {"spec": {"expirationSeconds": TOKEN_LIFETIME_SECONDS}},
    )
    return str(answer.status.token)


def kubeconfig(server: APIServer, account: ServiceAccount, path: Path) -> Path:
    """Write a kubeconfig of `server` as `account` (a fresh token, inline) to `path`."""
    ca = base64.b64encode(server.ca_path.read_bytes()).decode("ascii")
    user = f"{account.namespace}-{account.name}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": server.name,
                "cluster": {"server": server.url, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": user, "user": {"token": token(server, account)}}],
        "contexts": [{"name": server.name, "context": {"cluster": server.name, "user": user}}],
        "current-context": server.name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class UserInfo:
    """Who the API server says a client is."""

    username: str
    groups: tuple[str, ...]

    @property
    def admin(self) -> bool:
        """Whether it bypasses RBAC (group system:masters)."""
        return ADMIN_GROUP in self.groups


def whoami(kubeconfig_path: Path) -> UserInfo:
    """The identity the API server gives the credentials of `kubeconfig_path`."""
    api = config.new_client_from_config(str(kubeconfig_path))  # type: ignore[no-untyped-call]
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    reviews: Any = client.AuthenticationV1Api(api)
    answer = reviews.create_self_subject_review(body)
    info = answer.status.user_info
    return UserInfo(str(info.username), tuple(info.groups or ()))


def allowed(
    server: APIServer, account: ServiceAccount, verb: str, group: str, resource: str
) -> bool:
    """Whether RBAC lets `account` `verb` `resource` of `group` everywhere (SubjectAccessReview)."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": account.username,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account.namespace}"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource},
        },
    }
    reviews: Any = client.AuthorizationV1Api(_admin(server))
    answer = reviews.create_subject_access_review(body)
    return bool(answer.status.allowed)
