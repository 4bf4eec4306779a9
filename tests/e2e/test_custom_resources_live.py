"""Custom resources as the live configuration of `reverser run` on a real kube-apiserver (`make e2e`).

gitops-reverser-style objects are applied; the service (its own process, embedded log) mirrors
through them; a WatchRule changed while the watches run restarts only the stream it changed (the
stream metrics say so); a deleted GitTarget stops its stream and, per its prune mode, its folder is
removed in one committer commit (Always) or left (Never); every object
carries Ready/Reconciling/Stalled conditions, observedGeneration and its streams per rule. A
GitProvider whose `secretRef` names a Secret pushes to a smart-HTTP remote that requires those
credentials: not before the Secret exists, again after it is rotated and fixed, with the status
saying why in between and no credential value anywhere on the log, in the workdir or the log file.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.config import ClusterSettings
from pipeline.customresources.objects import GROUP, VERSION, Kind
from pipeline.customresources.signingkeys import KeyOutcome, SigningSecret, ensure_signing_secret
from pipeline.kube.client import open_client
from tests.commit.httpgit import GitHttpServer, serving
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.support.gitsign import keygen
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "team-a"
# The GitProvider with a secretRef, its target and rule: in the controller's namespace, the only one
# whose objects may send credentials to the test's plain-http remote (allow_plain_http_credentials).
CREDS_NAMESPACE = "reverser"
CREDS_PROVIDER = "http"  # its provider name: objects of the controller's namespace keep theirs
SECRET = "git-http"
USER, PASSWORD, ROTATED, TYPO = "git-user", "first-Pa55word", "rotated-Pa55word", "typo-Pa55word"
WAIT_S = 90.0


@dataclass(frozen=True, slots=True)
class Live:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess
    http: GitHttpServer
    flaky: GitRemote


FLAKY = {"flaky": "yes"}  # the label of the ConfigMaps only the `flaky` target mirrors


def _flaky_objects(remote: GitRemote) -> list[dict[str, Any]]:
    """A GitProvider of its own remote (the test makes it unreachable and back), target and rule."""

    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, NAMESPACE, spec)

    return [
        obj(
            "GitProvider",
            "flaky",
            {
                "url": remote.url,
                "allowedBranches": ["main"],
                "push": {"commitWindow": "0s"},
                "pipeline": {"push_cooldown_s": 0.2, "push_max_backoff_s": 1},
            },
        ),
        obj("GitTarget", "flaky", {"providerRef": {"name": "flaky"}, "branch": "main", "path": "flaky"}),
        obj(
            "WatchRule",
            "flaky",
            {
                "targetRef": {"name": "flaky"},
                "rules": [
                    {"resources": ["configmaps"], "objectSelector": {"matchLabels": FLAKY}},
                    # watched at autoscaling/v1, not the preferred v2 (GR's apiVersions, honoured)
                    {
                        "apiGroups": ["autoscaling"],
                        "apiVersions": ["v1"],
                        "resources": ["horizontalpodautoscalers"],
                    },
                ],
            },
        ),
    ]


def _objects(remote: GitRemote) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, NAMESPACE, spec)

    return [
        obj(
            "GitProvider",
            "repo",
            {
                "url": remote.url,
                "allowedBranches": ["main"],
                "push": {"commitWindow": "1s"},
                "pipeline": {"push_cooldown_s": 0.2},
            },
        ),
        obj(
            "GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": "clusters/apps"}
        ),
        obj(
            "GitTarget",
            "other",
            {
                "providerRef": {"name": "repo"},
                "branch": "main",
                "path": "clusters/other",
                "prune": {"mode": "always"},
            },
        ),
        obj(
            "GitTarget",
            "kept",
            {
                "providerRef": {"name": "repo"},
                "branch": "main",
                "path": "clusters/kept",
                "prune": {"mode": "never"},
            },
        ),
        obj(
            "WatchRule",
            "apps",
            {
                "targetRef": {"name": "apps"},
                "rules": [
                    {"resources": ["configmaps"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"]},
                    {"resources": ["secrets"]},
                    {"resources": ["nosuchthings"]},
                ],
            },
        ),
        obj("WatchRule", "other", {"targetRef": {"name": "other"}, "rules": [{"resources": ["configmaps"]}]}),
        obj("WatchRule", "kept", {"targetRef": {"name": "kept"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


def _credential_objects(http: GitHttpServer) -> list[dict[str, Any]]:
    """A GitProvider whose credentials are in a Secret (not created yet), with a target and a rule."""

    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, CREDS_NAMESPACE, spec)

    return [
        obj(
            "GitProvider",
            "http",
            {
                "url": f"{http.base_url}/creds.git",
                "allowedBranches": ["main"],
                "secretRef": {"name": SECRET},
                "push": {"commitWindow": "0s"},
                # the test remote is plain http on loopback; short retries keep the test quick
                "pipeline": {
                    "allow_plain_http_credentials": True,
                    "push_cooldown_s": 0.2,
                    "push_max_backoff_s": 1,
                },
            },
        ),
        obj("GitTarget", "creds", {"providerRef": {"name": "http"}, "branch": "main", "path": "creds"}),
        obj("WatchRule", "creds", {"targetRef": {"name": "creds"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


@pytest.fixture(scope="module")
def live(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("crlive")
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)
    remote = GitRemote(workdir / "remote.git")
    flaky = GitRemote(workdir / "flaky.git")
    plane.start()
    try:
        with serving(workdir / "http", ["creds.git"], USER, PASSWORD) as http:
            asyncio.run(_prepare(plane, remote, http, flaky))
            config = service_config(
                workdir / "service", plane.kubeconfig, lease_duration_s=3, lease_renew_s=0.5
            )
            service = ServiceProcess(workdir, config)
            service.start()
            try:
                # configmaps + deployments of apps, configmaps of other, kept, creds, and
                # configmaps + horizontalpodautoscalers of flaky, after the controller's own stream
                # of each kind
                service.wait_for_metric(
                    "reverser_watch_snapshots_total", len(Kind) + 7, WAIT_S, outcome="completed"
                )
                yield Live(plane, remote, service, http, flaky)
            finally:
                code = service.stop()  # None: a test stopped it already (and checked its exit code)
                assert code in (0, None), f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()


async def _prepare(plane: ControlPlane, remote: GitRemote, http: GitHttpServer, flaky: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        for namespace in (NAMESPACE, CREDS_NAMESPACE):
            await client.CoreV1Api(api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
            )
        for document in [*_objects(remote), *_credential_objects(http), *_flaky_objects(flaky)]:
            await create(api, document)


async def _get(plane: ControlPlane, kind: Kind, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, kind.plural, name
        )
    assert isinstance(found, dict)
    return found


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions", [])}


async def _wait_settled(plane: ControlPlane, rule_name: str) -> None:
    """Until the WatchRule's status is of its current generation and its streams are running."""

    async def settled() -> bool:
        rule = await _get(plane, Kind.WATCH_RULE, rule_name)
        current = (rule.get("status") or {}).get("observedGeneration") == rule["metadata"]["generation"]
        return current and _conditions(rule).get("Reconciling", ("",))[0] == "False"

    await wait_for(settled, f"the status of WatchRule {rule_name}", timeout_s=WAIT_S)


