"""The audit webhook HTTP server: `POST /audit-webhook/<route>` with an `audit.k8s.io/v1` EventList.

Every accepted mutating event becomes at most one author fact; the facts of one request are
grouped per (route, group/resource) and appended with one `append_many`. The answer is 200 only
after the log acknowledged every record, and a failure to store is answered so that the apiserver
retries it (503 or 500 with Retry-After; it drops a batch answered any other way), so no batch is
lost; retried batches duplicate facts, which the fact index tolerates. Request bodies are never
logged: audit events carry Secret data.

What a request may cost is bounded before it is paid: bodies are taken as sent (the apiserver
never compresses them; a compressed one is refused with 415 before a byte of it is read), each
within `max_body_bytes`, all of them together within `max_inflight_body_bytes`; connections are
bounded by `pipeline.audit.connections`. Every refusal is a `RequestRejected` with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
from collections import Counter
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from pipeline.audit.budget import BodyBudget, Reservation
from pipeline.audit.connections import CloseReason, Connection, ConnectionCap
from pipeline.audit.httplog import ServerLog
from pipeline.audit.metrics import (
    ADMISSION_REVIEWS,
    ADMISSION_SECONDS,
    BATCH_EVENTS,
    COLLECTION_WITHOUT_UIDSET,
    CONNECTIONS_CLOSED,
    EVENTS,
    FACTS_PUBLISHED,
    RECEIVED_BYTES,
    RECORDS_PUBLISHED,
    REJECTED_REQUESTS,
    REQUEST_SECONDS,
    REQUESTS,
    UNDECLARED_ROUTE,
)
from pipeline.audit.rejections import Rejection, RequestRejected
from pipeline.audit.scope import WatchedTypes, watched_types
from pipeline.audit.security import (
    RoutePolicy,
    authorize,
    bearer_token,
    check_listener,
    load_route_policies,
    peer_identities,
    server_ssl_context,
    watch_certificate,
)
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import Settings, split_host_port
from pipeline.facts.admission import InvalidReview, Review, allowed_response, parse_review, reduce_review
from pipeline.facts.records import Built, build_records
from pipeline.facts.reduce import (
    EventReason,
    Reduction,
    category,
    group_facts,
    reduce_event,
)
from pipeline.log.api import Log, LogError, LogUnavailableError, RecordTooLargeError
from pipeline.log.topics import TopicNames

__all__ = ["ADMISSION_PATH_PREFIX", "EVENT_LIST_API_VERSION", "PATH_PREFIX", "AuditIngress"]

logger = logging.getLogger(__name__)

PATH_PREFIX = "/audit-webhook"
# Validating admission reviews (pipeline.facts.admission): /admission-webhook/<route>[/<token>]
ADMISSION_PATH_PREFIX = "/admission-webhook"
EVENT_LIST_API_VERSION = "audit.k8s.io/v1"
# Outcome of a fact that does not fit in one record even without its uid set (see records.py).
_READ_CHUNK_BYTES = 256 * 1024
# Smallest record size limit the ingress splits down to when the log refuses records as too large.
MIN_MESSAGE_BYTES = 16 * 1024
# The kube-apiserver's audit webhook retries a failed batch only on a connection reset, 500, 504,
# 429, or an answer carrying Retry-After: a bare 503 makes it drop the batch (its facts are lost).
RETRY_AFTER_S = 1
RETRIED_STATUSES = frozenset({500, 503})
# Content-Encoding values that mean the body is sent as is (client-go never sets the header).
_IDENTITY_ENCODINGS = frozenset({"", "identity"})


def _ask_for_retry(response: web.Response) -> None:
    """Make a failed batch come back: Retry-After so the apiserver retries it (without it a 503 is
    final), and the connection closed so the retry is balanced anew, possibly to another replica."""
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    response.force_close()


class AuditIngress:
    """The `reverser run` component serving the audit webhook."""

    name = "audit-ingress"

    def __init__(self, settings: Settings, log_: Log) -> None:
        self._audit = settings.audit
        self._log = log_
        self._topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
        self._max_message_bytes = settings.log.topics.max_message_bytes
        self._host, self._port = split_host_port(self._audit.addr)
        check_listener(self._audit, self._host)
        self._routes: dict[str, RoutePolicy] = load_route_policies(self._audit.routes)
        self._ssl = server_ssl_context(self._audit.tls)
        self._watched: dict[str, WatchedTypes] = watched_types(settings)
        self._budget = BodyBudget(self._audit.max_inflight_body_bytes)
        self._connections: ConnectionCap | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._reloader: asyncio.Task[None] | None = None
        self.port: int | None = None

    @property
    def scheme(self) -> str:
        return "https" if self._ssl is not None else "http"

    async def apply(self, settings: Settings) -> None:
        """Keep the facts of a changed configuration's watched types from the next request on.

        Without it a type watched live (a new rule, a custom-resource change, SIGHUP) would have
        its facts dropped as `unwatched_type`, and its changes would reach Git unattributed.
        """
        self._watched = watched_types(settings)

    async def start(self) -> None:
        app = web.Application(client_max_size=self._audit.max_body_bytes + 1)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # auto_decompress off: aiohttp would inflate a compressed body as it arrives, before the
        # handler could refuse it, and the body limit would only apply to what it inflated to.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=self._audit.idle_timeout_s,
            handle_signals=False,
            auto_decompress=False,
            logger=ServerLog(logger),
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self._connections = ConnectionCap(
            self._runner.server,
            max_open=self._audit.max_connections,
            max_per_peer=self._audit.max_connections_per_peer,
        )
        # Our own listener instead of web.TCPSite: it bounds TLS handshakes and open connections.
        self._server = await asyncio.get_running_loop().create_server(
            self._connections,
            self._host,
            self._port,
            ssl=self._ssl,
            ssl_handshake_timeout=self._audit.tls_handshake_timeout_s if self._ssl else None,
            reuse_address=True,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        if self._ssl is not None:
            self._reloader = asyncio.create_task(watch_certificate(self._ssl, self._audit.tls))
        logger.info(
            "audit webhook on %s://%s:%s%s/<route> (routes: %s)",
            self.scheme,
            self._host,
            self.port,
            PATH_PREFIX,
            ", ".join(sorted(self._routes)) or "none",
        )

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
            self._reloader = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ready(self) -> bool:
        return self._runner is not None

    # request handling ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request; its connection counts as busy until the answer is written.

        The answer is written here rather than by aiohttp after the handler returns, so that the
        connection cap can never drop this connection as idle between the two.
        """
        assert self._connections is not None
        with self._connections.serving(request.transport) as connection:
            response = await self._answer(request, connection)
            with contextlib.suppress(ConnectionError):  # the client left; nobody to answer
                await response.prepare(request)
                await response.write_eof()
        return response

    async def _answer(self, request: web.Request, connection: Connection | None) -> web.Response:
        started = time.perf_counter()
        route_label = UNDECLARED_ROUTE
        admission = self._is_admission(request)
        try:
            if admission:
                route, path_token = self._admission_route_of(request)
                route_label = route.name
                self._authorize(request, route, path_token)
                if connection is not None:
                    connection.authorized = True
                with self._budget.reservation() as reservation:
                    return await self._review(request, route, reservation, started)
            route = self._route_of(request)
            route_label = route.name
            self._authorize(request, route)
            if connection is not None:
                connection.authorized = True
            with self._budget.reservation() as reservation:
                status, text = await self._process(request, route, reservation)
            response = web.Response(status=status, text=text + "\n")
        except RequestRejected as rejected:
            response = web.Response(
                status=rejected.status, text=rejected.message + "\n", headers=rejected.headers
            )
            REJECTED_REQUESTS.labels(route_label, rejected.rejection).inc()
            if rejected.rejection.before_authorization:
                response.force_close()
                CONNECTIONS_CLOSED.labels(CloseReason.REJECTED_REQUEST).inc()
            logger.debug("audit request rejected: %s %s", rejected.status, rejected.rejection)
        except Exception:
            # A bug, not bad input: answer 500 so the apiserver retries, log without the body.
            logger.exception("audit request on route %s failed", route_label)
            response = web.Response(status=500, text="internal error\n")
        if response.status in RETRIED_STATUSES:
            _ask_for_retry(response)
        REQUESTS.labels(route_label, str(response.status)).inc()
        REQUEST_SECONDS.labels(route_label).observe(time.perf_counter() - started)
        return response

    def _route_of(self, request: web.Request) -> RoutePolicy:
        """Method, path and route checks, in that order."""
        path = unquote(request.rel_url.raw_path)
        if path != PATH_PREFIX and not path.startswith(PATH_PREFIX + "/"):
            raise RequestRejected(
                Rejection.NOT_FOUND, "not found: post audit events to /audit-webhook/<route>"
            )
        if request.method != "POST":
            raise RequestRejected(
                Rejection.METHOD_NOT_ALLOWED, "method not allowed: use POST", {"Allow": "POST"}
            )
        if path == PATH_PREFIX:
            raise RequestRejected(
                Rejection.BARE_ENDPOINT, "bare endpoint is not enabled; post to /audit-webhook/<route>"
            )
        name = path[len(PATH_PREFIX) + 1 :]
        if not name:
            raise RequestRejected(Rejection.MISSING_ROUTE, "missing route: post to /audit-webhook/<route>")
        if "/" in name:
            raise RequestRejected(
                Rejection.NESTED_ROUTE, "the route must be a single path segment: /audit-webhook/<route>"
            )
        policy = self._routes.get(name)
        if policy is None:
            raise RequestRejected(Rejection.UNKNOWN_ROUTE, "unknown audit route (declare it in audit.routes)")
        return policy

    def _is_admission(self, request: web.Request) -> bool:
        path = unquote(request.rel_url.raw_path)
        return self._audit.admission.enabled and (
            path == ADMISSION_PATH_PREFIX or path.startswith(ADMISSION_PATH_PREFIX + "/")
        )

    def _admission_route_of(self, request: web.Request) -> tuple[RoutePolicy, str | None]:
        """The route of `/admission-webhook/<route>[/<token>]` and the token in the path, if any.

        A managed control plane cannot present a client certificate or a bearer token to a
        webhook, so a route's token may instead be the last path segment of the webhook's URL
        (readable only by whoever may read ValidatingWebhookConfigurations; docs/security.md).
        """
        if request.method != "POST":
            raise RequestRejected(
                Rejection.METHOD_NOT_ALLOWED, "method not allowed: use POST", {"Allow": "POST"}
            )
        path = unquote(request.rel_url.raw_path)
        segments = path[len(ADMISSION_PATH_PREFIX) + 1 :].split("/") if path != ADMISSION_PATH_PREFIX else []
        if not segments or not segments[0]:
            raise RequestRejected(
                Rejection.MISSING_ROUTE, "missing route: post admission reviews to /admission-webhook/<route>"
            )
        if len(segments) > 2:
            raise RequestRejected(
                Rejection.NESTED_ROUTE, "the path must be /admission-webhook/<route>[/<token>]"
            )
        policy = self._routes.get(segments[0])
        if policy is None:
            raise RequestRejected(Rejection.UNKNOWN_ROUTE, "unknown audit route (declare it in audit.routes)")
        return policy, segments[1] if len(segments) == 2 else None

    @staticmethod
    def _authorize(request: web.Request, policy: RoutePolicy, path_token: str | None = None) -> None:
        """The caller's client certificate or bearer token (or an admission path's token), checked
        against the route's policy."""
        token = bearer_token(request.headers.get("Authorization"))
        denied = authorize(
            policy,
            peer_identities(request.transport.get_extra_info("peercert") if request.transport else None),
            token if token is not None or not path_token else path_token.encode(),
        )
        if denied is not None:
            challenge = denied.rejection is Rejection.UNAUTHENTICATED and policy.tokens
            raise RequestRejected(
                denied.rejection, denied.reason, {"WWW-Authenticate": "Bearer"} if challenge else None
            )

    async def _read_body(self, request: web.Request, route: str, reservation: Reservation) -> bytes:
        """The whole body as sent, refusing what the limits cannot hold before or while reading it.

        Compressed bodies are refused unread (the apiserver never sends one, and inflating would
        make the limits apply after the cost). A declared length is covered by the in-flight
        budget before the first byte is read; a chunked body is covered chunk by chunk.
        """
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in _IDENTITY_ENCODINGS:
            raise RequestRejected(
                Rejection.UNSUPPORTED_ENCODING,
                "unsupported Content-Encoding: send the audit event list uncompressed",
                {"Accept-Encoding": "identity"},
            )
        limit = self._audit.max_body_bytes
        too_large = f"request body too large: max {limit} bytes"
        if request.content_length is not None:
            if request.content_length > limit:
                raise RequestRejected(Rejection.BODY_TOO_LARGE, too_large)
            self._cover(reservation, request.content_length)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._audit.read_timeout_s):
                while True:
                    chunk = await request.content.read(_READ_CHUNK_BYTES)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        RECEIVED_BYTES.labels(route).inc(size)
                        raise RequestRejected(Rejection.BODY_TOO_LARGE, too_large)
                    self._cover(reservation, size)
                    chunks.append(chunk)
        except TimeoutError:
            raise RequestRejected(Rejection.READ_TIMEOUT, "timed out reading the request body") from None
        except (HttpProcessingError, ConnectionError):
            raise RequestRejected(
                Rejection.BROKEN_BODY,
                "request body not received whole: invalid chunked framing or the connection was lost",
            ) from None
        RECEIVED_BYTES.labels(route).inc(size)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _cover(self, reservation: Reservation, size: int) -> None:
        if not reservation.cover(size):
            raise RequestRejected(
                Rejection.BODIES_IN_FLIGHT,
                f"too many request bodies in flight (max {self._budget.max_bytes} bytes in all), retry",
            )

    @staticmethod
    def _decode(body: bytes) -> list[Any]:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            # The message names a position, never content; still, keep it short and generic.
            raise RequestRejected(
                Rejection.INVALID_JSON, "invalid audit event list: body is not valid JSON"
            ) from None
        if not isinstance(document, dict):
            raise RequestRejected(Rejection.NOT_AN_OBJECT, "invalid audit event list: expected a JSON object")
        if document.get("kind") != "EventList":
            raise RequestRejected(Rejection.WRONG_KIND, "invalid audit event list: kind must be EventList")
        if document.get("apiVersion") != EVENT_LIST_API_VERSION:
            raise RequestRejected(
                Rejection.WRONG_API_VERSION,
                f"invalid audit event list: apiVersion must be {EVENT_LIST_API_VERSION}",
            )
        items = document.get("items")
        if items is None:
            return []
        if not isinstance(items, list):
            raise RequestRejected(
                Rejection.ITEMS_NOT_A_LIST, "invalid audit event list: items must be a list"
            )
        return items

    def _reduce_body(self, body: bytes) -> tuple[int, list[Reduction]]:
        """Decode and reduce a body with the cyclic GC paused; returns (events, reductions).

        Runs in a worker thread so a large body never holds the event loop (and `/healthz`) for
        its whole decode. Decoding a 400-event batch allocates tens of thousands of (acyclic)
        containers, which otherwise trigger repeated collections that walk the process's
        long-lived objects (the fact index, clients) and show up as throughput loss and latency
        spikes; the decoded events are freed by reference counting as soon as it returns. Two
        requests decoding at once may overlap their pauses; the collector ends up enabled either way.
        """
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            items = self._decode(body)
            cap = self._audit.max_events_per_request
            if len(items) > cap:
                raise RequestRejected(
                    Rejection.TOO_MANY_EVENTS, f"too many events in one request: {len(items)} > max {cap}"
                )
            uid_cap = self._audit.collection_uid_cap
            return len(items), [reduce_event(item, uid_cap=uid_cap) for item in items]
        finally:
            if paused:
                gc.enable()

    async def _process(
        self, request: web.Request, route: RoutePolicy, reservation: Reservation
    ) -> tuple[int, str]:
        body = await self._read_body(request, route.name, reservation)
        logger.debug("route %s: decoding %d bytes", route.name, len(body))
        event_count, reductions = await asyncio.to_thread(self._reduce_body, body)
        logger.debug("route %s: reduced %d events", route.name, event_count)
        BATCH_EVENTS.labels(route.name).observe(event_count)
        outcomes: Counter[str] = Counter()
        watched = self._watched.get(route.name)
        kept: list[Reduction] = []
        for reduction in reductions:
            if reduction.fact is None:
                outcomes[reduction.reason] += 1
                continue
            if watched is not None and (
                reduction.group_resource is None or not watched.covers(reduction.group_resource)
            ):
                outcomes[EventReason.UNWATCHED_TYPE] += 1
                continue
            if reduction.uidset_reason is not None:
                COLLECTION_WITHOUT_UIDSET.labels(reduction.uidset_reason).inc()
            kept.append(reduction)
        batches = group_facts(route.name, kept)
        fact_count = sum(len(batch.facts) for batch in batches)
        failure: str | None = None
        published = 0
        if batches:
            built, error = await self._publish(route.name, batches)
            too_large = {id(fact) for fact in built.dropped}
            if too_large:
                outcomes[EventReason.FACT_TOO_LARGE] += len(too_large)
                fact_count -= len(too_large)
            if error is not None:
                failure = f"audit facts not stored, retry: {type(error).__name__}: {error}"
                logger.warning(
                    "route %s: appending %d fact records failed: %s", route.name, len(built.records), error
                )
            else:
                published = fact_count
                RECORDS_PUBLISHED.labels(route.name).inc(len(built.records))
                FACTS_PUBLISHED.labels(route.name).inc(fact_count)
            outcomes[EventReason.WRITE_ERROR if failure else EventReason.QUEUED] += fact_count
        self._count(route.name, outcomes)
        if failure is not None:
            return 503, failure
        return 200, f"audit events processed: {event_count} events, {published} facts"

    async def _review(
        self, request: web.Request, route: RoutePolicy, reservation: Reservation, started: float
    ) -> web.Response:
        """One admission review: its fact appended (bounded by `admission.publish_timeout_s`), then
        allowed. Only a body that is not an AdmissionReview is refused (400, which the webhook's
        `failurePolicy: Ignore` turns into an allowed write); nothing here can deny a write."""
        body = await self._read_body(request, route.name, reservation)
        review, reduction = await asyncio.to_thread(self._reduce_review, body)
        reason: str = reduction.reason
        fact = reduction.fact
        gr = reduction.group_resource
        watched = self._watched.get(route.name)
        if fact is not None and gr is not None and watched is not None and not watched.covers(gr):
            reason, fact = EventReason.UNWATCHED_TYPE, None
        if fact is not None and gr is not None:
            _built, error = await self._publish(
                route.name, [FactBatch(route.name, gr, [fact])], self._audit.admission.publish_timeout_s
            )
            if error is not None:
                reason = EventReason.WRITE_ERROR
                logger.warning(
                    "route %s: admission fact not stored (the write goes on): %s", route.name, error
                )
        ADMISSION_REVIEWS.labels(route.name, reason, category(reason)).inc()
        ADMISSION_SECONDS.labels(route.name).observe(time.perf_counter() - started)
        return web.json_response(allowed_response(review.uid))

    def _reduce_review(self, body: bytes) -> tuple[Review, Reduction]:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise RequestRejected(
                Rejection.INVALID_JSON, "invalid admission review: body is not valid JSON"
            ) from None
        try:
            review = parse_review(document)
        except InvalidReview as exc:
            raise RequestRejected(
                Rejection.NOT_AN_ADMISSION_REVIEW, f"invalid admission review: {exc}"
            ) from None
        return review, reduce_review(review, time.time_ns() // 1000)

    async def _publish(
        self, route: str, batches: list[FactBatch], timeout_s: float | None = None
    ) -> tuple[Built, LogError | None]:
        """One `append_many` for the request, bounded by `publish_timeout_s`; re-split if needed.

        A request the log does not acknowledge in time is answered 503 (records that land later
        are duplicates of the apiserver's retry, which the index tolerates).

        Re-splitting: the topic may predate the configured `max_message_bytes` (or the broker may
        cap it), and a record the log refuses as too large would be refused on every apiserver
        retry; halving the record size limit until it fits keeps the batch flowing. The learned limit
        is kept.
        """
        if timeout_s is None:
            timeout_s = self._audit.publish_timeout_s
        while True:
            built = await asyncio.to_thread(build_records, batches, self._max_message_bytes)
            if not built.records:
                return built, None
            try:
                async with asyncio.timeout(timeout_s):
                    await self._log.append_many(self._topic, built.records)
            except TimeoutError:
                return built, LogUnavailableError(f"the log did not acknowledge within {timeout_s:g} s")
            except RecordTooLargeError as exc:
                if self._max_message_bytes <= MIN_MESSAGE_BYTES:
                    return built, exc
                self._max_message_bytes = max(MIN_MESSAGE_BYTES, self._max_message_bytes // 2)
                logger.warning(
                    "route %s: the log refused a fact record as too large (%s); splitting to %d bytes",
                    route,
                    exc,
                    self._max_message_bytes,
                )
            except LogError as exc:
                return built, exc
            else:
                return built, None

    @staticmethod
    def _count(route: str, outcomes: Counter[str]) -> None:
        for reason, count in outcomes.items():
            EVENTS.labels(route, reason, category(reason)).inc(count)
