"""A Kubernetes API server stand-in that speaks the watch protocol over real HTTP on loopback.

It serves discovery (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`), namespaces, LIST (with
`limit`/`continue` and `labelSelector` equality terms) and WATCH with `resourceVersion`,
`sendInitialEvents` + the `k8s.io/initial-events-end` bookmark, bookmarks, 410 Gone, GET of
one object, bearer tokens (`tokens`: any other answers 401, as a rotated credential does), a switch
that rejects `sendInitialEvents` (to force the LIST fallback), abrupt connection drops and
namespace deletion. It is a test double for kube-apiserver, which cannot run in this test
environment; the behaviour follows the API conventions the client relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.support.corpus import MUTATIONLAB


@dataclass(frozen=True)
class ResourceDef:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


DEFAULT_RESOURCES = (
    ResourceDef("", "v1", "configmaps", "ConfigMap", True),
    ResourceDef("", "v1", "secrets", "Secret", True),
    ResourceDef("", "v1", "pods", "Pod", True),
    ResourceDef("", "v1", "namespaces", "Namespace", False),
    ResourceDef("", "v1", "services", "Service", True),
    ResourceDef("", "v1", "serviceaccounts", "ServiceAccount", True),
    ResourceDef("apps", "v1", "deployments", "Deployment", True),
    ResourceDef("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceDef("wardle.example.com", "v1alpha1", "flunders", "Flunder", True),
    ResourceDef("one.example.com", "v1", "widgets", "Widget", True),
    ResourceDef("two.example.com", "v1", "widgets", "Widget", True),
    ResourceDef("example.com", "v1", "readonlies", "ReadOnly", True, ("get", "list")),
)


@dataclass(eq=False)
class _Watch:
    gr: tuple[str, str]
    namespace: str
    transport: Any
    queue: asyncio.Queue[tuple[int, str, dict[str, Any]] | None] = field(default_factory=asyncio.Queue)


def corpus_object(relative: str, namespace: str, **tokens: str) -> dict[str, Any]:
    """The `object` of a corpus watch event, with its tokens given concrete values."""
    text = (MUTATIONLAB / relative).read_text(encoding="utf-8")
    text = text.replace("<ns-1>", namespace).replace("<ts>", "2026-11-30T09:00:00.000000Z")
    for token, value in tokens.items():
        text = text.replace(f"<{token}>", value)
    for index in range(1, 10):
        text = text.replace(f"<uid-{index}>", str(uuid.uuid4()))
        text = text.replace(f"<rand-{index}>", uuid.uuid4().hex[:5])
        text = text.replace(f"<rv-{index}>", "0")
    obj: dict[str, Any] = _json_safe(yaml.safe_load(text)["object"])
    return obj


def _json_safe(value: Any) -> Any:
    """YAML reads timestamps as datetimes; the API serves them as RFC 3339 strings."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat().replace("+00:00", "Z")
    return value