async def _configmap(
    plane: ControlPlane, name: str, labels: dict[str, str] | None = None, namespace: str = NAMESPACE
) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data={"v": name}),
        )


def _has(remote: GitRemote, path: str) -> bool:
    return path in remote.files()


async def test_objects_mirror_and_report_status(live: Live) -> None:
    await _configmap(live.plane, "cm-one")
    live.remote.wait_for(
        lambda r: (
            _has(r, "clusters/apps/team-a/configmaps/cm-one.yaml")
            and _has(r, "clusters/other/team-a/configmaps/cm-one.yaml")
            and _has(r, "clusters/kept/team-a/configmaps/cm-one.yaml")
        ),
        WAIT_S,
        "cm-one under both targets",
    )

    await _wait_settled(live.plane, "apps")
    rule = await _get(live.plane, Kind.WATCH_RULE, "apps")
    assert _conditions(rule) == {
        "Ready": ("True", "PartiallyResolved"),
        "Reconciling": ("False", "StreamsRunning"),
        "Stalled": ("False", "Accepted"),
        "StreamsRunning": ("True", "Succeeded"),
    }
    rules = {entry["item"]: entry for entry in rule["status"]["rules"]}
    assert rules[0]["streams"] == ["v1/configmaps in team-a"]
    assert rules[1]["streams"] == ["apps/v1/deployments in team-a"]
    assert [p["reason"] for p in rules[2]["problems"]] == ["SecretExcluded"]
    assert [p["reason"] for p in rules[3]["problems"]] == ["Unknown"]

    async def pushed() -> bool:
        target = await _get(live.plane, Kind.GIT_TARGET, "apps")
        return ((target.get("status") or {}).get("lastPush") or {}).get("result") == "Succeeded"

    await wait_for(pushed, "the GitTarget's last push in its status", timeout_s=WAIT_S)
    target = await _get(live.plane, Kind.GIT_TARGET, "apps")
    assert target["status"]["lastCommit"]["commit"] in {c.sha for c in live.remote.commits()}
    assert target["status"]["lastCommit"]["branch"] == "main"
    assert _conditions(target)["Ready"] == ("True", "Succeeded")
    provider = await _get(live.plane, Kind.GIT_PROVIDER, "repo")
    assert provider["status"]["unsupportedFields"] == []
    assert _conditions(provider)["Ready"] == ("True", "Accepted")


