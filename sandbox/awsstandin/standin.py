"""The running stand-in: one controller per kind and flavour, on one API server.

Each controller lists and watches its kind (provider.controller) and runs the
generic managed reconciler (provider.managed.reconciler, crossplane-runtime's
loop) with this package's reference resolver and external clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from provider.controller import Controller, desired_state_changed
from provider.events import EventRecorder
from provider.kube import Cluster
from provider.managed.external import ManagedObject
from provider.managed.reconciler import WARNING, Reconciler
from provider.runtime.queue import RateLimitingQueue
from sandbox.awsstandin.api import COMPONENT, KindAPI
from sandbox.awsstandin.cloud import Cloud, Endpoints
from sandbox.awsstandin.externals import REASON_NOT_APPLIED, Connector
from sandbox.awsstandin.identities import Identities, SeaweedAdmin
from sandbox.awsstandin.kinds import KINDS, Kind
from sandbox.awsstandin.references import References
from sandbox.awsstandin.sts import Bridge, StsServer


@dataclass(frozen=True)
class Settings:
    """How the stand-in reaches AWS's stand-ins and how often it looks again."""

    endpoints: Endpoints
    poll_interval: float = 30.0
    # After a create or delete, and the first backoff after a failure.
    short_wait: float = 1.0
    # With it, an STS endpoint whose sessions SeaweedFS accepts (see sts.py).
    seaweed: SeaweedAdmin | None = None
    # The STS endpoint's loopback port; 0 for any free one.
    sts_port: int = 0


def _user_named(managed: ManagedObject) -> str:
    return str(managed["metadata"]["name"])


def _provider_named(_: ManagedObject) -> None:
    return None


class AwsStandin:
    """Plays provider-aws for the composed S3 and IAM kinds (or some of them) on one cluster."""

    def __init__(self, cluster: Cluster, settings: Settings, kinds: Sequence[Kind] = KINDS) -> None:
        """Serve ``kinds`` on ``cluster``; AWS calls go where ``settings`` says.

        A part of the kinds is what one member of the provider-aws family
        serves (provider-aws-s3's, provider-aws-iam's), as the identity that
        member runs as.
        """
        self.cluster = cluster
        self.settings = settings
        self.cloud = Cloud(settings.endpoints)
        self.events = EventRecorder(cluster, COMPONENT)
        self.controllers = [
            self._controller(kind, namespaced=namespaced)
            for kind in kinds
            for namespaced in (True, False)
        ]
        self.sts: StsServer | None = None
        if settings.seaweed is not None:
            sts = settings.endpoints.sts or settings.endpoints.iam
            bridge = Bridge(sts, self.cloud, Identities(settings.seaweed))
            self.sts = StsServer(bridge, settings.sts_port)

    @property
    def sts_endpoint(self) -> str:
        """The STS endpoint to give the backup writer (AWS_ENDPOINT_URL_STS).

        Raises:
            RuntimeError: The stand-in was started without a SeaweedFS admin.
        """
        if self.sts is None:
            msg = "the stand-in serves no STS endpoint without Settings.seaweed"
            raise RuntimeError(msg)
        return self.sts.endpoint

    def _controller(self, kind: Kind, *, namespaced: bool) -> Controller:
        resource = kind.resource(namespaced=namespaced)
        reconciler = Reconciler(
            KindAPI(self.cluster, resource, self.events),
            Connector(kind, self.cloud, self._not_applied, self._role_changed),
            poll_interval=self.settings.poll_interval,
            short_wait=self.settings.short_wait,
            # SeaweedFS and moto show what was just made: no grace period to wait out
            # (crossplane-runtime's default too).
            creation_grace_period=0.0,
            external_name=_user_named if kind.named_by_user else _provider_named,
            # Observe finds every kind by its spec and external name: an
            # interrupted create is found, never made twice.
            deterministic_external_name=True,
            references=References(self.cluster, kind) if kind.references else None,
        )
        flavour = "namespaced" if namespaced else "cluster"
        return Controller(
            f"standin-{kind.plural}-{flavour}",
            self.cluster,
            resource,
            reconciler.reconcile,
            workers=1,
            # upjet's controllers filter events with DesiredStateChanged: their own
            # status writes and create bookkeeping do not wake them.
            predicate=desired_state_changed,
            queue=RateLimitingQueue(
                base_delay=self.settings.short_wait / 4, max_delay=self.settings.poll_interval
            ),
        )

    async def _role_changed(self, role: str) -> None:
        if self.sts is not None:
            await asyncio.to_thread(self.sts.bridge.refresh, role)

    async def _not_applied(self, managed: ManagedObject, message: str) -> None:
        await self.events.record(managed, WARNING, REASON_NOT_APPLIED, message)

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile (and serve STS) until ``stop`` is set."""
        if self.sts is not None:
            self.sts.start()
        try:
            await asyncio.gather(*(controller.run(stop) for controller in self.controllers))
        finally:
            if self.sts is not None:
                await asyncio.to_thread(self.sts.stop)

    async def synced(self) -> None:
        """Wait until every controller has listed its kind once."""
        await asyncio.gather(*(controller.synced.wait() for controller in self.controllers))


@contextlib.asynccontextmanager
async def running(
    kubeconfig: str | Path, settings: Settings, kinds: Sequence[Kind] = KINDS
) -> AsyncIterator[AwsStandin]:
    """Run the stand-in in this event loop; stop it on exit.

    Args:
        kubeconfig: The kubeconfig of the API server the managed resources live in.
        settings: The endpoints and intervals.
        kinds: The kinds to serve.

    Yields:
        The running stand-in, once every kind has been listed.
    """
    cluster = await Cluster.from_environment(str(kubeconfig))
    standin = AwsStandin(cluster, settings, kinds)
    stop = asyncio.Event()
    task = asyncio.create_task(standin.run(stop))
    try:
        await asyncio.wait(
            {task, asyncio.ensure_future(standin.synced())}, return_when=asyncio.FIRST_COMPLETED
        )
        if task.done():
            task.result()
        yield standin
    finally:
        stop.set()
        await task
        await cluster.close()


_THREAD_DEADLINE = 60.0


@contextlib.contextmanager
def running_in_thread(
    kubeconfig: str | Path, settings: Settings, kinds: Sequence[Kind] = KINDS
) -> Iterator[AwsStandin]:
    """Run the stand-in on an event loop of its own thread, for synchronous callers.

    Args:
        kubeconfig: The kubeconfig of the API server the managed resources live in.
        settings: The endpoints and intervals.
        kinds: The kinds to serve.

    Yields:
        The running stand-in, once every kind has been listed.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="aws-standin", daemon=True)
    thread.start()
    context = running(kubeconfig, settings, kinds)
    try:
        standin = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result(
            _THREAD_DEADLINE
        )
        try:
            yield standin
        finally:
            asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result(
                _THREAD_DEADLINE
            )
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_THREAD_DEADLINE)
        loop.close()
