"""A thin client for what the stages ask of a Kubernetes API server: discovery, LIST, WATCH, reads.

kubernetes-asyncio supplies the connection, TLS and authentication (kubeconfig or in-cluster);
the requests themselves are raw (`_preload_content=False`) so the stream can use WatchList
parameters (`sendInitialEvents`, `resourceVersionMatch`) and read events of any size as untyped
JSON without the generated models.

kubernetes-asyncio is imported when the first client is opened, not with this module, and then
only its connection parts (`pipeline.kube.modelless`): its package imports every generated model
(about 0.4 s and 33 MiB), which no request here uses. That import runs in a worker thread
(`_connection_parts`): on the event loop it held every other task for 0.3-0.5 s while the watch
stage started, in the middle of `reverser run`'s start.

A client may be given a way to read its credentials again (`Reauthenticate`): when the server
answers 401, it asks for them once (at most every `REAUTH_INTERVAL_S`, however many requests met
the 401), continues with the new ones and repeats the request, so a rotated kubeconfig Secret heals
every stream, discovery and Lease of the cluster without reopening it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import aiohttp

from pipeline.config import ClusterSettings
from pipeline.content import fastjson
from pipeline.failures import plain
from pipeline.kube import modelless
from pipeline.kube.resources import ApiResource, collection_path
from pipeline.kube.throttle import Throttle

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

__all__ = [
    "REAUTH_INTERVAL_S",
    "UNREACHABLE",
    "ApiResource",
    "KubeClient",
    "KubeError",
    "Reauthenticate",
    "WatchConnection",
    "access_allowed",
    "api_client_from_dict",
    "collection_path",
    "open_client",
    "open_client_from_dict",
]

logger = logging.getLogger(__name__)

_AUTH = ["BearerToken"]
_CONNECT_TIMEOUT_S = 10.0
_REQUEST_TIMEOUT_S = 60.0


#: The reason of a `KubeError` for a request that got no answer (connection refused, reset, timed out).
UNREACHABLE = "Unreachable"

#: After a 401: new credentials for the cluster (an API client), or None when they did not change.
Reauthenticate: TypeAlias = Callable[[], Awaitable["ApiClient | None"]]
#: A 401 reads the credentials again at most this often (every stream of a cluster meets it).
REAUTH_INTERVAL_S = 10.0


class KubeError(Exception):
    """The API server refused a request or broke a stream; carries the Status fields."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        # No answer at all has no HTTP status to print.
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def gone(self) -> bool:
        """The resourceVersion asked for is too old (410 Gone / Expired): a fresh snapshot is needed."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @property
    def watchlist_rejected(self) -> bool:
        """The server does not support streaming lists, so the LIST fallback applies."""
        if self.reason == "WatchListIgnored":
            return True
        return 400 <= self.status < 500 and "sendInitialEvents" in self.message

    @property
    def unreachable(self) -> bool:
        """No answer: the connection failed or broke (`UNREACHABLE`), as opposed to a refusal."""
        return self.status == 0 and self.reason == UNREACHABLE

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @classmethod
    def from_status(cls, status: int, body: bytes | str) -> KubeError:
        """Parse a `Status` body when there is one; otherwise keep the raw text."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return cls(
                int(parsed.get("code") or status),
                str(parsed.get("reason") or ""),
                str(parsed.get("message") or ""),
            )
        return cls(status, "", text[:500])


def _ignore_undecodable() -> None:
    """The default `on_undecodable`: a caller that keeps no count still gets the error logged."""


#: Lines a watch decodes per step (`WatchConnection.batches`).
BATCH_LINES: Final = 100
#: Bytes taken from a watch response per read. Taking whatever had arrived joined megabytes into
#: one buffer during a snapshot and split them into lines at once, two copies of the read held
#: while its events were decoded (issue 32's memory budget); the response keeps the rest.
READ_BYTES: Final = 256 * 1024