async def _secret(plane: ControlPlane, password: str | None, *, create: bool = False) -> None:
    """Create the credentials Secret, or replace it (password None: the username alone)."""
    data = {"username": USER} if password is None else {"username": USER, "password": password}
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=SECRET), string_data=data)
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        if create:
            await core.create_namespaced_secret(CREDS_NAMESPACE, body)
        else:
            await core.replace_namespaced_secret(SECRET, CREDS_NAMESPACE, body)


async def _provider_ready(plane: ControlPlane, expected: tuple[str, str], words: str) -> dict[str, Any]:
    """Waits until the GitProvider's Ready condition is `expected` (status, reason) with `words`."""

    async def shown() -> bool:
        provider = await _get(plane, Kind.GIT_PROVIDER, "http", CREDS_NAMESPACE)
        ready = [c for c in (provider.get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
        return (
            bool(ready)
            and (ready[0]["status"], ready[0]["reason"]) == expected
            and words in ready[0]["message"]
        )

    await wait_for(shown, f"GitProvider {CREDS_NAMESPACE}/http Ready={expected}", timeout_s=WAIT_S)
    return await _get(plane, Kind.GIT_PROVIDER, "http", CREDS_NAMESPACE)


async def test_credentials_come_from_the_providers_secret_missing_created_rotated_fixed(live: Live) -> None:
    service, http = live.service, live.http
    remote = GitRemote(http.root / "creds.git")
    errors = "reverser_commit_credentials_errors_total"
    await _configmap(live.plane, "cm-first", namespace=CREDS_NAMESPACE)

    # no Secret: the work waits, nothing reaches the remote, the status names the Secret
    provider = await _provider_ready(
        live.plane, ("False", "CredentialsUnavailable"), f"Secret {CREDS_NAMESPACE}/{SECRET} does not exist"
    )
    assert provider["status"]["unsupportedFields"] == []
    service.wait_for_metric(errors, 1, WAIT_S, provider=CREDS_PROVIDER, reason="not_found")
    assert http.requests == [], "no request without credentials"

    # a username without its password: the missing key is named, never a value
    await _secret(live.plane, None, create=True)
    await _provider_ready(
        live.plane, ("False", "CredentialsUnavailable"), "has key username but no key password"
    )
    service.wait_for_metric(errors, 1, WAIT_S, provider=CREDS_PROVIDER, reason="missing_key")

    await _secret(live.plane, PASSWORD)
    pushed = f"creds/{CREDS_NAMESPACE}/configmaps/cm-first.yaml"
    remote.wait_for(lambda r: _has(r, pushed), WAIT_S, "cm-first pushed")
    await _provider_ready(live.plane, ("True", "Accepted"), "")
    assert http.pushes, "pushed through the authenticated remote"

    # the remote's password is rotated, and the Secret gets a wrong one: refused, counted, shown
    http.expected = "Basic " + base64.b64encode(f"{USER}:{ROTATED}".encode()).decode()
    await _secret(live.plane, TYPO)
    pushes = len(http.pushes)
    await _configmap(live.plane, "cm-second", namespace=CREDS_NAMESPACE)
    await _provider_ready(
        live.plane,
        ("False", "CredentialsRejected"),
        f"refused the credentials of Secret {CREDS_NAMESPACE}/{SECRET}",
    )
    service.wait_for_metric(errors, 2, WAIT_S, provider=CREDS_PROVIDER, reason="rejected")
    assert len(http.pushes) == pushes, "nothing lands with refused credentials"

    await _secret(live.plane, ROTATED)
    pushed = f"creds/{CREDS_NAMESPACE}/configmaps/cm-second.yaml"
    remote.wait_for(lambda r: _has(r, pushed), WAIT_S, "cm-second pushed")
    await _provider_ready(live.plane, ("True", "Accepted"), "")

    # the values never left the Secret: not on the log (the config topic included), not in the
    # workdir, not in the service's log; the config topic names the Secret
    workdir = Path(service.config_path).parent / "service"  # the service's own: log, clones, keys
    values = [v.encode() for v in (PASSWORD, ROTATED, TYPO)]
    written = [service.log_path, *(p for p in workdir.rglob("*") if p.is_file())]
    assert [p for p in written if any(v in p.read_bytes() for v in values)] == []
    config_topic = [p for p in (workdir / "log" / "topics" / "reverser.config").rglob("*") if p.is_file()]
    assert any(f'"name":"{SECRET}"'.encode() in p.read_bytes() for p in config_topic), "the reference is"

    # the GitProvider starts signing with the key of a Secret: the running branch reads it at its
    # next push (shown as status.signingPublicKey) and signs every commit from then on, which git
    # verifies with that key
    key = keygen(Path(service.config_path).parent / "signing-key")
    async with kube_client(live.plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespaced_secret(
            CREDS_NAMESPACE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="git-signing"), string_data={"signing.key": key.read_text()}
            ),
        )
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            CREDS_NAMESPACE,
            Kind.GIT_PROVIDER.plural,
            "http",
            [
                {
                    "op": "add",
                    "path": "/spec/commit",
                    "value": {"signing": {"secretRef": {"name": "git-signing"}}},
                }
            ],
        )
    public = " ".join(key.with_suffix(".pub").read_text().split()[:2])

    async def signing_shown() -> bool:
        provider = await _get(live.plane, Kind.GIT_PROVIDER, "http", CREDS_NAMESPACE)
        return (provider.get("status") or {}).get("signingPublicKey") == public

    await _configmap(live.plane, "cm-before-signing", namespace=CREDS_NAMESPACE)
    shown = f"status.signingPublicKey of GitProvider {CREDS_NAMESPACE}/http"
    await wait_for(signing_shown, shown, timeout_s=WAIT_S)
    await _configmap(live.plane, "cm-signed", namespace=CREDS_NAMESPACE)
    pushed = f"creds/{CREDS_NAMESPACE}/configmaps/cm-signed.yaml"
    remote.wait_for(lambda r: _has(r, pushed), WAIT_S, "cm-signed pushed")
    assert _tip_verifies(remote, public, key.with_name("allowed_signers"))
    private = key.read_text().splitlines()[1].encode()
    assert [p for p in workdir.rglob("*") if p.is_file() and private in p.read_bytes()] == []


