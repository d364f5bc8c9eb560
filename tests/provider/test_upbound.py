"""Upbound Cloud's organisation tokens: the exchange over real HTTPS, and when it is done again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from provider import kube
from provider.kube import ExchangedToken
from provider.spaces.upbound import OrganizationTokens
from sandbox.spacefront import CloudAuth, SpaceFront


@pytest.fixture(scope="module")
def cloud() -> Iterator[SpaceFront]:
    with SpaceFront(cloud=CloudAuth(organization="acme", token_lifetime=90)) as front:
        yield front


def exchange(front: SpaceFront, organization: str, token: str) -> ExchangedToken:
    return asyncio.run(
        kube.exchange_organization_token(
            front.url, organization, token, ca_pem=front.ca_pem.decode()
        )
    )


def test_a_robots_token_is_exchanged_for_an_organisation_token_with_its_lifetime(
    cloud: SpaceFront,
) -> None:
    assert cloud.cloud is not None
    answer = exchange(cloud, "acme", cloud.cloud.robot_token)
    assert answer.expires_in == 90
    assert answer.access_token != cloud.cloud.robot_token
    assert cloud.cloud.admits(answer.access_token)


@dataclass
class RefusedCase:
    reason: str
    organization: str
    token: str | None
    error: type[kube.KubeError]
    said: str


REFUSED = [
    RefusedCase(
        "A token the auth service does not know is Unauthorized.",
        "acme",
        "not-a-robot-token",
        kube.UnauthorizedError,
        "401 Unauthorized",
    ),
    RefusedCase(
        "A robot's token is no token of another organisation.",
        "other-org",
        None,
        kube.KubeError,
        "403 Forbidden",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case.reason)
def test_a_refused_exchange_says_why_and_never_holds_the_token(
    cloud: SpaceFront, case: RefusedCase
) -> None:
    assert cloud.cloud is not None
    token = case.token or cloud.cloud.robot_token
    with pytest.raises(case.error) as raised:
        exchange(cloud, case.organization, token)
    assert case.said in str(raised.value)
    assert token not in str(raised.value)


def test_an_endpoint_whose_certificate_is_not_trusted_is_not_sent_the_token(
    cloud: SpaceFront,
) -> None:
    assert cloud.cloud is not None
    before = cloud.cloud.exchanges
    with pytest.raises(kube.UnreachableError):
        asyncio.run(kube.exchange_organization_token(cloud.url, "acme", cloud.cloud.robot_token))
    assert cloud.cloud.exchanges == before


@dataclass
class FakeAuth:
    """An exchange that counts its calls and issues numbered tokens of one lifetime."""

    lifetime: float
    calls: list[str] = field(default_factory=list)

    async def __call__(
        self, endpoint: str, organization: str, token: str, *, ca_pem: str | None = None
    ) -> ExchangedToken:
        self.calls.append(token)
        return ExchangedToken(f"access-{len(self.calls)}", self.lifetime)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_is_reused_until_half_its_life_is_gone_then_exchanged_again() -> None:
    auth, clock = FakeAuth(lifetime=60.0), Clock()

    async def scenario() -> list[str]:
        tokens = OrganizationTokens("https://auth", "acme", "robot", exchange=auth, clock=clock)
        try:
            seen = [await tokens()]
            clock.now += 29.0
            seen.append(await tokens())
            clock.now += 2.0
            seen.append(await tokens())
            return seen
        finally:
            await tokens.close()

    assert asyncio.run(scenario()) == ["access-1", "access-1", "access-2"]
    assert auth.calls == ["robot", "robot"]


def test_a_token_is_refreshed_in_the_background_and_the_refresh_is_told() -> None:
    auth = FakeAuth(lifetime=0.2)
    told: list[float] = []

    async def scenario() -> str:
        tokens = OrganizationTokens("https://auth", "acme", "robot", exchange=auth)
        tokens.on_refresh = lambda: told.append(1.0)
        try:
            await tokens()
            for _ in range(100):
                if len(told) >= 2:
                    break
                await asyncio.sleep(0.02)
            return await tokens()
        finally:
            await tokens.close()

    latest = asyncio.run(scenario())
    assert len(told) >= 2, "no refresh was told"
    assert latest != "access-1"


def test_a_token_the_space_refuses_is_exchanged_again_at_the_next_request() -> None:
    auth, clock = FakeAuth(lifetime=3600.0), Clock()

    async def scenario() -> list[str]:
        tokens = OrganizationTokens("https://auth", "acme", "robot", exchange=auth, clock=clock)
        try:
            first = await tokens()
            tokens.refused("some-other-token")
            same = await tokens()
            tokens.refused(first)
            return [first, same, await tokens()]
        finally:
            await tokens.close()

    assert asyncio.run(scenario()) == ["access-1", "access-1", "access-2"]


def test_while_the_auth_service_is_away_a_token_is_used_until_it_expires() -> None:
    clock = Clock()
    answers: list[ExchangedToken | kube.KubeError] = [
        ExchangedToken("access-1", 60.0),
        kube.UnreachableError("cannot reach the token exchange"),
        kube.UnreachableError("cannot reach the token exchange"),
    ]

    async def flaky(
        endpoint: str, organization: str, token: str, *, ca_pem: str | None = None
    ) -> ExchangedToken:
        answer = answers.pop(0)
        if isinstance(answer, kube.KubeError):
            raise answer
        return answer

    async def scenario() -> tuple[str, str | None]:
        tokens = OrganizationTokens("https://auth", "acme", "robot", exchange=flaky, clock=clock)
        try:
            await tokens()
            clock.now += 45.0
            still = await tokens()
            clock.now += 20.0
            try:
                await tokens()
            except kube.UnreachableError:
                return still, None
            return still, "expired token handed out"
        finally:
            await tokens.close()

    assert asyncio.run(scenario()) == ("access-1", None)
