"""The configuration controller: custom resources in, the effective configuration on the log out.

One replica at a time runs it, elected by a Lease on the cluster the objects live in (the same
`LeaseElector` as the watch stage). The leader first starts the fencing producer of the config
topic, so a paused former leader can no longer publish, then watches the four kinds with the
watch stage's own `WatchStream` (docs/custom-resources.md says why not kopf), compiles the objects
(`publishable`, in a worker thread) whenever they change and, when the result differs from the
newest published state, publishes the next version. It never applies anything itself: every replica, this one
included, applies what it reads back from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import Any

from pipeline.attribution import FactIndex
from pipeline.authormode import AttributionMode
from pipeline.codec.branch_work import work_record
from pipeline.codec.stream_id import StreamId
from pipeline.config import ClusterSettings, Settings
from pipeline.customresources.agekeyreader import REFRESH_S, AgeKeyReader
from pipeline.customresources.agekeys import KeyResolution, KeySource, key_source
from pipeline.customresources.clusterprovider import NamespaceLabels
from pipeline.customresources.commitrequest import (
    AUTHOR_WAIT_S,
    HANDLED,
    Handled,
    Request,
    RequestStatusWriter,
    Submitter,
    decide_author,
    read_request,
    recorded_author,
    request_status,
    request_work,
)
from pipeline.customresources.compile import ClusterReads, CompiledConfig
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.namespacelabels import NamespaceLabelReader
from pipeline.customresources.objects import (
    CONFIG_KINDS,
    GROUP,
    VERSION,
    CustomResource,
    Kind,
    ObjectRef,
)
from pipeline.customresources.providervalidation import Validation, validate_providers
from pipeline.customresources.retire import deleted_targets
from pipeline.customresources.signingkeys import KeyOutcome, SigningSecret, ensure_signing_secret, requested
from pipeline.customresources.state import ConfigState, encode_state, publishable
from pipeline.customresources.status import Observed, RuleStreams, StatusWriter, resolve_rules
from pipeline.customresources.store import ObjectStore
from pipeline.facts.admission import AUDIT_ID_PREFIX
from pipeline.kube.client import ApiResource, KubeClient, KubeError, open_client
from pipeline.kube.kubeconfigsecret import with_kubeconfig_secrets
from pipeline.kube.lease import LeaseElector, LeaseTerms
from pipeline.log.api import Log, LogError
from pipeline.log.topics import TopicNames
from pipeline.models import COMMIT_REQUESTS
from pipeline.tasks import cancel_all
from pipeline.watch.cursors import CursorStore
from pipeline.watch.manager import ClientFactory
from pipeline.watch.resolve import StreamSpec
from pipeline.watch.stream import ClusterCapabilities, StreamOptions, WatchStream
from pipeline.watch.writer import FencedWriter

__all__ = ["LEASE_NAME", "ConfigController", "stream_spec"]

logger = logging.getLogger(__name__)

LEASE_NAME = "reverser-config"
#: Changes closer together than this are compiled once (a `kubectl apply -f dir/` is one change).
SETTLE_S = 0.2
#: A compile slower than this is logged (it runs in a thread, so the loop does not wait for it).
COMPILE_WARN_S = 5.0
#: How often the index is looked at again while a request's create fact is awaited, in seconds.
AUTHOR_POLL_S = 0.05
_METADATA_KEPT = ("name", "namespace", "generation", "uid", "annotations", "creationTimestamp")


def stream_spec(kind: Kind, cluster: str) -> StreamSpec:
    """The watch stream of one kind: every namespace (or the cluster), no selector."""
    return StreamSpec(
        stream=StreamId(f"config:{kind.plural}", cluster, GROUP, VERSION, kind.plural, ""),
        route=cluster,
        kind=kind.value,
        namespaced=kind.namespaced,
        label_selector="",
    )


def _payload(obj: dict[str, Any]) -> bytes:
    """The object as the store needs it: identity, generation and spec; status only for a
    CommitRequest, whose status says whether it was already sent (commitrequest.py)."""
    meta = obj.get("metadata") or {}
    kept = {key: meta[key] for key in _METADATA_KEPT if key in meta}
    payload = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": kept,
        "spec": obj.get("spec"),
    }
    if obj.get("kind") == Kind.COMMIT_REQUEST and isinstance(obj.get("status"), dict):
        payload["status"] = obj["status"]
    return json.dumps(payload).encode()


class ConfigController:
    """Runs for the life of the process; does the work only while it holds the Lease."""

    name = "config-controller"

    def __init__(
        self,
        settings: Settings,
        log_: Log,
        *,
        identity: str,
        client_factory: ClientFactory = open_client,
        options: StreamOptions | None = None,
        clock: Any = time.time,
    ) -> None:
        self._settings = settings
        self._log = log_
        self._identity = identity
        # remote clusters of ClusterProviders are opened from their kubeconfig Secrets
        self._client_factory = with_kubeconfig_secrets(
            client_factory, settings.resources_cluster if settings.clusters else None
        )
        self._options = options
        self._clock = clock
        self._topics = TopicNames.for_prefix(settings.log.topic_prefix)
        self._client: KubeClient | None = None
        self._elector: LeaseElector | None = None
        self._election: asyncio.Task[None] | None = None
        self._work: list[asyncio.Task[None]] = []
        self._streams: list[WatchStream] = []
        self._writer: FencedWriter | None = None
        self.store: ObjectStore | None = None
        self.published: ConfigState | None = None
        self.status: StatusWriter | None = None
        self.request_status: RequestStatusWriter | None = None
        # uids of CommitRequests whose record this process appended (until their status shows it)
        self._sent: set[str] = set()
        # uids of CommitRequests refused for a field (counted and logged once)
        self._refused: set[str] = set()
        # the fact index of this process (the router's), which names a request's submitter
        self._facts: FactIndex | None = None
        self.author_wait_s = AUTHOR_WAIT_S
        # uid -> the AuthorAttributed condition decided when the request was first handled
        self._authors: dict[str, dict[str, Any]] = {}
        self._source_clients: dict[str, KubeClient] = {}
        self._source_settings: dict[str, ClusterSettings] = {}
        self._follower: ConfigFollower | None = None
        # (published version, streams per rule): resolved again only when the version changes
        self._rules: tuple[int, dict[ObjectRef, list[RuleStreams]]] | None = None
        self._age_keys: AgeKeyReader | None = None
        self._namespace_labels: NamespaceLabelReader | None = None
        self._key_sources: set[KeySource] = set()
        # each ClusterProvider's Validated, as its kubeconfig Secret was last read
        self._validations: dict[str, Validation] = {}
        self._provider_secrets = False
        # signing Secrets (generateWhenMissing) this leadership found or made with a key
        self._signing_ready: set[SigningSecret] = set()

    def use_fact_index(self, index: FactIndex) -> None:
        """Look up the submitters of CommitRequests in this process's fact index."""
        self._facts = index

    def _submitter(self, uid: str) -> Submitter | None:
        if self._facts is None:
            return None
        fact = self._facts.creator(self._settings.resources_cluster.route, COMMIT_REQUESTS, uid)
        if fact is None or not fact.identity.author:
            return None
        return Submitter(fact.identity.author, fact.audit_id.startswith(AUDIT_ID_PREFIX))

    async def decide_authors(self, wanted: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
        """Decide (and keep) the AuthorAttributed condition of newly seen requests (uid, generation):
        each submitter is looked up in the fact index, waiting at most `author_wait_s` for all."""
        cluster = self._settings.resources_cluster
        capture = (
            self._facts is not None
            and self._settings.cluster_attribution_mode(cluster) is AttributionMode.AUDIT
        )
        found: dict[str, Submitter] = {}
        deadline = time.monotonic() + self.author_wait_s
        while capture:
            for uid, _ in wanted:
                if uid not in found and (submitter := self._submitter(uid)) is not None:
                    found[uid] = submitter
            if len(found) == len(wanted) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(AUTHOR_POLL_S)
        decided = {uid: decide_author(capture, found.get(uid), generation) for uid, generation in wanted}
        self._authors.update(decided)
        return decided

    @property
    def leading(self) -> bool:
        return self._elector is not None and self._elector.leading

    async def start(self) -> None:
        cluster = self._settings.resources_cluster
        self._client = await self._client_factory(cluster)
        self._elector = LeaseElector(LeaseTerms.of_cluster(self._client, cluster, self._identity), LEASE_NAME)
        self._election = asyncio.create_task(
            self._elector.run(self._lead, self._step_down), name="config controller lease"
        )

    def ready(self) -> bool:
        return self._election is not None and not self._election.done()

    async def stop(self) -> None:
        if self._election is not None:
            self._election.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._election
            self._election = None
        await self._step_down()
        if self._elector is not None:
            await self._elector.release()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _lead(self) -> None:
        """Fence earlier leaders, learn the newest published version, start the streams."""
        assert self._client is not None
        writer = FencedWriter(
            self._log, f"{self._settings.log.topic_prefix}.config-controller", self._identity
        )
        try:
            await writer.start()
            follower = ConfigFollower(self._log, self._topics.config)
            try:
                self.published = await follower.catch_up()
            finally:
                await follower.close()
        except LogError as exc:
            logger.warning("config controller cannot take the config topic over (%s); stepping down", exc)
            with contextlib.suppress(LogError):
                await writer.close()
            if self._elector is not None:
                self._elector.step_down()
            return
        self._writer = writer
        store = self.store = ObjectStore()
        cluster = self._settings.resources_cluster
        cursors = CursorStore(self._log, self._topics.watch_cursors)  # never loaded: in memory
        options = self._options or StreamOptions.of(self._settings, cluster)
        capabilities = ClusterCapabilities()
        self._streams = [
            WatchStream(
                stream_spec(kind, cluster.name),
                self._client,
                store,
                kind.plural,
                cursors,
                options,
                capabilities,
                fresh=True,
                payload=_payload,
            )
            for kind in Kind
        ]
        for stream in self._streams:
            stream.start()
        self.status = StatusWriter(self._client)
        self._age_keys = AgeKeyReader(self._client)
        self._namespace_labels = NamespaceLabelReader(self._client)
        self.request_status = RequestStatusWriter(self._client)
        self._follower = follower
        self._work = [
            asyncio.create_task(self._publish_loop(store, follower), name="config controller publish"),
            asyncio.create_task(follower.follow(self._ignore), name="config controller results"),
        ]
        logger.info(
            "config controller leading (published version %s)", self.published and self.published.version
        )

    @staticmethod
    async def _ignore(_state: ConfigState) -> None:
        """Its own published versions: the controller follows the topic for the results."""

    async def _step_down(self) -> None:
        await cancel_all(self._work)
        self._work = []
        if self._follower is not None:
            await self._follower.close()
            self._follower = None
        self._rules = None
        self._age_keys = None
        self._namespace_labels = None
        self._signing_ready = set()
        self._validations = {}
        await asyncio.gather(*(stream.stop() for stream in self._streams))
        self._streams = []
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(LogError):
                await writer.close()
        self.store = None
        for client in self._source_clients.values():
            if client is not self._client:
                await client.close()
        self._source_clients = {}
        self._source_settings = {}

    async def _publish_loop(self, store: ObjectStore, follower: ConfigFollower) -> None:
        """Compile and publish on object changes; rewrite status on those and on commit results."""
        while True:
            waits: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(store.changed.wait()),
                asyncio.ensure_future(follower.results_changed.wait()),
            ]
            labels = self._namespace_labels
            refresh: asyncio.Future[None] | None = None
            if self._key_sources or self._provider_secrets or (labels is not None and labels.wanted):
                # key and kubeconfig Secrets and Namespaces are not watched: read them again now
                # and then (agekeyreader.py, providervalidation.py, namespacelabels.py)
                refresh = asyncio.ensure_future(asyncio.sleep(REFRESH_S))
                waits.append(refresh)
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            await asyncio.sleep(SETTLE_S)
            # woken only by commit results (every push sends them): the Namespaces are not listed again
            results_only = not store.changed.is_set() and not (refresh is not None and refresh.done())
            store.changed.clear()
            follower.results_changed.clear()
            if not store.complete:
                continue
            try:
                await self._publish(store, follower, reread=not results_only)
            except (LogError, KubeError) as exc:
                logger.warning("publishing the configuration failed (retrying): %s", exc)
                store.changed.set()
                await asyncio.sleep(1.0)
            except Exception:
                # A bug must not end the controller's work while it holds the Lease: log and retry.
                logger.exception("publishing the configuration failed unexpectedly (retrying)")
                store.changed.set()
                await asyncio.sleep(1.0)

    def _compile(
        self,
        objects: list[CustomResource],
        age_keys: dict[KeySource, KeyResolution],
        namespace_labels: NamespaceLabels,
    ) -> tuple[CompiledConfig, bool]:
        """The publishable configuration of `objects` and whether it differs from the published one.

        Runs in a worker thread: however many objects the tenants create, the loop (webhook,
        /healthz, commit worker, Lease renewal) keeps running meanwhile. Each object's share of the
        work is capped in steps by the compiler itself, which bounds the whole.
        """
        compiled = publishable(
            objects,
            home_namespace=self._settings.custom_resources.namespace,
            base=self._settings,
            reads=ClusterReads(age_keys=age_keys, environ=os.environ, namespace_labels=namespace_labels),
        )
        published = self.published
        return compiled, published is None or not published.same_content(compiled)

    async def _publish(self, store: ObjectStore, follower: ConfigFollower, *, reread: bool = True) -> None:
        """Compile and publish; `reread` False reuses the Namespace labels last listed."""
        objects = store.objects()
        age_keys = await self._read_age_keys(objects)
        configuration = [o for o in objects if o.ref.kind in CONFIG_KINDS]
        labels = (
            None
            if self._namespace_labels is None
            else await self._namespace_labels.read(configuration, relist=reread)
        )
        started = time.monotonic()
        compiled, changed = await asyncio.to_thread(self._compile, configuration, age_keys, labels)
        took_s = time.monotonic() - started
        if took_s > COMPILE_WARN_S:
            logger.warning("compiling %d objects took %.1f s", len(compiled.reports), took_s)
        for ref, error in compiled.errors:
            logger.warning("%s: %s", ref.describe(), error.describe())
        if changed:
            version = 1 if self.published is None else self.published.version + 1
            now_ms = int(self._clock() * 1000)
            state = ConfigState(version, now_ms, compiled)
            deleted = (
                []
                if self.published is None
                else deleted_targets(
                    self.published.compiled,
                    compiled,
                    version,
                    self._settings,
                    home_namespace=self._settings.custom_resources.namespace,
                    observed_at_ms=now_ms,
                )
            )
            assert self._writer is not None
            # one transaction: a version without a target is never on the log without its
            # TargetDeleted work, whichever leader publishes it and whenever it crashes
            await self._writer.append_topics(
                {
                    self._topics.config: [encode_state(state)],
                    self._topics.branch_work: [work_record(item) for item in deleted],
                }
            )
            self.published = state
            logger.info(
                "published configuration version %d%s",
                version,
                "".join(f"; target {item.stream.target} deleted" for item in deleted),
            )
        await self._ensure_signing_keys(store, compiled)
        if reread or not self._validations:
            await self._validate_providers(configuration)
        if self.status is not None and self.published is not None:
            if self._rules is None or self._rules[0] != self.published.version:
                resolved = await resolve_rules(
                    self.published.compiled,
                    self.published.settings(self._settings),
                    self._discover,
                    self._client_of,
                )
                self._rules = (self.published.version, resolved)
            observed = Observed(
                results=follower.results,
                running=follower.running_streams(),
                credentials=follower.credentials,
                modes={t.name: self._settings.attribution_mode(t) for t in self.published.compiled.targets},
                states=follower.stream_states(),
                validations=self._validations,
            )
            patched = await self.status.write(
                self.published.compiled,
                self._rules[1],
                self._settings.custom_resources.namespace,
                observed,
            )
            if patched:
                logger.info("status of %d object(s) updated", patched)
        await self._serve_requests(store, follower)

    async def _serve_requests(self, store: ObjectStore, follower: ConfigFollower) -> None:
        """Send each new CommitRequest to its target's branch (once), and show what became of it."""
        if self.published is None or self.request_status is None or self._writer is None:
            return
        home = self._settings.custom_resources.namespace
        settings = self.published.compiled.settings(self._settings)
        requests = [o for o in store.objects() if o.ref.kind is Kind.COMMIT_REQUEST]
        statuses: list[tuple[ObjectRef, dict[str, Any]]] = []
        work = []
        sent: list[str] = []
        for resource in requests:
            if (found := recorded_author(resource.status)) is not None:
                self._authors.setdefault(resource.uid, found)
        await self.decide_authors(
            [
                (r.uid, r.generation)
                for r in requests
                if r.uid not in self._authors and isinstance(read_request(r), Request)
            ]
        )
        for resource in requests:
            author = self._authors.get(resource.uid)
            ref = resource.ref
            request = read_request(resource)
            result = follower.requests.get((ref.namespace, ref.name))
            if result is not None and result.uid != resource.uid:
                result = None  # a result of an earlier object of the same name
            if isinstance(request, list):
                if resource.uid not in self._refused:
                    self._refused.add(resource.uid)
                    HANDLED.labels(Handled.INVALID).inc()
                    for problem in request:
                        logger.warning("%s: %s", ref.describe(), problem.describe())
                statuses.append((ref, request_status(resource.generation, problems=request)))
            elif self.request_status.final(ref, resource.status):
                continue
            elif result is not None:
                statuses.append((ref, request_status(resource.generation, result=result, author=author)))
            elif request.sent(resource.status) or resource.uid in self._sent:
                continue
            elif (item := request_work(request, settings, home, int(self._clock() * 1000))) is None:
                why = (
                    f"no valid GitTarget {ref.namespace}/{request.git_target} in the effective configuration"
                )
                statuses.append((ref, request_status(resource.generation, waiting_for=why, author=author)))
            else:
                work.append(item)
                sent.append(resource.uid)
                statuses.append((ref, request_status(resource.generation, branch=item.branch, author=author)))
        if work:
            await self._writer.append_topics({self._topics.branch_work: [work_record(item) for item in work]})
            self._sent.update(sent)  # only once on the log: a failed append is tried again
            HANDLED.labels(Handled.SENT).inc(len(sent))
            logger.info("sent %d CommitRequest(s) to their branches", len(work))
        for ref, wanted in statuses:
            await self.request_status.write(ref, wanted)
        self.request_status.forget(r.ref for r in requests)
        present = {r.uid for r in requests}
        for gone in set(self._authors) - present:
            del self._authors[gone]

    async def _read_age_keys(self, objects: list[CustomResource]) -> dict[KeySource, KeyResolution]:
        """The recipients of every age key Secret a GitTarget names (generated where it may be)."""
        sources: set[KeySource] = set()
        for resource in objects:
            encryption = resource.spec.get("encryption")
            if resource.ref.kind is Kind.GIT_TARGET and isinstance(encryption, dict):
                source, _problems = key_source(resource.ref.namespace, encryption)  # compile reports them
                if source is not None:
                    sources.add(source)
        self._key_sources = sources
        if not sources or self._age_keys is None:
            return {}
        return await self._age_keys.resolve(sources)

    async def _validate_providers(self, objects: list[CustomResource]) -> None:
        """Each ClusterProvider's `Validated`: its kubeconfig Secret read and checked (never dialled)."""
        providers = [o for o in objects if o.ref.kind is Kind.CLUSTER_PROVIDER]
        self._provider_secrets = any(o.spec.get("kubeConfig") is not None for o in providers)
        if self._client is None:
            return
        home = self._settings.custom_resources.namespace
        self._validations = await validate_providers(self._client, providers, home)

    async def _ensure_signing_keys(self, store: ObjectStore, compiled: CompiledConfig) -> None:
        """Accepted GitProviders' `generateWhenMissing` signing Secrets hold a key (signingkeys.py)."""
        if self._client is None:
            return
        accepted = [
            o for o in store.objects() if (r := compiled.reports.get(o.ref)) is not None and r.accepted
        ]
        for secret in requested(accepted):
            if secret not in self._signing_ready:
                outcome = await ensure_signing_secret(self._client, secret)
                if outcome in (KeyOutcome.EXISTS, KeyOutcome.CREATED, KeyOutcome.ADDED):
                    self._signing_ready.add(secret)

    def _client_of(self, cluster: str) -> KubeClient:
        return self._source_clients[cluster]

    async def _discover(self, cluster: str) -> dict[tuple[str, str], ApiResource]:
        """Discovery on a source cluster (its client opened once per leadership)."""
        effective = self.published.settings(self._settings) if self.published else self._settings
        settings = next(c for c in effective.clusters if c.name == cluster)
        client = self._source_clients.get(cluster)
        if client is not None and self._source_settings.get(cluster) != settings:
            # a ClusterProvider changed how the cluster is reached: open it again
            del self._source_clients[cluster]
            if client is not self._client:
                await client.close()
            client = None
        if client is None:
            if settings.name == self._settings.resources_cluster.name and self._client is not None:
                client = self._client
            else:
                try:
                    client = await self._client_factory(settings)
                except Exception as exc:  # kubeconfig loaders raise many types for a bad file
                    raise KubeError(0, "ClientConfig", str(exc)) from exc
            self._source_clients[cluster] = client
            self._source_settings[cluster] = settings
        return await client.discover()