def _tip_verifies(remote: GitRemote, public: str, allowed: Path) -> bool:
    """`git verify-commit` of main's tip with an allowed-signers file: its committer, this key."""
    email = remote._git("log", "-1", "--format=%ce", "main").strip()
    allowed.write_text(f"{email} {public}\n", encoding="ascii")
    config = ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}"]
    argv = ["git", *config, "--git-dir", str(remote.path), "verify-commit", "main"]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


async def test_a_changed_watch_rule_restarts_only_its_stream(live: Live) -> None:
    service = live.service
    await _wait_settled(live.plane, "apps")  # its streams run: the change below replaces one
    stops_before = service.metric_sum("reverser_watch_stream_stops_total")
    starts_before = service.metric_sum("reverser_watch_stream_starts_total", target="team-a/apps")
    snapshots_before = service.metric_sum("reverser_watch_snapshots_total", outcome="completed")
    async with kube_client(live.plane.kubeconfig) as api:
        changed = time.monotonic()
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            Kind.WATCH_RULE.plural,
            "apps",
            [{"op": "add", "path": "/spec/rules/0/objectSelector", "value": {"matchLabels": {"app": "web"}}}],
        )
    while service.metric_sum("reverser_watch_snapshots_total", outcome="completed") <= snapshots_before:
        assert time.monotonic() - changed < WAIT_S, service.log_tail()
        await asyncio.sleep(0.02)
    elapsed_s = time.monotonic() - changed
    print(f"WatchRule change -> the new stream's snapshot on the log: {elapsed_s:.2f} s")
    assert service.metric_sum("reverser_watch_stream_stops_total") == stops_before + 1
    assert (
        service.metric_sum("reverser_watch_stream_stops_total", target="team-a/apps", reason="replaced") == 1
    )
    assert service.metric_sum("reverser_watch_stream_starts_total", target="team-a/apps") == starts_before + 1
    assert service.metric_sum("reverser_watch_stream_starts_total", target="team-a/other") == 1
    # the new selector applies: only the labelled ConfigMap reaches the apps target
    await _configmap(live.plane, "cm-plain")
    await _configmap(live.plane, "cm-web", {"app": "web"})
    live.remote.wait_for(
        lambda r: (
            _has(r, "clusters/apps/team-a/configmaps/cm-web.yaml")
            and _has(r, "clusters/other/team-a/configmaps/cm-plain.yaml")
        ),
        WAIT_S,
        "cm-web under apps, cm-plain under other",
    )
    assert not _has(live.remote, "clusters/apps/team-a/configmaps/cm-plain.yaml")


