"""Burrow's v3 HTTP read API over the lag monitor, so Burrow dashboards and exporters work unchanged.

Served on the metrics port of `reverser run` and by `reverser lag --serve ADDR`:

- `GET /v3/kafka`: the cluster list (one cluster, `lag.cluster_name`);
- `GET /v3/kafka/<cluster>/consumer`: the selected consumer groups;
- `GET /v3/kafka/<cluster>/consumer/<group>/lag`: the group status with every partition;
- `GET /v3/kafka/<cluster>/consumer/<group>/status`: the same with only the partitions not OK;
- `GET /v3/kafka/<cluster>/topic`: the topics the selected groups consume;
- `GET /v3/kafka/<cluster>/topic/<topic>`: the log-end offset of each partition.

Field names, nesting and status names are Burrow's (`error`/`message`/`request` envelope; a
status object with `partitions`, `partition_count`, `maxlag`, `totallag`, `complete`; partition
`start`/`end` entries of `offset`, `timestamp`, `lag`). The answers come from the monitor's last
poll, so a request costs no broker round trip. Unknown clusters and topics are 404 with
`error: true`; an unknown group is 404 with status `NOTFOUND`, as Burrow answers.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import Counter
from pydantic import BaseModel

from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import CommitWindow, Status
from pipeline.log.api import TopicPartition

__all__ = [
    "NOT_FOUND",
    "BurrowOffset",
    "BurrowPartition",
    "BurrowStatus",
    "LagSource",
    "burrow_routes",
    "group_status_document",
]

NOT_FOUND = "NOTFOUND"

REQUESTS = Counter(
    "reverser_lag_api_requests_total",
    "Requests to the Burrow-compatible lag API, by endpoint and HTTP status code.",
    ("endpoint", "code"),
)


class LagSource(Protocol):
    """What the API reads: the last snapshot and the commit windows behind it."""

    @property
    def last(self) -> LagSnapshot | None: ...

    @property
    def window_size(self) -> int: ...

    def window(self, group: str, tp: TopicPartition) -> CommitWindow | None: ...


class BurrowRequest(BaseModel):
    url: str
    host: str


class BurrowOffset(BaseModel):
    """One window entry: committed offset, its (first) commit time in ms, the lag at that commit."""

    offset: int
    timestamp: int
    lag: int


class BurrowPartition(BaseModel):
    topic: str
    partition: int
    owner: str
    status: str
    start: BurrowOffset | None
    end: BurrowOffset | None
    current_lag: int
    complete: float


class BurrowStatus(BaseModel):
    cluster: str
    group: str
    status: str
    complete: float
    partitions: list[BurrowPartition]
    partition_count: int
    maxlag: BurrowPartition | None
    totallag: int


class _Envelope(BaseModel):
    error: bool
    message: str
    request: BurrowRequest


class _ClusterList(_Envelope):
    clusters: list[str]


class _ConsumerList(_Envelope):
    consumers: list[str]


class _TopicList(_Envelope):
    topics: list[str]


class _TopicDetail(_Envelope):
    offsets: list[int]


class _ConsumerStatus(_Envelope):
    status: BurrowStatus


def _offset(entry: tuple[int, int, int]) -> BurrowOffset:
    offset, lag, timestamp = entry
    return BurrowOffset(offset=offset, lag=lag, timestamp=timestamp)


def _partition(p: PartitionLag, window: CommitWindow | None, window_size: int) -> BurrowPartition:
    entries = window.entries() if window is not None else []
    start = _offset(entries[0]) if entries else None
    end = _offset(entries[-1]) if entries else None
    return BurrowPartition(
        topic=p.topic,
        partition=p.partition,
        owner="",
        status=p.status.value,
        start=start,
        end=end,
        current_lag=p.lag,
        complete=min(1.0, len(entries) / window_size),
    )


def group_status_document(
    cluster: str, group: GroupLag | None, name: str, source: LagSource, *, show_all: bool
) -> BurrowStatus:
    """Burrow's status object for one group; `show_all` lists OK partitions too (`/lag`)."""
    if group is None:
        return BurrowStatus(
            cluster=cluster,
            group=name,
            status=NOT_FOUND,
            complete=1.0,
            partitions=[],
            partition_count=0,
            maxlag=None,
            totallag=0,
        )
    partitions = [
        _partition(p, source.window(group.group, TopicPartition(p.topic, p.partition)), source.window_size)
        for p in group.partitions
    ]
    maxlag = max(partitions, key=lambda p: p.current_lag, default=None)
    complete = sum(1 for p in partitions if p.complete >= 1.0) / len(partitions) if partitions else 1.0
    return BurrowStatus(
        cluster=cluster,
        group=group.group,
        status=group.status.value,
        complete=complete,
        partitions=partitions if show_all else [p for p in partitions if p.status != Status.OK.value],
        partition_count=len(partitions),
        maxlag=maxlag,
        totallag=group.total_lag,
    )