class WatchConnection:
    """An open watch response, read as one JSON event per line; lines may be arbitrarily long.

    An undecodable line is logged, skipped and reported to `on_undecodable`: the count belongs to
    the caller (the watch stage's `reverser_watch_events_dropped_total`), not to this layer. Lines
    are parsed by `decode` (`fastjson.loads`, or a decoder of only the fields the caller reads).
    """

    __slots__ = ("_decode", "_on_undecodable", "_response")

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        on_undecodable: Callable[[], None] = _ignore_undecodable,
        decode: Callable[[bytes], Any] = fastjson.loads,
    ) -> None:
        self._response = response
        self._on_undecodable = on_undecodable
        self._decode = decode

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Decoded events until the server ends the stream (`batches`, one at a time)."""
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """Decoded events, a list per read of at most `READ_BYTES` (or per `BATCH_LINES` lines of
        a longer read), until the server ends the stream.

        Handing a read's events on together costs a reader one queue operation per read instead
        of one per event. A read holds a few hundred lines during a snapshot: decoded at once they
        held the event loop and kept their objects alive, so a read is decoded a part at a time,
        as the reader asks for it. An abrupt close raises
        `aiohttp.ClientPayloadError` (or a connection error); a clean end of the stream just ends
        the iteration.
        """
        pending = b""
        decode = self._decode_event
        async for chunk in self._response.content.iter_chunked(READ_BYTES):
            data = pending + chunk if pending else chunk
            lines = data.split(b"\n")
            pending = lines.pop()
            for start in range(0, len(lines), BATCH_LINES):
                batch = [e for line in lines[start : start + BATCH_LINES] if (e := decode(line)) is not None]
                if batch:
                    yield batch
        event = decode(pending)
        if event is not None:
            yield [event]

    def close(self) -> None:
        self._response.close()

    def _decode_event(self, line: bytes) -> dict[str, Any] | None:
        """The event on one line; a blank line is None, an undecodable one is counted and skipped."""
        if not line or line.isspace():  # not `strip()`, which copies every line
            return None
        try:
            event = self._decode(line)
        except ValueError as exc:
            self._on_undecodable()
            logger.error("skipping an undecodable watch event (%d bytes): %s", len(line), exc)
            return None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            self._on_undecodable()
            logger.error("skipping a watch event without an object: %.200r", line)
            return None
        return event


class KubeClient:
    """Discovery, LIST, WATCH and namespace lookups against one cluster."""

    def __init__(
        self,
        api: ApiClient,
        name: str,
        throttle: Throttle | None = None,
        reauthenticate: Reauthenticate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._api_exception = modelless.load().api_exception  # imported with `api` (docstring)
        self.name = name
        #: the cluster's `qps`/`burst` bucket every request waits on; None: unthrottled
        self.throttle = throttle
        self._reauthenticate = reauthenticate
        self._clock = clock
        #: how many times the credentials were replaced (a request knows which ones it used)
        self.credentials_generation = 0
        self._reauthenticated_at: float | None = None
        self._reauthenticating = asyncio.Lock()
        # the credentials replaced last: requests and watches already sent with them end on their own
        self._stale: ApiClient | None = None

    async def close(self) -> None:
        if self._stale is not None:
            await self._stale.close()
            self._stale = None
        await self._api.close()

    async def _renewed(self, generation: int) -> bool:
        """After a 401 of a request sent with credentials `generation`: whether newer ones are there
        (another request already read them, or they were read now and changed)."""
        if self._reauthenticate is None:
            return False
        async with self._reauthenticating:
            if self.credentials_generation != generation:
                return True
            now = self._clock()
            if self._reauthenticated_at is not None and now - self._reauthenticated_at < REAUTH_INTERVAL_S:
                return False
            self._reauthenticated_at = now
            fresh = await self._reauthenticate()
            if fresh is None:
                return False
            older, self._stale, self._api = self._stale, self._api, fresh
            self.credentials_generation += 1
            if older is not None:  # two rotations ago: a watch still open on it ends and reconnects
                await older.close()
            return True

    async def _request(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        limits: aiohttp.ClientTimeout,
        method: str = "GET",
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """One request; after a 401, once more if the credentials were read again and changed."""
        generation = self.credentials_generation
        try:
            return await self._send(path, query, limits, method, body, content_type)
        except KubeError as exc:
            if exc.status != 401 or not await self._renewed(generation):
                raise
        return await self._send(path, query, limits, method, body, content_type)

    async def _send(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        limits: aiohttp.ClientTimeout,
        method: str,
        body: dict[str, Any] | None,
        content_type: str,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self.throttle is not None:
            await self.throttle.acquire()
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=_AUTH,
                _preload_content=False,
                _request_timeout=limits,
            )
        except self._api_exception as exc:
            raise KubeError(int(exc.status or 0), str(exc.reason or ""), str(exc.body or "")) from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise KubeError(0, UNREACHABLE, f"{self.name}: {plain(exc)}") from exc
        if response.status not in (200, 201):
            error_body = await response.read()
            response.release()
            raise KubeError.from_status(response.status, error_body)
        return response

    async def get_json(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """GET a JSON document; raises KubeError for any non-2xx answer or broken connection."""
        return await self.send_json("GET", path, query=query)

    async def send_json(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request with an optional JSON body (`content_type` names a PATCH's kind); the answer
        must be a JSON object."""
        timeout = aiohttp.ClientTimeout(total=_REQUEST_TIMEOUT_S, sock_connect=_CONNECT_TIMEOUT_S)
        response = await self._request(path, query, timeout, method, body, content_type)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise KubeError(0, UNREACHABLE, f"{self.name}: {plain(exc)}") from exc
        finally:
            response.release()
        try:
            parsed = fastjson.loads(raw)
        except ValueError as exc:
            raise KubeError(200, "BadResponse", f"{path}: not JSON") from exc
        if not isinstance(parsed, dict):
            raise KubeError(200, "BadResponse", f"{path}: not a JSON object")
        return parsed

    async def watch(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        read_timeout_s: float,
        on_undecodable: Callable[[], None] = _ignore_undecodable,
        decode: Callable[[bytes], Any] = fastjson.loads,
    ) -> WatchConnection:
        """Open a watch; the server's refusal (410, WatchList unsupported, ...) raises KubeError.

        `on_undecodable` is called once per event line that is skipped as undecodable; `decode`
        parses each line (`WatchConnection`).
        """
        timeout = aiohttp.ClientTimeout(sock_connect=_CONNECT_TIMEOUT_S, sock_read=read_timeout_s)
        response = await self._request(path, [*query, ("watch", "true")], timeout)
        return WatchConnection(response, on_undecodable, decode)

    async def list_pages(
        self, path: str, query: Sequence[tuple[str, str]], page_size: int
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """LIST a collection page by page (following `continue`): each page's items with the RV of
        the list (the first page's), so a caller holds one page at a time, never the collection."""
        resource_version = ""
        token = ""
        while True:
            page_query = [*query, ("limit", str(page_size))]
            if token:
                page_query.append(("continue", token))
            page = await self.get_json(path, page_query)
            meta = page.get("metadata") or {}
            if not resource_version:
                resource_version = str(meta.get("resourceVersion") or "")
            items = [item for item in page.get("items") or [] if isinstance(item, dict)]
            token = str(meta.get("continue") or "")
            yield items, resource_version
            if not token:
                return

    async def collection_version(self, path: str) -> str:
        """The collection's current resourceVersion: a LIST of one item, read from etcd (quorum)."""
        page = await self.get_json(path, [("limit", "1")])
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def namespace_phase(self, namespace: str) -> str | None:
        """`Active` or `Terminating`, or None when the namespace does not exist."""
        try:
            found = await self.get_json(f"/api/v1/namespaces/{namespace}")
        except KubeError as exc:
            if exc.not_found:
                return None
            raise
        return str((found.get("status") or {}).get("phase") or "Active")

    async def discover(self) -> dict[tuple[str, str], ApiResource]:
        """Top-level resources at each group's preferred version, keyed by (group, resource)."""
        found: dict[tuple[str, str], ApiResource] = {}
        core = await self.get_json("/api")
        core_versions = [str(v) for v in core.get("versions") or []]
        if core_versions:
            await self._discover_version(found, "", core_versions[0], tuple(core_versions))
        groups = await self.get_json("/apis")
        for group in groups.get("groups") or []:
            name = str(group.get("name") or "")
            versions = [str(v.get("version")) for v in group.get("versions") or [] if v.get("version")]
            preferred = (group.get("preferredVersion") or {}).get("version")
            if not preferred:
                preferred = versions[0] if versions else None
            if name and preferred:
                served = (str(preferred), *(v for v in versions if v != preferred))
                await self._discover_version(found, name, str(preferred), served)
        return found

    async def _discover_version(
        self, found: dict[tuple[str, str], ApiResource], group: str, version: str, served: tuple[str, ...]
    ) -> None:
        prefix = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        try:
            listing = await self.get_json(prefix)
        except KubeError as exc:
            if exc.not_found or exc.status == 503:
                return  # an aggregated API that is down; its resources show up as unknown
            raise
        for entry in listing.get("resources") or []:
            name = str(entry.get("name") or "")
            if not name or "/" in name:
                continue
            found[(group, name)] = ApiResource(
                group=group,
                version=version,
                resource=name,
                kind=str(entry.get("kind") or ""),
                namespaced=bool(entry.get("namespaced")),
                verbs=frozenset(str(v) for v in entry.get("verbs") or []),
                served=served,
            )


_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


async def access_allowed(
    client: KubeClient, verb: str, group: str, resource: str, namespace: str
) -> tuple[bool, str]:
    """Whether this identity may `verb` the resource, and the authorizer's reason when it may not.

    Asked of the apiserver itself (SelfSubjectAccessReview), so RBAC, webhooks and every other
    authorizer answer exactly as they would for the real request.
    """
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace}
        },
    }
    answer = await client.send_json("POST", _REVIEWS, review)
    status = answer.get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")