async def test_deleted_git_targets_stop_their_streams_and_prune_per_their_mode(live: Live) -> None:
    service = live.service
    async with kube_client(live.plane.kubeconfig) as api:
        for name in ("other", "kept"):
            await client.CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, Kind.GIT_TARGET.plural, name
            )
    for name in ("other", "kept"):
        service.wait_for_metric(
            "reverser_watch_stream_stops_total", 1, WAIT_S, target=f"team-a/{name}", reason="removed"
        )
    # prune Always: the folder goes, in one commit by the committer that says why
    live.remote.wait_for(
        lambda r: not any(path.startswith("clusters/other/") for path in r.files()),
        WAIT_S,
        "clusters/other/ removed",
    )
    (removal,) = [
        c for c in live.remote.commits() if c.touched("clusters/other/") and "deleted target" in c.subject
    ]
    assert removal.subject == "removed clusters/other/ of deleted target team-a/other (prune Always)"
    assert removal.author_name == removal.committer_name == "Reverser Pipeline"
    assert "GitTarget team-a/other was deleted" in removal.message
    assert {status for status, _ in removal.changes} == {"D"}
    assert removal.touched("clusters/other/") == list(removal.changes)

    async def orphaned() -> bool:
        rule = await _get(live.plane, Kind.WATCH_RULE, "other")
        return _conditions(rule).get("Stalled") == ("True", "Invalid")

    await wait_for(orphaned, "the orphaned WatchRule to report its missing target", timeout_s=WAIT_S)
    rule = await _get(live.plane, Kind.WATCH_RULE, "other")
    assert "no valid GitTarget team-a/other" in rule["status"]["conditions"][0]["message"]
    await _configmap(live.plane, "cm-after", {"app": "web"})
    live.remote.wait_for(
        lambda r: _has(r, "clusters/apps/team-a/configmaps/cm-after.yaml"), WAIT_S, "cm-after under apps"
    )
    files = live.remote.files()
    # prune Never: the files stay, and nothing new is written there
    assert "clusters/kept/team-a/configmaps/cm-one.yaml" in files
    assert "clusters/kept/team-a/configmaps/cm-after.yaml" not in files
    assert not [c for c in live.remote.commits() if c.touched("clusters/kept/") and "deleted" in c.subject]
    assert "clusters/other/team-a/configmaps/cm-after.yaml" not in files


async def _target_ready(
    plane: ControlPlane, name: str, expected: tuple[str, str], push: str
) -> dict[str, Any]:
    """Until the GitTarget's Ready condition has this status and reason, and its last push this
    result; returns the object."""
    found: dict[str, Any] = {}

    async def reached() -> bool:
        found.clear()
        found.update(await _get(plane, Kind.GIT_TARGET, name))
        last = ((found.get("status") or {}).get("lastPush") or {}).get("result")
        return _conditions(found).get("Ready") == expected and last == push

    await wait_for(reached, f"GitTarget {name} Ready={expected}", timeout_s=WAIT_S)
    return found


async def _table(plane: ControlPlane, plural: str) -> tuple[list[str], list[list[Any]]]:
    """What `kubectl get` shows: the apiserver's Table of the kind (its printer columns)."""
    async with kube_client(plane.kubeconfig) as api:
        data = await api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{plural}",
            "GET",
            header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
    assert isinstance(data, dict)
    columns = [c["name"] for c in data["columnDefinitions"]]
    return columns, [row["cells"] for row in data["rows"]]


