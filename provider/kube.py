"""The one module that talks HTTP: to Kubernetes API servers, and to Upbound's token exchange.

The API servers are the local cluster and each Space; the token exchange is the
one other API a Space needs (Upbound Cloud). It uses the official client's
asyncio ApiClient for authentication, TLS and kubeconfig handling, and speaks
plain REST by path on one keep-alive aiohttp session per cluster, so one small
surface serves every kind: custom
resources, Secrets, Events and Leases. Errors come out as ``KubeError`` and
its subclasses, with messages made from the API's Status (never from a
response body that could hold a secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.config import kube_config
from kubernetes.aio.config.config_exception import ConfigException
from kubernetes.aio.config.incluster_config import load_incluster_config

from provider import kubeconfig as kubeconfig_model
from provider.managed.reconciler import ConflictError

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
# A page of objects (named here: Cluster.list shadows the builtin in its body).
Page = list[JsonObject]
# Told of each request once it is answered: its verb, its resource, and the HTTP
# status code ("200", "503") or UNREACHABLE when no answer came.
RequestHook = Callable[[str, str, str], None]
UNREACHABLE = "<error>"
# Gives the bearer token of the next request (a short-lived one, refreshed as it goes).
TokenSource = Callable[[], Awaitable[str]]

USER_AGENT = "controlplane-provider"
REQUEST_TIMEOUT_SECONDS = 15.0
WATCH_TIMEOUT_SECONDS = 300


_WATCH_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class KubeError(Exception):
    """A request to an API server failed; the message is safe to show."""


class NotFoundError(KubeError):
    """The object does not exist."""


class AlreadyExistsError(KubeError):
    """The object already exists."""


class UnreachableError(KubeError):
    """The API server could not be reached, or did not answer in time."""


class UnauthorizedError(KubeError):
    """The server does not take the client's credentials (401): an expired or revoked token."""


class GoneError(KubeError):
    """A watch's resourceVersion is too old: list again."""


class ForbiddenError(KubeError):
    """The client's identity may not do what it asked (RBAC said no)."""


class LimitExceededError(KubeError):
    """A read went past a bound the caller set; ``reason`` names the bound (CamelCase)."""

    def __init__(self, message: str, reason: str) -> None:
        """``message`` is safe to show; ``reason`` is a condition reason naming the limit."""
        super().__init__(message)
        self.reason = reason


RESPONSE_TOO_LARGE = "ResponseTooLarge"
TOO_MANY_PAGES = "TooManyPages"


@dataclass(frozen=True)
class Resource:
    """An API resource, addressed by group, version and plural."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The REST path of the collection, an object, or one of its subresources."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


SECRETS = Resource("", "v1", "secrets", "Secret")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


@dataclass(frozen=True)
class ListBounds:
    """How much one list may read from a server that a team controls.

    Attributes:
        max_pages: Pages of one list; a server that answers with a continue token
            for ever is stopped here.
        max_response_bytes: The body of one answer, decompressed. Parsed JSON takes
            up to about ten times its size, so this bounds memory per page; a page
            beyond it is asked for again at half the size, so a few large objects
            (etcd keeps at most 1.5 MiB each) still fit.
    """

    max_pages: int = 1_000
    max_response_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True)
class ServiceAccountRef:
    """A ServiceAccount, by namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: JsonObject