def _topic_ends(snapshot: LagSnapshot) -> dict[str, dict[int, int]]:
    ends: dict[str, dict[int, int]] = {}
    for group in snapshot.groups:
        for p in group.partitions:
            ends.setdefault(p.topic, {})[p.partition] = p.end
    return ends


def burrow_routes(source: Callable[[], LagSource | None], cluster: str) -> list[web.RouteDef]:
    """The read routes; `source` returns the running monitor, or None while there is none."""
    host = socket.gethostname()

    def request_info(request: web.Request) -> BurrowRequest:
        return BurrowRequest(url=request.path, host=host)

    def reply(endpoint: str, body: BaseModel, status: int = 200) -> web.Response:
        REQUESTS.labels(endpoint, str(status)).inc()
        return web.Response(status=status, text=body.model_dump_json(), content_type="application/json")

    def error(request: web.Request, endpoint: str, message: str, status: int = 404) -> web.Response:
        body = _Envelope(error=True, message=message, request=request_info(request))
        return reply(endpoint, body, status)

    def snapshot_for(request: web.Request) -> tuple[LagSource | None, LagSnapshot | None]:
        """The monitor and its last snapshot when the path names our cluster."""
        monitor = source()
        if monitor is None or request.match_info.get("cluster") != cluster:
            return None, None
        return monitor, monitor.last or LagSnapshot(taken_ms=0, groups=())

    async def clusters(request: web.Request) -> web.Response:
        names = [cluster] if source() is not None else []
        body = _ClusterList(
            error=False, message="cluster list returned", clusters=names, request=request_info(request)
        )
        return reply("clusters", body)

    def listing(
        endpoint: str, build: Callable[[LagSnapshot, BurrowRequest], BaseModel]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """A handler answering `build(snapshot, request info)` for our cluster, 404 for others."""

        async def handle(request: web.Request) -> web.Response:
            _, snapshot = snapshot_for(request)
            if snapshot is None:
                return error(request, endpoint, "cluster not found")
            return reply(endpoint, build(snapshot, request_info(request)))

        return handle

    def consumer_list(snapshot: LagSnapshot, info: BurrowRequest) -> BaseModel:
        consumers = [g.group for g in snapshot.groups]
        return _ConsumerList(error=False, message="consumer list returned", consumers=consumers, request=info)

    def topic_list(snapshot: LagSnapshot, info: BurrowRequest) -> BaseModel:
        topics = sorted(_topic_ends(snapshot))
        return _TopicList(error=False, message="topic list returned", topics=topics, request=info)

    def status_handler(endpoint: str, *, show_all: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            monitor, snapshot = snapshot_for(request)
            if monitor is None or snapshot is None:
                return error(request, endpoint, "cluster not found")
            name = request.match_info["group"]
            document = group_status_document(cluster, snapshot.group(name), name, monitor, show_all=show_all)
            body = _ConsumerStatus(
                error=False,
                message="consumer group status returned",
                status=document,
                request=request_info(request),
            )
            return reply(endpoint, body, 404 if document.status == NOT_FOUND else 200)

        return handle

    async def topic(request: web.Request) -> web.Response:
        _, snapshot = snapshot_for(request)
        ends = _topic_ends(snapshot).get(request.match_info["topic"]) if snapshot is not None else None
        if not ends:
            return error(request, "topic", "cluster or topic not found")
        offsets = [ends.get(partition, 0) for partition in range(max(ends) + 1)]
        body = _TopicDetail(
            error=False, message="topic offsets returned", offsets=offsets, request=request_info(request)
        )
        return reply("topic", body)

    return [
        web.get("/v3/kafka", clusters),
        web.get("/v3/kafka/{cluster}/consumer", listing("consumers", consumer_list)),
        web.get("/v3/kafka/{cluster}/consumer/{group}/lag", status_handler("lag", show_all=True)),
        web.get("/v3/kafka/{cluster}/consumer/{group}/status", status_handler("status", show_all=False)),
        web.get("/v3/kafka/{cluster}/topic", listing("topics", topic_list)),
        web.get("/v3/kafka/{cluster}/topic/{topic}", topic),
    ]