async def test_a_failing_push_keeps_the_target_not_ready_until_the_remote_is_back(live: Live) -> None:
    """GR's conditions on the real apiserver: the remote goes away, the push fails, Ready is False
    with GR's reason and GitProviderReady says why; the remote is back, the retried push lands,
    Ready is True and lastPushTime is set. `kubectl get gittargets` has GR's columns."""
    flaky = live.flaky
    await _configmap(live.plane, "cm-flaky-one", FLAKY)
    flaky.wait_for(lambda r: _has(r, "flaky/team-a/configmaps/cm-flaky-one.yaml"), WAIT_S, "cm-flaky-one")
    first = await _target_ready(live.plane, "flaky", ("True", "Succeeded"), "Succeeded")
    conditions = _conditions(first)
    assert conditions["StreamsRunning"] == ("True", "Succeeded")
    assert conditions["GitPathAccepted"] == ("True", "GitPathAccepted")
    assert conditions["Validated"] == ("True", "Succeeded")
    pushed_at = first["status"]["lastPushTime"]

    away = flaky.path.with_name("flaky-away.git")
    flaky.path.rename(away)  # unreachable: the next push has no repository to go to
    await _configmap(live.plane, "cm-flaky-two", FLAKY)
    failing = await _target_ready(live.plane, "flaky", ("False", "GitProviderNotReady"), "Failed")
    assert _conditions(failing)["GitProviderReady"] == ("False", "PushFailed")
    assert failing["status"]["lastPushTime"] == pushed_at, "the last successful push's time stays"
    columns, rows = await _table(live.plane, Kind.GIT_TARGET.plural)
    assert columns[:11] == [
        "Name",
        "Provider",
        "Branch",
        "Ready",
        "Reconciling",
        "Stalled",
        "GitPathAccepted",
        "StreamsRunning",
        "Streams",
        "Reason",
        "Status",
    ]
    row = next(r for r in rows if r[0] == "flaky")
    assert row[1:4] == ["flaky", "main", "False"]

    away.rename(flaky.path)
    flaky.wait_for(lambda r: _has(r, "flaky/team-a/configmaps/cm-flaky-two.yaml"), WAIT_S, "cm-flaky-two")
    back = await _target_ready(live.plane, "flaky", ("True", "Succeeded"), "Succeeded")
    assert _conditions(back)["GitProviderReady"] == ("True", "Succeeded")
    assert back["status"]["lastPushTime"] >= pushed_at


async def test_a_rules_api_versions_is_the_version_watched_and_written(live: Live) -> None:
    """`apiVersions: [v1]` of HorizontalPodAutoscalers (preferred: v2) on the real apiserver: the
    stream watches autoscaling/v1 and the file is the v1 object (its v1-only field included)."""
    async with kube_client(live.plane.kubeconfig) as api:
        await client.AutoscalingV1Api(api).create_namespaced_horizontal_pod_autoscaler(
            NAMESPACE,
            client.V1HorizontalPodAutoscaler(
                metadata=client.V1ObjectMeta(name="web"),
                spec=client.V1HorizontalPodAutoscalerSpec(
                    max_replicas=3,
                    scale_target_ref=client.V1CrossVersionObjectReference(
                        api_version="apps/v1", kind="Deployment", name="web"
                    ),
                    target_cpu_utilization_percentage=50,
                ),
            ),
        )
    path = f"flaky/{NAMESPACE}/autoscaling/horizontalpodautoscalers/web.yaml"
    live.flaky.wait_for(lambda r: _has(r, path), WAIT_S, "the HorizontalPodAutoscaler")
    document = live.flaky.files()[path]
    assert document.startswith("apiVersion: autoscaling/v1\n"), document
    assert "targetCPUUtilizationPercentage: 50" in document
    rule = await _get(live.plane, Kind.WATCH_RULE, "flaky")
    streams = {entry["item"]: entry["streams"] for entry in rule["status"]["rules"]}
    assert streams[1] == [f"autoscaling/v1/horizontalpodautoscalers in {NAMESPACE}"]
    assert rule["status"]["unsupportedFields"] == []


async def _secret_data(plane: ControlPlane, name: str, namespace: str = NAMESPACE) -> dict[str, str]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    return {k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()}