class Cluster:
    """One API server, with the credentials of one kubeconfig."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        on_request: RequestHook | None = None,
        token_source: TokenSource | None = None,
    ) -> None:
        """Wrap an ApiClient; ``on_request(verb, plural)`` is told of every request.

        ``token_source`` gives the bearer token of each request instead of the
        client's own credentials (tokens that expire and are refreshed).
        """
        # The API server names the field manager after the user agent.
        api_client.user_agent = USER_AGENT
        self._client = api_client
        self._on_request = on_request
        self._token_source = token_source
        self._sent_token = ""
        # Made on the first request: a session needs a running event loop.
        self._session: aiohttp.ClientSession | None = None
        # The proxy and TLS server name each request is sent with, set with the session.
        self._request_options: dict[str, Any] = {}

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: Mapping[str, Any],
        *,
        on_request: RequestHook | None = None,
    ) -> Cluster:
        """A cluster from a parsed kubeconfig that a team may have written (its current context).

        Only ``provider.kubeconfig``'s allow-list is honoured: an https server, inline
        certificate data, a TLS server name and a token. Nothing named in the kubeconfig
        is run or read.

        Raises:
            KubeError: the kubeconfig is refused; the message names the field, never a value.
        """
        try:
            credentials = kubeconfig_model.parse(kubeconfig)
        except kubeconfig_model.KubeconfigError as error:
            raise KubeError(str(error)) from None
        configuration = Configuration(host=credentials.server)
        configuration.ca_cert_data = credentials.ca_pem
        configuration.tls_server_name = credentials.tls_server_name
        if credentials.token:
            configuration.api_key["BearerToken"] = f"Bearer {credentials.token}"
        if credentials.client_certificate_pem is None or credentials.client_key_pem is None:
            return cls(_api_client(configuration), on_request=on_request)
        # Python's ssl module loads a client certificate from files only: they live
        # in a private folder just long enough for the client to load them.
        with tempfile.TemporaryDirectory(prefix="kubeconfig-") as folder:
            configuration.cert_file = _private_file(
                Path(folder) / "client.crt", credentials.client_certificate_pem
            )
            configuration.key_file = _private_file(
                Path(folder) / "client.key", credentials.client_key_pem
            )
            client = _api_client(configuration)
        configuration.cert_file = configuration.key_file = None
        return cls(client, on_request=on_request)

    @classmethod
    def with_token_source(
        cls,
        server: str,
        ca_pem: str | None,
        token_source: TokenSource,
        *,
        on_request: RequestHook | None = None,
    ) -> Cluster:
        """A cluster at ``server`` (https), trusting ``ca_pem`` (else the public CAs).

        Every request carries the bearer token ``token_source`` gives at that moment.
        """
        configuration = Configuration(host=server.rstrip("/"))
        configuration.ca_cert_data = ca_pem
        return cls(_api_client(configuration), on_request=on_request, token_source=token_source)

    @classmethod
    async def from_environment(
        cls, kubeconfig_path: str | None = None, *, on_request: RequestHook | None = None
    ) -> Cluster:
        """The cluster of ``kubeconfig_path``, ``$KUBECONFIG``, or the pod's own.

        The operator's own configuration, trusted: the client's loader may read the
        files it names. Never use it for a kubeconfig from a Secret.
        """
        path = kubeconfig_path or os.environ.get("KUBECONFIG")
        configuration = Configuration()
        try:
            if path:
                await kube_config.load_kube_config(
                    config_file=path, client_configuration=configuration
                )
            else:
                load_incluster_config(client_configuration=configuration)
        except ConfigException as error:
            # The loader's own messages name files and keys, not their values.
            msg = f"cannot load the kubeconfig {path or '(in-cluster)'}: {error}"
            raise KubeError(msg) from None
        except Exception as error:  # noqa: BLE001 (a YAML error quotes the file: name the type only)
            msg = f"cannot load the kubeconfig {path or '(in-cluster)'}: {type(error).__name__}"
            raise KubeError(msg) from None
        return cls(ApiClient(configuration), on_request=on_request)

    @property
    def api_client(self) -> ApiClient:
        """The underlying ApiClient (for the Lease lock of leader election)."""
        return self._client

    @property
    def server(self) -> str:
        """The API server's URL."""
        host: str = self._client.configuration.host
        return host

    async def close(self) -> None:
        """Close connections."""
        if self._session is not None:
            await self._session.close()
        await self._client.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        content_type: str = "application/json",
        label: str = "",
        max_bytes: int | None = None,
    ) -> JsonObject:
        """One request; the decoded JSON answer. ``label`` names the resource in metrics.

        ``max_bytes`` bounds the answer's (decompressed) body: reading stops there, so
        a server that answers with more cannot grow memory past it.

        Raises:
            KubeError: with a subclass for not found, conflict, already exists,
                unreachable, and LimitExceededError past ``max_bytes``.
        """
        encoded = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in (1, 2):
            async with self._unreachable_as_error(method, label):
                response = await self._send(
                    method,
                    path,
                    query=query,
                    body=encoded,
                    timeout=timeout,
                    content_type=content_type,
                )
            # Counted once, by its status; an answer that breaks off is not counted again.
            self._tell(method, label, str(response.status))
            async with self._unreachable_as_error(), response:
                data = await _read(response, max_bytes, f"{method} {path}")
            # A short-lived token refused before its time (revoked, a clock ahead of
            # ours): the request was not served, so it goes once more with a new one.
            if response.status != 401 or not self._drop_refused_token() or attempt == 2:
                break
        if response.status >= 300:
            raise _error(method, path, response.status, data)
        decoded: JsonObject = json.loads(data) if data else {}
        return decoded

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        body: bytes | None,
        timeout: float,
        content_type: str,
    ) -> aiohttp.ClientResponse:
        """Send one request with the official client's TLS settings and (refreshed) token.

        Not through its ``param_serialize`` and ``call_api``: they walk and copy
        every body per request, and its session looks up netrc and proxies in a
        worker thread per request (``trust_env``); together more CPU than TLS and
        HTTP, about 0.5 ms a request, a third of a restore's. Here the caller
        encodes the body once, and the proxy is looked up once.
        """
        headers = {
            **self._client.default_headers,
            "Accept": "application/json",
            "Content-Type": content_type,
        }
        if self._token_source is not None:
            headers["Authorization"] = f"Bearer {await self._token_source()}"
            self._sent_token = headers["Authorization"].removeprefix("Bearer ")
        else:
            for setting in (await self._client.configuration.auth_settings()).values():
                headers[setting["key"]] = setting["value"]
        url = self.server + path
        if query:
            url += "?" + urlencode(query)
        response: aiohttp.ClientResponse = await self._connection_pool().request(
            method,
            url,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            **self._request_options,
        )
        return response

    def _drop_refused_token(self) -> bool:
        """Tell the token source its last token was refused; whether it can give another."""
        refused = getattr(self._token_source, "refused", None)
        if refused is None:
            return False
        refused(self._sent_token)
        return True

    def _connection_pool(self) -> aiohttp.ClientSession:
        """One keep-alive session for the cluster's life, as the official client would make it.

        Its TLS context (CA, client certificate), pool size, proxy and TLS server
        name are the client's; a proxy from the environment (``HTTPS_PROXY``,
        ``NO_PROXY``) is read here once instead of per request.
        """
        if self._session is None:
            rest = self._client.rest_client
            configuration = self._client.configuration
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=rest.maxsize, ssl=rest.ssl_context),
                # Watch events can exceed aiohttp's default line buffer.
                read_bufsize=2**21,
            )
            self._request_options = _proxy_options(self.server, rest.proxy, rest.proxy_headers)
            if configuration.tls_server_name:
                self._request_options["server_hostname"] = configuration.tls_server_name
        return self._session

    @contextlib.asynccontextmanager
    async def _unreachable_as_error(
        self, verb: str = "", resource: str = ""
    ) -> AsyncIterator[None]:
        """Transport failures, while connecting or reading, as UnreachableError.

        A ``verb`` names the request that got no answer, to tell the request hook of it.
        """
        try:
            yield
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as error:
            if verb:
                self._tell(verb, resource, UNREACHABLE)
            msg = f"cannot reach {self.server}: {type(error).__name__}"
            raise UnreachableError(msg) from None

    def _tell(self, verb: str, resource: str, code: str) -> None:
        if self._on_request is not None:
            self._on_request(verb, resource or "other", code)

    # Verbs.

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JsonObject | None:
        """The object, or None."""
        try:
            return await self.request("GET", resource.path(namespace, name), label=resource.plural)
        except NotFoundError:
            return None

    async def create(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Create ``obj`` in its namespace."""
        namespace = obj.get("metadata", {}).get("namespace")
        return await self.request("POST", resource.path(namespace), body=obj, label=resource.plural)

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Replace ``obj`` (optimistic concurrency on its resourceVersion)."""
        metadata = obj["metadata"]
        path = resource.path(metadata.get("namespace"), metadata["name"])
        return await self.request("PUT", path, body=obj, label=resource.plural)

    async def replace_status(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Replace ``obj``'s status subresource."""
        metadata = obj["metadata"]
        path = resource.path(metadata.get("namespace"), metadata["name"], "status")
        return await self.request("PUT", path, body=obj, label=resource.plural)

    async def merge_patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str = "",
    ) -> JsonObject:
        """Apply a JSON merge patch, to the object or one of its subresources (``status``)."""
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=patch,
            content_type="application/merge-patch+json",
            label=resource.plural,
        )

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> bool:
        """Delete the object; False when it was already gone."""
        try:
            await self.request("DELETE", resource.path(namespace, name), label=resource.plural)
        except NotFoundError:
            return False
        return True

    async def service_account_token(
        self, account: ServiceAccountRef, *, audiences: Sequence[str], expiration_seconds: int
    ) -> str:
        """A bound token of ``account`` for ``audiences``, minted with the TokenRequest API.

        The token is returned and nothing else: it is never logged, and the errors
        raised are made from the API's Status, which never holds it.

        Args:
            account: The ServiceAccount whose identity the token carries.
            audiences: Who may accept it (its ``aud`` claim).
            expiration_seconds: Its lifetime; the API server takes at least 600.

        Raises:
            KubeError: ForbiddenError when this client may not create the account's
                tokens, NotFoundError when the account does not exist, and
                UnreachableError.
        """
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": list(audiences), "expirationSeconds": expiration_seconds},
        }
        path = SERVICE_ACCOUNTS.path(account.namespace, account.name, "token")
        answer = await self.request("POST", path, body=request, label=SERVICE_ACCOUNTS.plural)
        token = (answer.get("status") or {}).get("token")
        if not isinstance(token, str) or not token:
            msg = f"POST {path}: the TokenRequest's answer holds no token"
            raise KubeError(msg)
        return token

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[JsonObject], str]:
        """Every object (of a namespace, or of all); and the list's resourceVersion."""
        items: list[JsonObject] = []
        version = ""
        async for page, page_version in self.list_pages(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        ):
            items.extend(page)
            version = page_version
        return items, version

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 500,
        bounds: ListBounds | None = None,
    ) -> AsyncIterator[tuple[Page, str]]:
        """Every object, a page at a time, each with the list's resourceVersion.

        The pages are one consistent snapshot (the continue token pins it), so
        the last page's version is where a watch of the whole list starts.

        With ``bounds`` (for servers a team controls) a page larger than
        ``bounds.max_response_bytes`` is asked for again at half the size, down to
        one object, and a list longer than ``bounds.max_pages`` pages stops.

        Raises:
            GoneError: the snapshot expired between pages; list again.
            LimitExceededError: past one of ``bounds``.
        """
        token = ""
        pages = 0
        while True:
            query = {"limit": str(page_size)}
            if label_selector:
                query["labelSelector"] = label_selector
            if field_selector:
                query["fieldSelector"] = field_selector
            if token:
                query["continue"] = token
            try:
                answer = await self.request(
                    "GET",
                    resource.path(namespace),
                    query=query,
                    label=resource.plural,
                    max_bytes=bounds.max_response_bytes if bounds else None,
                )
            except LimitExceededError as error:
                if error.reason != RESPONSE_TOO_LARGE or page_size == 1:
                    raise
                # Large objects, or a hostile server: smaller pages tell which.
                page_size //= 2
                continue
            pages += 1
            metadata = answer.get("metadata") or {}
            yield list(answer.get("items") or []), str(metadata.get("resourceVersion", ""))
            token = str(metadata.get("continue") or "")
            if not token:
                return
            if bounds is not None and pages >= bounds.max_pages:
                msg = (
                    f"the list of {resource.plural} on {self.server} went on past "
                    f"{bounds.max_pages} pages (the limit of pages per list)"
                )
                raise LimitExceededError(msg, TOO_MANY_PAGES)

    async def pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        page_size: int = 500,
        bounds: ListBounds | None = None,
    ) -> AsyncIterator[Page]:
        """Every object, a page at a time, so memory stays bounded by a page."""
        async for page, _ in self.list_pages(
            resource, namespace, page_size=page_size, bounds=bounds
        ):
            yield page

    async def is_namespaced(self, api_version: str, kind: str) -> bool | None:
        """Whether ``kind`` of ``api_version`` is namespaced, from discovery; None if not served.

        An ownerReference does not say whether its owner is namespaced (a namespaced
        object may be owned by a cluster-scoped one): discovery does.
        """
        path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        try:
            answer = await self.request("GET", path, label="discovery")
        except NotFoundError:
            return None
        for resource in answer.get("resources") or []:
            if resource.get("kind") == kind and "/" not in str(resource.get("name", "")):
                return bool(resource.get("namespaced"))
        return None

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        dry_run: bool = False,
    ) -> JsonObject:
        """Server-side apply ``obj`` as ``field_manager``, taking over conflicting fields.

        With ``dry_run`` the server admits, defaults and merges the object as it would,
        and answers with the result, but stores nothing (``dryRun=All``).
        """
        metadata = obj["metadata"]
        query = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        return await self.request(
            "PATCH",
            resource.path(metadata.get("namespace"), metadata["name"]),
            body=obj,
            query=query,
            content_type="application/apply-patch+yaml",
            label=resource.plural,
        )

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        namespace: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        *,
        label_selector: str = "",
        field_selector: str = "",
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Events since ``resource_version``, until the server ends the watch.

        ``on_open`` is called once the server has accepted the watch.

        Raises:
            GoneError: the version is too old; list again and watch from there.
            KubeError: the server refuses the watch (its status), or sends
                something that is not a watch event.
        """
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        async with self._unreachable_as_error("WATCH", resource.plural):
            response = await self._send(
                "GET",
                resource.path(namespace),
                query=query,
                body=None,
                timeout=timeout_seconds + REQUEST_TIMEOUT_SECONDS,
                content_type="application/json",
            )
        self._tell("WATCH", resource.plural, str(response.status))
        try:
            if response.status >= 300:
                raise _error(
                    "WATCH", resource.path(namespace), response.status, await response.read()
                )
            if on_open is not None:
                on_open()
            async for line in response.content:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    # A line cut short by a dropped connection.
                    msg = f"watch of {resource.plural} on {self.server} sent a broken event"
                    raise UnreachableError(msg) from None
                kind = event.get("type") if isinstance(event, dict) else None
                if kind == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise GoneError(str(status.get("message", "resource version too old")))
                    raise KubeError(f"watch {resource.plural}: {status.get('message', '')}")
                if kind not in _WATCH_EVENTS:
                    # A server that ignores ?watch and answers a list, say.
                    msg = f"watch of {resource.plural} on {self.server} sent no watch event"
                    raise KubeError(msg)
                yield WatchEvent(str(kind), event.get("object") or {})
        except (aiohttp.ClientError, TimeoutError) as error:
            msg = f"watch of {resource.plural} on {self.server} ended: {type(error).__name__}"
            raise UnreachableError(msg) from None
        finally:
            response.release()

    async def lead(
        self,
        lease: str,
        namespace: str,
        identity: str,
        leading: Callable[[], Coroutine[Any, Any, None]],
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        """Run ``leading`` while this process holds the Lease; return when it is lost.

        client-go's leader election on a ``coordination.k8s.io`` Lease: acquire
        it once it is free or expired, renew it every ``retry_period``, and
        give up (cancelling ``leading``) when no renewal succeeded for
        ``renew_deadline``. The official client's own asyncio LeaseLock cannot
        create a Lease in this version, hence this one.
        """
        while not await self._hold(lease, namespace, identity, lease_duration):
            await asyncio.sleep(retry_period)
        task = asyncio.create_task(leading())
        renewed = time.monotonic()
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=retry_period)
                if await self._hold(lease, namespace, identity, lease_duration):
                    renewed = time.monotonic()
                elif time.monotonic() - renewed > renew_deadline:
                    log.warning("lost the leader lease", extra={"fields": {"lease": lease}})
                    return
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _hold(self, name: str, namespace: str, identity: str, duration: float) -> bool:
        """Acquire or renew the Lease; False when another holder's is still valid."""
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            lease = await self.get(LEASES, namespace, name)
            if lease is None:
                await self.create(
                    LEASES,
                    {
                        "apiVersion": LEASES.api_version,
                        "kind": LEASES.kind,
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {
                            "holderIdentity": identity,
                            "leaseDurationSeconds": int(duration),
                            "acquireTime": stamp,
                            "renewTime": stamp,
                            "leaseTransitions": 0,
                        },
                    },
                )
                return True
            spec = lease.setdefault("spec", {})
            holder = spec.get("holderIdentity")
            if holder and holder != identity and not _expired(spec, now):
                return False
            if holder != identity:
                spec["acquireTime"] = stamp
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec.update(
                {
                    "holderIdentity": identity,
                    "leaseDurationSeconds": int(duration),
                    "renewTime": stamp,
                }
            )
            await self.replace(LEASES, lease)
        except KubeError:
            return False
        return True


