"""Upbound Cloud's organisation-scoped tokens: exchanged once, refreshed before they expire.

Every Upbound tool reaches a Cloud Space with a short-lived token scoped to an
organisation, exchanged for a robot's or user's token (``up organization token``;
provider-kubernetes' ``UpboundTokens`` identity wraps its REST config in an
oauth2 transport over the same exchange: ``pkg/kube/client/upbound/upbound.go``).
``OrganizationTokens`` is that token source for one credential: the first request
exchanges, and a background task exchanges again once half the token's life has
gone (the answer's ``expires_in``; Upbound documents no fixed lifetime), so a
token handed on (written into an Instance's kubeconfig) still has at least half
its life left. ``on_refresh`` hears of each new token: the provider then rewrites
the kubeconfigs that carry the old one. A token the Space refuses (401) before it
should expire is dropped, and the next request exchanges again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from provider import kube
from provider.kube import ExchangedToken

log = logging.getLogger(__name__)

# What part of its life a token may spend before it is exchanged again.
REFRESH_AFTER = 0.5
# Failed exchanges are tried again after these many seconds, doubling.
RETRY_SECONDS = (1.0, 30.0)

Exchange = Callable[..., Awaitable[ExchangedToken]]


@dataclass(frozen=True)
class _Token:
    value: str
    issued_at: float
    expires_at: float

    @property
    def refresh_at(self) -> float:
        return self.issued_at + (self.expires_at - self.issued_at) * REFRESH_AFTER


class OrganizationTokens:
    """Access tokens of one organisation for one robot's or user's token; a ``TokenSource``."""

    def __init__(
        self,
        endpoint: str,
        organization: str,
        token: str,
        *,
        ca_pem: str | None = None,
        on_refresh: Callable[[], None] | None = None,
        exchange: Exchange = kube.exchange_organization_token,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Exchange ``token`` at ``endpoint`` for ``organization``; nothing is sent before use."""
        self.endpoint = endpoint
        self.organization = organization
        self._subject = token
        self._ca_pem = ca_pem
        self.on_refresh = on_refresh
        self._exchange_call = exchange
        self._clock = clock
        self._current: _Token | None = None
        self._lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self.exchanges = 0

    async def __call__(self) -> str:
        """The current access token; exchanged first when there is none or it is due."""
        current = self._current
        if current is not None and self._clock() < current.refresh_at:
            return current.value
        async with self._lock:
            current = self._current
            if current is None or self._clock() >= current.refresh_at:
                try:
                    current = await self._exchange()
                except kube.KubeError:
                    # The auth service is away: a token that has not expired still works.
                    if current is None or self._clock() >= current.expires_at:
                        raise
        return current.value

    def refused(self, token: str) -> None:
        """The Space refused ``token`` (401): the next request exchanges again."""
        if self._current is not None and self._current.value == token:
            self._current = None

    def expires_in(self) -> float | None:
        """Seconds the current token has left; None before the first exchange."""
        if self._current is None:
            return None
        return self._current.expires_at - self._clock()

    async def _exchange(self) -> _Token:
        token = await self._exchange_now()
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._refresh())
        return token

    async def _refresh(self) -> None:
        """Exchange again at each token's refresh point; tell ``on_refresh`` of the new one."""
        delay = RETRY_SECONDS[0]
        while True:
            current = self._current
            wait = (current.refresh_at - self._clock()) if current is not None else 0.0
            await asyncio.sleep(max(wait, 0.0))
            try:
                async with self._lock:
                    if self._current is current or self._current is None:
                        await self._exchange_now()
            except kube.KubeError as error:
                log.warning(
                    "cannot exchange the Upbound token",
                    extra={"fields": {"organization": self.organization, "error": str(error)}},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_SECONDS[1])
                continue
            delay = RETRY_SECONDS[0]
            if self.on_refresh is not None:
                self.on_refresh()

    async def _exchange_now(self) -> _Token:
        answer = await self._exchange_call(
            self.endpoint, self.organization, self._subject, ca_pem=self._ca_pem
        )
        now = self._clock()
        self.exchanges += 1
        self._current = _Token(answer.access_token, now, now + answer.expires_in)
        return self._current

    async def close(self) -> None:
        """Stop refreshing."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