async def test_generate_when_missing_makes_one_signing_key_however_many_replicas_try(live: Live) -> None:
    """Five replicas at once on the real apiserver: one creates the Secret, one completes a Secret
    without a key (its other keys kept), a Secret with a key is left alone; then a GitProvider that
    names a missing signing Secret with generateWhenMissing gets its key from the controller, and
    its commits verify with it."""
    kube = await open_client(ClusterSettings(name="e2e", kubeconfig=live.plane.kubeconfig))
    try:
        raced = SigningSecret(NAMESPACE, "raced-signing")
        outcomes = await asyncio.gather(*(ensure_signing_secret(kube, raced) for _ in range(5)))
        assert sorted(outcomes) == sorted([KeyOutcome.CREATED, *[KeyOutcome.EXISTS] * 4])
        made = await _secret_data(live.plane, raced.name)
        assert made["signing.key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert made["signing.pub"].startswith("ssh-ed25519 ")

        async with kube_client(live.plane.kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_secret(
                NAMESPACE,
                client.V1Secret(
                    metadata=client.V1ObjectMeta(name="partial-signing"), string_data={"note": "kept"}
                ),
            )
        partial = SigningSecret(NAMESPACE, "partial-signing")
        outcomes = await asyncio.gather(*(ensure_signing_secret(kube, partial) for _ in range(5)))
        assert outcomes.count(KeyOutcome.ADDED) == 1
        assert outcomes.count(KeyOutcome.EXISTS) == 4
        completed = await _secret_data(live.plane, partial.name)
        assert completed["note"] == "kept"
        assert "signing.key" in completed
        assert await ensure_signing_secret(kube, raced) == KeyOutcome.EXISTS
        assert await _secret_data(live.plane, raced.name) == made, "a key is never replaced"
    finally:
        await kube.close()

    # the credentials GitProvider (signing since the credentials test) moves to a Secret that
    # does not exist yet and asks for its key to be made
    async with kube_client(live.plane.kubeconfig) as api:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            CREDS_NAMESPACE,
            Kind.GIT_PROVIDER.plural,
            "http",
            [
                {
                    "op": "replace",
                    "path": "/spec/commit/signing",
                    "value": {"secretRef": {"name": "http-generated"}, "generateWhenMissing": True},
                }
            ],
        )

    async def generated() -> bool:
        try:
            return "signing.key" in await _secret_data(live.plane, "http-generated", CREDS_NAMESPACE)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    await wait_for(generated, "the controller's generated signing key", timeout_s=WAIT_S)
    made = await _secret_data(live.plane, "http-generated", CREDS_NAMESPACE)
    public = " ".join(made["signing.pub"].split()[:2])

    async def shown() -> bool:
        provider = await _get(live.plane, Kind.GIT_PROVIDER, "http", CREDS_NAMESPACE)
        return (provider.get("status") or {}).get("signingPublicKey") == public

    await _configmap(live.plane, "cm-generated-key", namespace=CREDS_NAMESPACE)
    await wait_for(shown, "status.signingPublicKey of GitProvider http", timeout_s=WAIT_S)
    await _configmap(live.plane, "cm-generated-key-two", namespace=CREDS_NAMESPACE)
    remote = GitRemote(live.http.root / "creds.git")
    path = f"creds/{CREDS_NAMESPACE}/configmaps/cm-generated-key-two.yaml"
    remote.wait_for(lambda r: _has(r, path), WAIT_S, "cm-generated-key-two")
    allowed = Path(live.service.config_path).parent / "generated-allowed-signers"
    assert _tip_verifies(remote, public, allowed)
    assert live.service.metric_sum("reverser_config_signing_keys_total", outcome="created") >= 1
    assert made["signing.key"].splitlines()[1] not in live.service.log_path.read_text(), "never logged"


def test_watch_rules_shows_the_same_from_the_log(live: Live) -> None:
    # the embedded log admits one process at a time: stop the service (cleanly) first
    assert live.service.stop() == 0, live.service.log_tail()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "watch-rules", "--config", str(live.service.config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr  # the Secret and the unknown resource are problems
    out = result.stdout
    assert "configuration version" in out
    assert "WatchRule team-a/apps" in out
    assert "v1/configmaps in team-a" in out
    assert "SecretExcluded" in out
    assert "Unknown" in out
    assert "WatchRule team-a/other: error: spec.targetRef.name: no valid GitTarget team-a/other" in out