async def _read(response: aiohttp.ClientResponse, max_bytes: int | None, what: str) -> bytes:
    """The whole body, or a LimitExceededError as soon as it is longer than ``max_bytes``."""
    if max_bytes is None:
        return await response.read()
    body = bytearray()
    if response.content_length is None or response.content_length <= max_bytes:
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > max_bytes:
                break
        else:
            return bytes(body)
    # Freed now, not when the traceback that holds this frame is collected.
    body.clear()
    msg = f"{what}: the answer is larger than {max_bytes} bytes (the limit of bytes per response)"
    raise LimitExceededError(msg, RESPONSE_TOO_LARGE)


def _api_client(configuration: Configuration) -> ApiClient:
    """A client; a certificate or key that TLS cannot load is a KubeError."""
    try:
        return ApiClient(configuration)
    except (ssl.SSLError, ValueError, OSError) as error:
        msg = f"the kubeconfig's certificates cannot be used ({type(error).__name__})"
        raise KubeError(msg) from None


def _proxy_options(
    server: str, configured: str | None, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    """The proxy to reach ``server`` through: the kubeconfig's, else the environment's."""
    if configured:
        return {"proxy": configured, "proxy_headers": headers}
    parts = urlsplit(server)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return {}
    proxy = urllib.request.getproxies().get(parts.scheme)
    return {"proxy": proxy} if proxy else {}


def _private_file(path: Path, data: bytes) -> str:
    path.touch(mode=0o600)
    path.write_bytes(data)
    return str(path)


def _expired(spec: Mapping[str, Any], now: datetime) -> bool:
    renewed = spec.get("renewTime")
    if not renewed:
        return True
    renew_time = datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
    return (now - renew_time).total_seconds() > float(spec.get("leaseDurationSeconds") or 0)


def _error(method: str, path: str, status: int, data: bytes) -> KubeError:
    """An error from an API Status; only its reason and message are kept."""
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {}
    message = str(answer.get("message") or "") if isinstance(answer, dict) else ""
    reason = str(answer.get("reason") or "") if isinstance(answer, dict) else ""
    text = f"{method} {path}: {status} {reason}: {message}".rstrip(": ")
    if status == 401:
        return UnauthorizedError(text)
    if status == 403:
        return ForbiddenError(text)
    if status == 404:
        return NotFoundError(text)
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExistsError(text)
    if status == 409:
        return _ConflictError(text)
    if status == 410:
        return GoneError(text)
    return KubeError(text)


class _ConflictError(KubeError, ConflictError):
    """A write lost an optimistic-concurrency race."""


def load_kubeconfig_text(text: str) -> JsonObject:
    """Parse a kubeconfig; a KubeError that quotes none of it when it is not one."""
    import yaml  # noqa: PLC0415 (only kubeconfigs from secrets need it)

    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed.get("clusters"):
        msg = "is not a valid kubeconfig"
        raise KubeError(msg)
    return parsed


def kubeconfig_file(path: str | Path) -> JsonObject:
    """A kubeconfig read from a file."""
    return load_kubeconfig_text(Path(path).read_text())


# Upbound's token exchange (up-sdk-go service/auth: client.go, tokenexchange_types.go).
TOKEN_EXCHANGE_PATH = "/apis/tokenexchange.upbound.io/v1alpha1/orgscopedtokens"  # noqa: S105 (a path)
_TOKEN_EXCHANGE_FORM = (
    ("audience", "upbound:spaces:api"),
    ("audience", "upbound:spaces:controlplanes"),
    ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
    ("subject_token_type", "urn:ietf:params:oauth:token-type:id_token"),
)
_ERROR_DETAIL_CHARS = 200


@dataclass(frozen=True)
class ExchangedToken:
    """An organisation-scoped access token and how many seconds it lives."""

    access_token: str
    expires_in: float


async def exchange_organization_token(
    endpoint: str,
    organization: str,
    token: str,
    *,
    ca_pem: str | None = None,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> ExchangedToken:
    """Exchange a robot's or user's ``token`` for one scoped to ``organization``.

    As up-sdk-go's ``GetOrgScopedToken`` (what ``up organization token`` and
    provider-kubernetes' ``UpboundTokens`` identity call): a form POST of an RFC
    8693 token exchange to ``<endpoint>/apis/tokenexchange.upbound.io/v1alpha1/
    orgscopedtokens``, the token as subject and bearer, audiences
    ``upbound:spaces:api`` and ``upbound:spaces:controlplanes``, scope
    ``upbound:org:<organization>``; the answer's ``access_token`` and
    ``expires_in``.

    Raises:
        UnauthorizedError: the token is refused (401).
        KubeError: any other failure; the message never holds a token.
    """
    url = endpoint.rstrip("/") + TOKEN_EXCHANGE_PATH
    form = urlencode(
        [*_TOKEN_EXCHANGE_FORM, ("subject_token", token), ("scope", f"upbound:org:{organization}")]
    )
    context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    where = f"POST {url}"
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(
                url,
                data=form.encode(),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Authorization": f"Bearer {token}",
                    "User-Agent": USER_AGENT,
                },
                timeout=aiohttp.ClientTimeout(total=timeout),
                **_proxy_options(url, None, None),
            ) as response,
        ):
            data = await _read(response, 1024 * 1024, where)
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as error:
        msg = f"cannot reach the token exchange {url}: {type(error).__name__}"
        raise UnreachableError(msg) from None
    if status >= 300:
        raise _exchange_error(where, status, data, token)
    try:
        answer = json.loads(data)
        access, expires_in = answer["access_token"], float(answer["expires_in"])
    except (ValueError, KeyError, TypeError):
        msg = f"{where}: the answer is not a token exchange response"
        raise KubeError(msg) from None
    if not isinstance(access, str) or not access or expires_in <= 0:
        msg = f"{where}: the answer holds no access token with a lifetime"
        raise KubeError(msg)
    return ExchangedToken(access, expires_in)


def _exchange_error(where: str, status: int, data: bytes, token: str) -> KubeError:
    """An error from an up-sdk-go error body (``status``, ``title``, ``detail``), token-free."""
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    title = str(answer.get("title") or "")
    detail = str(answer.get("detail") or "")[:_ERROR_DETAIL_CHARS].replace(token, "<token>")
    text = f"{where}: {status} {title}: {detail}".rstrip(": ")
    if status == 401:
        return UnauthorizedError(text)
    return KubeError(text)