class FakeKubeApiServer:
    """In-memory objects, a global resourceVersion counter and live watches."""

    def __init__(self, resources: tuple[ResourceDef, ...] = DEFAULT_RESOURCES) -> None:
        self.resources = {(r.group, r.resource): r for r in resources}
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {
            key: {} for key in self.resources
        }
        self.namespaces: dict[str, str] = {"default": "Active"}
        self.rv = 1000
        self.compacted_rv = 0
        self.reject_watchlist = False
        self.ignore_watchlist = False  # behave like a server that predates WatchList
        self.gone_as_http_status = False
        self.fail_initial_events: set[str] = set()
        # One-shot hooks run inside the next LIST made while a watch is open (a LIST fallback's
        # snapshot, not the version probe before a first snapshot): before and after it reads.
        self.around_list: tuple[Callable[[], object], Callable[[], object]] | None = None
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        #: the bearer tokens accepted; None: any request is accepted
        self.tokens: set[str] | None = None
        self._watches: set[_Watch] = set()
        # (rv, group/resource, type, object, the event as served): served lines are cached so a
        # long backlog costs the server little (the benchmark replays one).
        self._history: list[tuple[int, tuple[str, str], str, dict[str, Any], bytes]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self.drop_connections()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
                    "users": [{"name": "tester", "user": {"token": "test-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
                    "current-context": "fake",
                }
            ),
            encoding="utf-8",
        )
        return path

    def serve(self, definition: ResourceDef) -> None:
        """Start serving another resource type (like installing a CRD)."""
        key = (definition.group, definition.resource)
        self.resources[key] = definition
        self.objects.setdefault(key, {})

    # -- mutations ------------------------------------------------------------------------
    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update an object (like a client write); emits ADDED or MODIFIED."""
        obj = copy.deepcopy(obj)
        group = str(obj["apiVersion"]).rpartition("/")[0]
        gr = self._gr_for_kind(group, str(obj["kind"]))
        meta = obj.setdefault("metadata", {})
        key = (str(meta.get("namespace") or ""), str(meta["name"]))
        if key[0]:
            self.namespaces.setdefault(key[0], "Active")
        existing = self.objects[gr].get(key)
        meta["uid"] = existing["metadata"]["uid"] if existing else str(uuid.uuid4())
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self.objects[gr][key] = obj
        self._emit(rv, gr, "MODIFIED" if existing else "ADDED", obj)
        return obj

    def delete(self, kind_api_version: tuple[str, str], namespace: str, name: str) -> None:
        group, _, _ = kind_api_version[0].rpartition("/")
        gr = self._gr_for_kind(group, kind_api_version[1])
        obj = self.objects[gr].pop((namespace, name))
        rv = self._next_rv()
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(rv)
        self._emit(rv, gr, "DELETED", obj)

    def compact(self) -> None:
        """Forget history: any resourceVersion older than now is answered with 410 Gone."""
        self.compacted_rv = self.rv
        self._history.clear()

    def delete_namespace(self, namespace: str, *, finalize: bool) -> None:
        """Start deleting a namespace (objects go, phase Terminating, watches fail mid-replay).

        With `finalize` the namespace is gone afterwards: it answers 404.
        """
        self.namespaces[namespace] = "Terminating"
        self.fail_initial_events.add(namespace)
        for gr, objects in self.objects.items():
            for key in [k for k in objects if k[0] == namespace]:
                obj = objects.pop(key)
                rv = self._next_rv()
                obj["metadata"]["resourceVersion"] = str(rv)
                self._emit(rv, gr, "DELETED", obj)
        self.drop_connections(namespace=namespace)
        if finalize:
            self.finalize_namespace(namespace)

    def finalize_namespace(self, namespace: str) -> None:
        self.namespaces.pop(namespace, None)

    def bookmark(self) -> None:
        """Send a bookmark at the current resourceVersion to every watch that allows them."""
        for watch in self._watches:
            watch.queue.put_nowait((self.rv, "BOOKMARK", {}))

    def inject_raw(self, line: bytes) -> None:
        """Send one raw line (for example broken JSON) on every open watch."""
        for watch in self._watches:
            watch.queue.put_nowait((self.rv, "RAW", {"line": line}))

    def drop_connections(self, namespace: str | None = None) -> None:
        """Cut watch connections, after the events already queued, without a clean end of the response."""
        for watch in list(self._watches):
            if namespace is None or watch.namespace == namespace:
                watch.queue.put_nowait(None)

    @property
    def watch_count(self) -> int:
        return len(self._watches)

    def _gr_for_kind(self, group: str, kind: str) -> tuple[str, str]:
        for gr, definition in self.resources.items():
            if definition.group == group and definition.kind == kind:
                return gr
        raise KeyError((group, kind))

    def _emit(self, rv: int, gr: tuple[str, str], event_type: str, obj: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(obj)
        line = json.dumps({"type": event_type, "object": snapshot}).encode() + b"\n"
        self._history.append((rv, gr, event_type, snapshot, line))
        namespace = str(obj["metadata"].get("namespace") or "")
        for watch in self._watches:
            if watch.gr == gr and (not watch.namespace or watch.namespace == namespace):
                watch.queue.put_nowait((rv, event_type, snapshot))

    # -- HTTP -----------------------------------------------------------------------------
    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response(_failure(code, reason, message), status=code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        query = dict(request.query)
        self.requests.append((request.path, query))
        if self.tokens is not None:
            offered = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if offered not in self.tokens:
                return self._status(401, "Unauthorized", "Unauthorized")
        lease_prefix = ["apis", "coordination.k8s.io", "v1", "namespaces"]
        if parts[:4] == lease_prefix and len(parts) in (6, 7) and parts[5] == "leases":
            return await self._lease(request, parts[4], parts[6] if len(parts) == 7 else None)
        if request.method != "GET":
            return self._status(405, "MethodNotAllowed", f"{request.method} is not supported here")
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return self._status(404, "NotFound", f"{request.path} not found")
        if not rest:
            return self._resource_list(group, version)
        if group == "" and rest[0] == "namespaces" and len(rest) == 2:
            phase = self.namespaces.get(rest[1])
            if phase is None:
                return self._status(404, "NotFound", f'namespaces "{rest[1]}" not found')
            return web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": rest[1]},
                    "status": {"phase": phase},
                }
            )
        namespace = ""
        if rest[0] == "namespaces" and len(rest) in (3, 4):
            namespace, rest = rest[1], rest[2:]
        if len(rest) == 2 and (group, rest[0]) in self.resources:
            found = self.objects[(group, rest[0])].get((namespace, rest[1]))
            if found is None:
                return self._status(404, "NotFound", f'{rest[0]} "{rest[1]}" not found')
            return web.json_response(found)
        if len(rest) != 1 or (group, rest[0]) not in self.resources:
            return self._status(404, "NotFound", f"{request.path} not found")
        gr = (group, rest[0])
        if self.resources[gr].version != version:
            return self._status(404, "NotFound", f"{request.path} not found")
        if namespace and namespace not in self.namespaces:
            return self._status(404, "NotFound", f'namespaces "{namespace}" not found')
        if query.get("watch") == "true":
            return await self._watch(request, gr, namespace, query)
        return self._list(gr, namespace, query)

    async def _lease(self, request: web.Request, namespace: str, name: str | None) -> web.Response:
        """Leases with optimistic concurrency: a stale resourceVersion is a 409 Conflict. A list
        takes an equality `labelSelector` (`key=value`), as the watch roster asks."""
        if request.method == "GET" and name is None:
            selector = request.query.get("labelSelector", "")
            label, _, value = selector.partition("=")
            items = [
                lease
                for (ns, _), lease in sorted(self.leases.items())
                if ns == namespace
                and (not label or (lease["metadata"].get("labels") or {}).get(label) == value)
            ]
            return web.json_response(
                {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1", "items": items}
            )
        if request.method == "GET" and name is not None:
            found = self.leases.get((namespace, name))
            if found is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return web.json_response(found)
        if request.method == "DELETE" and name is not None:
            found = self.leases.get((namespace, name))
            if found is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            options = await request.json() if request.can_read_body else {}
            wanted = (options.get("preconditions") or {}).get("resourceVersion")
            if wanted is not None and wanted != found["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict", "the object has been modified")
            del self.leases[(namespace, name)]
            return web.json_response({"kind": "Status", "status": "Success"})
        body = await request.json()
        key = (namespace, name or str(body["metadata"]["name"]))
        existing = self.leases.get(key)
        if request.method == "POST" and name is None:
            if existing is not None:
                return self._status(409, "AlreadyExists", f'leases "{key[1]}" already exists')
        elif request.method == "PUT" and name is not None:
            if existing is None:
                return self._status(404, "NotFound", f'leases "{name}" not found')
            if body["metadata"].get("resourceVersion") != existing["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict", "the object has been modified")
        else:
            return self._status(405, "MethodNotAllowed", f"{request.method} on leases")
        body["metadata"]["resourceVersion"] = str(self._next_rv())
        self.leases[key] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)

    def hold_lease(self, namespace: str, name: str, holder: str, duration_s: int) -> None:
        """A Lease `holder` has just renewed (a process that holds it, or held it when it was killed)."""
        self.leases[(namespace, name)] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self._next_rv())},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_s, "leaseTransitions": 0},
        }

    def lease_holders(self, namespace: str, names: list[str]) -> list[str]:
        """The holder of each named Lease ("" for none, or no such Lease)."""
        found = []
        for name in names:
            lease = self.leases.get((namespace, name)) or {}
            found.append(str((lease.get("spec") or {}).get("holderIdentity") or ""))
        return found

    def set_lease_holder(self, namespace: str, name: str, holder: str) -> None:
        """Another process takes the lease (as if it won after this one stopped renewing)."""
        lease = self.leases[(namespace, name)]
        lease["spec"]["holderIdentity"] = holder
        lease["metadata"]["resourceVersion"] = str(self._next_rv())

    def _group_list(self) -> dict[str, Any]:
        groups: dict[str, str] = {}
        for definition in self.resources.values():
            if definition.group:
                groups.setdefault(definition.group, definition.version)
        return {
            "kind": "APIGroupList",
            "groups": [
                {
                    "name": name,
                    "versions": [{"groupVersion": f"{name}/{v}", "version": v}],
                    "preferredVersion": {"groupVersion": f"{name}/{v}", "version": v},
                }
                for name, v in sorted(groups.items())
            ],
        }

    def _resource_list(self, group: str, version: str) -> web.Response:
        entries: list[dict[str, Any]] = [
            {
                "name": d.resource,
                "singularName": d.kind.lower(),
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": list(d.verbs),
            }
            for d in self.resources.values()
            if d.group == group and d.version == version
        ]
        if not entries:
            return self._status(404, "NotFound", f"{group}/{version} not served")
        entries.append(
            {"name": entries[0]["name"] + "/status", "namespaced": True, "kind": "X", "verbs": ["get"]}
        )
        return web.json_response(
            {
                "kind": "APIResourceList",
                "groupVersion": f"{group}/{version}".lstrip("/"),
                "resources": entries,
            }
        )

    @staticmethod
    def _selected(obj: dict[str, Any], selector: str) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        for term in filter(None, selector.split(",")):
            key, _, value = term.partition("=")
            if labels.get(key.strip()) != value.strip().lstrip("="):
                return False
        return True

    def _current(self, gr: tuple[str, str], namespace: str, selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(obj)
            for (ns, _), obj in sorted(self.objects[gr].items())
            if (not namespace or ns == namespace) and self._selected(obj, selector)
        ]

    def _list(self, gr: tuple[str, str], namespace: str, query: dict[str, str]) -> web.Response:
        hooks = self.around_list if self._watches else None
        if hooks:
            self.around_list = None
            hooks[0]()
        items = self._current(gr, namespace, query.get("labelSelector", ""))
        list_rv = self.rv
        if hooks:
            hooks[1]()
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        more = start + limit < len(items)
        definition = self.resources[gr]
        return web.json_response(
            {
                "kind": f"{definition.kind}List",
                "apiVersion": definition.api_version,
                "metadata": {"resourceVersion": str(list_rv), "continue": str(start + limit) if more else ""},
                "items": page,
            }
        )

    async def _watch(
        self, request: web.Request, gr: tuple[str, str], namespace: str, query: dict[str, str]
    ) -> web.StreamResponse:
        definition = self.resources[gr]
        if "watch" not in definition.verbs:
            return self._status(405, "MethodNotAllowed", "watch is not supported")
        selector = query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        initial: list[dict[str, Any]] = []
        send_end_bookmark = False
        since = self.rv
        if query.get("sendInitialEvents") == "true" and not self.ignore_watchlist:
            if self.reject_watchlist:
                return self._status(
                    422,
                    "Invalid",
                    'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
            if query.get("resourceVersionMatch") != "NotOlderThan":
                return self._status(422, "Invalid", "sendInitialEvents requires resourceVersionMatch")
            initial = self._current(gr, namespace, selector)
            send_end_bookmark = True
        elif query.get("resourceVersion") not in (None, "", "0") and "sendInitialEvents" not in query:
            since = int(query["resourceVersion"])
            if since < self.compacted_rv:
                message = f"too old resource version: {since} ({self.compacted_rv})"
                if self.gone_as_http_status:
                    return self._status(410, "Expired", message)
                return await self._single_error(request, 410, "Expired", message)
        else:
            initial = self._current(gr, namespace, selector)
        watch = _Watch(gr, namespace, request.transport)
        backlog = [
            line
            for rv, hgr, _, obj, line in self._history
            if hgr == gr
            and rv > since
            and (not namespace or obj["metadata"].get("namespace") == namespace)
            and self._selected(obj, selector)
        ]
        self._watches.add(watch)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request)
            for obj in initial:
                await self._send(response, "ADDED", obj)
            if namespace in self.fail_initial_events and send_end_bookmark:
                watch.transport.abort()
                return response
            if send_end_bookmark:
                await self._send(response, "BOOKMARK", self._bookmark(definition, since, initial_end=True))
            for start in range(0, len(backlog), 200):
                await response.write(b"".join(backlog[start : start + 200]))
            async for rv, event_type, obj in self._drain(watch):
                if event_type == "RAW":
                    await response.write(obj["line"])
                elif event_type == "BOOKMARK":
                    if bookmarks:
                        await self._send(response, "BOOKMARK", self._bookmark(definition, rv))
                elif rv > since and self._selected(obj, selector):
                    await self._send(response, event_type, obj)
            if watch.transport is not None:
                watch.transport.abort()
            return response
        except (ConnectionResetError, RuntimeError):
            return response
        finally:
            self._watches.discard(watch)

    @staticmethod
    async def _drain(watch: _Watch) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
        """Queued events until the watch is dropped (`None`) or the client went away."""
        while True:
            try:
                item = await asyncio.wait_for(watch.queue.get(), 0.05)
            except TimeoutError:
                if watch.transport is None or watch.transport.is_closing():
                    return
                continue
            if item is None:
                return
            yield item

    @staticmethod
    def _bookmark(definition: ResourceDef, rv: int, initial_end: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"apiVersion": definition.api_version, "kind": definition.kind, "metadata": meta}

    @staticmethod
    async def _send(response: web.StreamResponse, event_type: str, obj: dict[str, Any]) -> None:
        await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

    async def _single_error(
        self, request: web.Request, code: int, reason: str, message: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await self._send(response, "ERROR", _failure(code, reason, message))
        await response.write_eof()
        return response


def _failure(code: int, reason: str, message: str) -> dict[str, Any]:
    """A `Status` of kind Failure, as the apiserver answers a request or ends a watch with."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@contextlib.asynccontextmanager
async def running_server() -> AsyncIterator[FakeKubeApiServer]:
    server = FakeKubeApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