async def _connection_parts() -> modelless.ConnectionParts:
    """kubernetes-asyncio's connection parts, imported in a worker thread the first time (see the
    module docstring); the loop runs its other tasks meanwhile (the import gives up the GIL as any
    Python code does)."""
    parts = modelless.loaded()
    return parts if parts is not None else await asyncio.to_thread(modelless.load)


async def open_client(cluster: ClusterSettings) -> KubeClient:
    """A client for one configured cluster, from its kubeconfig or the pod's service account."""
    parts = await _connection_parts()
    if cluster.kubeconfig_secret is not None:
        raise ValueError(
            f"cluster {cluster.name}: its kubeconfig is in {cluster.kubeconfig_secret.describe()}, which "
            "this client factory does not read (pipeline.kube.kubeconfigsecret does)"
        )
    configuration = parts.configuration()
    if cluster.in_cluster:
        parts.config.load_incluster_config(client_configuration=configuration)
    else:
        await parts.config.load_kube_config(
            config_file=str(cluster.kubeconfig) if cluster.kubeconfig else None,
            context=cluster.context,
            client_configuration=configuration,
            persist_config=False,
        )
    return KubeClient(
        parts.api_client(configuration=configuration),
        cluster.name,
        Throttle.of(cluster.qps, cluster.effective_burst),
    )


async def api_client_from_dict(kubeconfig: dict[str, Any]) -> ApiClient:
    """The API client of a kubeconfig already read (a Secret's), at its current context."""
    parts = await _connection_parts()
    configuration = parts.configuration()
    await parts.config.load_kube_config_from_dict(config_dict=kubeconfig, client_configuration=configuration)
    return parts.api_client(configuration=configuration)


async def open_client_from_dict(
    cluster: ClusterSettings, kubeconfig: dict[str, Any], reauthenticate: Reauthenticate | None = None
) -> KubeClient:
    """A client for `cluster` from a kubeconfig already read (a Secret's), at its current context;
    `reauthenticate` reads it again after a 401."""
    return KubeClient(
        await api_client_from_dict(kubeconfig),
        cluster.name,
        Throttle.of(cluster.qps, cluster.effective_burst),
        reauthenticate,
    )
