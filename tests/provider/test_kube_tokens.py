"""provider/kube.py mints ServiceAccount tokens with the TokenRequest API of a real API server.

The sandbox API server signs service account tokens with its own key and
issuer (its URL), and authorizes with RBAC, so the claims, the refusals and
who may mint what are the real API's.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provider.kube import (
    NAMESPACES,
    SERVICE_ACCOUNTS,
    Cluster,
    ForbiddenError,
    KubeError,
    NotFoundError,
    ServiceAccountRef,
)
from sandbox.apiserver import APIServer
from sandbox.awsstandin.trust import token_claims

STS = "sts.amazonaws.com"
# The account a restore borrows, and one that RBAC lets do nothing.
WRITER, NOBODY = "writer", "nobody"


def with_token(kubeconfig: dict[str, Any], token: str) -> dict[str, Any]:
    """``kubeconfig`` with its user's credentials replaced by a bearer token."""
    changed = copy.deepcopy(kubeconfig)
    changed["users"][0]["user"] = {"token": token}
    return changed


@dataclass(frozen=True)
class Minted:
    """What one case saw: the token, or the error, and the namespace it ran in."""

    namespace: str
    token: str = ""
    error: KubeError | None = None


async def mint(server: APIServer, account: str, *, as_nobody: bool) -> Minted:
    """Make a namespace with WRITER and NOBODY, then ask for a token of ``account`` for STS.

    The asking client is the admin, or (``as_nobody``) NOBODY with a token of
    its own for the API server, which RBAC grants nothing.
    """
    kubeconfig = yaml.safe_load(server.kubeconfig)
    admin = await Cluster.from_kubeconfig(kubeconfig)
    namespace = f"tokens-{uuid.uuid4().hex[:8]}"
    try:
        await admin.create(NAMESPACES, {"metadata": {"name": namespace}})
        for name in (WRITER, NOBODY):
            await admin.create(
                SERVICE_ACCOUNTS, {"metadata": {"name": name, "namespace": namespace}}
            )
        asking = admin
        if as_nobody:
            own = await admin.service_account_token(
                ServiceAccountRef(namespace, NOBODY), audiences=[server.url], expiration_seconds=600
            )
            asking = await Cluster.from_kubeconfig(with_token(kubeconfig, own))
        try:
            token = await asking.service_account_token(
                ServiceAccountRef(namespace, account), audiences=[STS], expiration_seconds=3600
            )
        except KubeError as error:
            return Minted(namespace, error=error)
        finally:
            if asking is not admin:
                await asking.close()
        return Minted(namespace, token=token)
    finally:
        await admin.close()


@dataclass(frozen=True)
class MintCase:
    reason: str
    account: str
    as_nobody: bool = False
    # None: a token is minted.
    refused: type[KubeError] | None = None
    message: str = ""


MINT_CASES = [
    MintCase(
        "A token of an existing ServiceAccount carries its subject and only STS's audience",
        WRITER,
    ),
    MintCase(
        "A ServiceAccount that does not exist is not found, and no token comes back",
        "missing",
        refused=NotFoundError,
        message='serviceaccounts "missing" not found',
    ),
    MintCase(
        "A client that RBAC does not let create the account's tokens is forbidden",
        WRITER,
        as_nobody=True,
        refused=ForbiddenError,
        message='cannot create resource "serviceaccounts/token"',
    ),
]


@pytest.mark.parametrize("case", MINT_CASES, ids=lambda case: case.reason)
def test_a_service_account_token_is_minted_only_for_an_existing_account_by_an_allowed_client(
    case: MintCase, apiserver: APIServer
) -> None:
    minted = asyncio.run(mint(apiserver, case.account, as_nobody=case.as_nobody))

    if case.refused is not None:
        assert minted.token == ""
        assert isinstance(minted.error, case.refused), minted.error
        assert case.message in str(minted.error)
        assert "eyJ" not in str(minted.error), "no token (a JWT) in the message"
        return
    assert minted.error is None
    claims = token_claims(minted.token)
    assert claims["aud"] == [STS]
    assert claims["sub"] == f"system:serviceaccount:{minted.namespace}:{case.account}"
    assert claims["iss"] == apiserver.url
    assert claims["exp"] - claims["iat"] == 3600


def test_a_token_minted_for_sts_is_refused_by_the_api_server(apiserver: APIServer) -> None:
    # Why the provider may hold one: it is the account's identity for STS only.
    async def use_it() -> KubeError | None:
        minted = await mint(apiserver, WRITER, as_nobody=False)
        holder = await Cluster.from_kubeconfig(
            with_token(yaml.safe_load(apiserver.kubeconfig), minted.token)
        )
        return await refusal(lambda: holder.get(NAMESPACES, None, "default"), holder)

    error = asyncio.run(use_it())

    assert isinstance(error, KubeError)
    assert ": 401 Unauthorized" in str(error)


async def refusal(call: Callable[[], Awaitable[object]], cluster: Cluster) -> KubeError | None:
    """The KubeError ``call`` raises, or None; ``cluster`` is closed either way."""
    try:
        await call()
    except KubeError as error:
        return error
    finally:
        await cluster.close()
    return None
