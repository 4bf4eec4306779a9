"""gitops-reverser's quickstart on the real apiserver (`make e2e`): its files, unchanged, mirror.

GR's own samples (tests/corpus/gitops-reverser/, provenance in its README) are applied through this
chart's CRDs as a GR user applies them; only the GitProvider's URL is replaced, as the sample's
comment asks. `reverser run` runs as the chart's ServiceAccount with the RBAC `helm template`
renders for the quickstart (`rbac.watchTypes.mode: any`, `get` of `git-creds`, the age key Secret's
`create`/`get`/`update`) and the digest key of the chart's generated Secret. The controller creates
the age key Secret GR's GitTarget asks for, ConfigMaps and a Secret reach Git, the Secret only
encrypted and decryptable by the real `sops` with the generated key, and the folder gets its
`.sops.yaml`. A second GitTarget whose key Secret does not exist stalls alone, its status naming
the Secret. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from pipeline.config import ClusterSettings
from pipeline.customresources.agekeyreader import AgeKeyReader
from pipeline.customresources.agekeys import AGE_KEY_SUFFIX, BACKUP_WARNING_ANNOTATION, KeySource
from pipeline.customresources.objects import GROUP, VERSION, Kind
from pipeline.kube.client import open_client
from tests.deploy.helm import CHART, helm_path
from tests.deploy.helm import render as render_chart
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.e2e.test_custom_resources_rbac import _token_kubeconfig
from tests.secrets.keys import AgeKey, sops_decrypt
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "gitops-reverser"
NAMESPACE = "default"  # where GR's samples put everything
RELEASE = "grqs"
SECRET_VALUE = "quickstart-pa55-e2e"


def _samples(*names: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for name in names:
        found += [d for d in yaml.safe_load_all((CORPUS / name).read_text()) if d]
    return found


async def _apply_chart(plane: ControlPlane) -> tuple[str, str, str]:
    """The chart's ServiceAccount, RBAC and digest key Secret for the quickstart; (account, key,
    the attribution mode the chart's configuration gives the cluster)."""
    helm = helm_path()
    assert helm is not None, "helm is not built: tests/deploy/build-helm.sh (make e2e runs it first)"
    objects = render_chart(
        helm,
        RELEASE,
        "--set",
        "quickstart.enabled=true",
        "--set",
        f"quickstart.namespace={NAMESPACE}",
        "--set",
        "quickstart.gitProvider.url=https://git.example.com/unused.git",
        "--set",
        "rbac.watchTypes.mode=any",
        "--set-json",
        'config.clusters=[{"name":"default","in_cluster":true,"leader_election":true}]',
    )
    account, digest, mode = "", "", ""
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=RELEASE)))
        for obj in objects:
            kind, namespace = obj["kind"], obj["metadata"].get("namespace", RELEASE)
            if kind == "ConfigMap" and "config.yaml" in (obj.get("data") or {}):
                (cluster,) = yaml.safe_load(obj["data"]["config.yaml"])["clusters"]
                mode = cluster["attribution"]
            if kind == "ServiceAccount":
                account = obj["metadata"]["name"]
                await core.create_namespaced_service_account(namespace, obj)
            elif kind == "Secret" and obj["metadata"]["name"].endswith("-digest-key"):
                digest = base64.b64decode(obj["data"]["digest-key"]).decode()
                await core.create_namespaced_secret(namespace, obj)
            elif kind == "ClusterRole":
                await rbac.create_cluster_role(obj)
            elif kind == "ClusterRoleBinding":
                await rbac.create_cluster_role_binding(obj)
            elif kind == "Role":
                await rbac.create_namespaced_role(namespace, obj)
            elif kind == "RoleBinding":
                await rbac.create_namespaced_role_binding(namespace, obj)
    assert account
    assert len(digest) == 64
    return account, digest, mode


async def _custom(api: client.ApiClient, kind: Kind, name: str) -> dict[str, Any]:
    found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, kind.plural, name
    )
    assert isinstance(found, dict)
    return found


def _ready(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions", [])
    found: dict[str, Any] = next((c for c in conditions if c["type"] == "Ready"), {})
    return found


async def test_grs_quickstart_files_mirror_configmaps_and_encrypted_secrets(
    plane: ControlPlane, tmp_path: Path
) -> None:
    account, digest_key, mode = await _apply_chart(plane)
    assert mode == "configured-author", "gitops-reverser's default mode, as the chart renders it"
    kubeconfig = await _token_kubeconfig(plane, RELEASE, account, tmp_path / "chart-account.kubeconfig")
    remote = GitRemote(tmp_path / "remote.git")
    provider, target, rule = _samples(
        "samples/quickstart-gitprovider.yaml",
        "samples/quickstart-gittarget.yaml",
        "samples/quickstart-watchrule.yaml",
    )
    (cluster_rule,) = _samples("samples/clusterwatchrule.yaml")
    # the docs' WatchRule for the same target: ConfigMaps and Secrets
    (secrets_rule,) = _samples("configuration-md/11-watchrule.yaml")
    provider["spec"]["url"] = remote.url  # "Replace with your own repository URL"
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespaced_secret(
            NAMESPACE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="git-creds"), string_data={"bearerToken": "t0k"}
            ),
        )
        for document in (provider, target, rule, cluster_rule):
            await create(api, document)
        # `kubectl apply` of the docs' version of the same WatchRule: Secrets too
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            Kind.WATCH_RULE.plural,
            rule["metadata"]["name"],
            [{"op": "replace", "path": "/spec", "value": secrets_rule["spec"]}],
        )
        await create(
            api,
            custom_object(
                "GitTarget",
                "broken-keys",
                NAMESPACE,
                {
                    "providerRef": {"name": "example-provider"},
                    "branch": "main",
                    "path": "broken",
                    "encryption": {
                        "provider": "sops",
                        "age": {"enabled": True, "recipients": {"extractFromSecret": True}},
                        "secretRef": {"name": "no-such-key"},
                    },
                },
            ),
        )
    config = service_config(
        tmp_path / "service", kubeconfig, lease_namespace=RELEASE, leader_election=True, attribution=mode
    )
    config["custom_resources"] = {"enabled": True, "namespace": NAMESPACE}
    service = ServiceProcess(tmp_path, config)
    service.env["REVERSER_SECRETS_DIGEST_KEY"] = digest_key  # as the chart's pods get it
    service.start()
    try:
        # the controller generated GR's key Secret, once, with GR's annotations
        async def generated() -> dict[str, Any] | None:
            async with kube_client(plane.kubeconfig) as api:
                try:
                    secret = await client.CoreV1Api(api).read_namespaced_secret("sops-age-key", NAMESPACE)
                except client.ApiException:
                    return None
            return {"data": secret.data, "annotations": secret.metadata.annotations}

        await wait_for(generated, "the generated age key Secret", timeout_s=90)
        secret = await generated()
        assert secret is not None
        (entry,) = [k for k in secret["data"] if k.endswith(AGE_KEY_SUFFIX)]
        age = AgeKey.from_file(_write(tmp_path / "generated.key", base64.b64decode(secret["data"][entry])))
        assert secret["annotations"][BACKUP_WARNING_ANNOTATION] == "REMOVE_AFTER_BACKUP"

        async with kube_client(plane.kubeconfig) as api:
            core = client.CoreV1Api(api)
            await core.create_namespaced_config_map(
                NAMESPACE,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app-settings"), data={"a": "b"}),
            )
            await core.create_namespaced_secret(
                NAMESPACE,
                client.V1Secret(
                    metadata=client.V1ObjectMeta(name="db"), string_data={"password": SECRET_VALUE}
                ),
            )
        sealed_path = "live-cluster/default/secrets/db.sops.yaml"
        remote.wait_for(
            lambda r: {"live-cluster/default/configmaps/app-settings.yaml", sealed_path} <= set(r.files()),
            120,
            "the ConfigMap and the encrypted Secret in Git",
        )
        files = remote.files()
        assert yaml.safe_load(files["live-cluster/default/configmaps/app-settings.yaml"])["data"] == {
            "a": "b"
        }
        assert SECRET_VALUE not in files[sealed_path]
        assert base64.b64encode(SECRET_VALUE.encode()).decode() not in files[sealed_path]
        decrypted = sops_decrypt(files[sealed_path].encode(), age, tmp_path)
        assert base64.b64decode(decrypted["data"]["password"]).decode() == SECRET_VALUE
        rules = yaml.safe_load(files["live-cluster/.sops.yaml"])
        assert rules["creation_rules"][0]["key_groups"] == [{"age": [age.recipient]}]
        # the ClusterWatchRule sample mirrors this chart's CRDs into the same folder
        assert any(p.startswith("live-cluster/_cluster/") for p in files)
        # configured-author, as gitops-reverser: the committer authors every commit, none unresolved
        authors = {(c.author_name, c.author_email) for c in remote.commits()}
        assert authors == {("Reverser Pipeline", "noreply@reverser.invalid")}, authors

        # the GitTarget whose key Secret is missing stalls alone, naming the Secret
        async with kube_client(plane.kubeconfig) as api:
            broken = await _custom(api, Kind.GIT_TARGET, "broken-keys")
            healthy = await _custom(api, Kind.GIT_TARGET, "example-target")
        assert _ready(healthy)["status"] == "True"
        ready = _ready(broken)
        assert ready["status"] == "False"
        assert "spec.encryption.secretRef: Secret default/no-such-key does not exist" in ready["message"]
        assert not any(p.startswith("broken/") for p in files)
        await _the_other_samples_apply_unchanged(plane)
    finally:
        assert service.stop() == 0, service.log_tail()
    log = service.log_path.read_text(errors="replace")
    assert SECRET_VALUE not in log
    assert age.identity not in log
    async with kube_client(plane.kubeconfig) as api:
        after = await client.CoreV1Api(api).read_namespaced_secret("sops-age-key", NAMESPACE)
    assert [k for k in after.data if k.endswith(AGE_KEY_SUFFIX)] == [entry], "generated once"


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


async def _the_other_samples_apply_unchanged(plane: ControlPlane) -> None:
    """GR's `commitrequest.yaml` and `clusterprovider.yaml`, unchanged, on the running quickstart.

    The CommitRequest names `quickstart-gittarget`, which the quickstart does not create (its
    GitTarget is `example-target`): it waits, naming it. The ClusterProviders get GR's `Validated`
    (`default` in-cluster; `prod-eu-1`'s Secret does not exist: `rbac.watchTypes.mode: any`, GR's
    read-everything, lets the controller see that), and `default` admits only `team-a`,
    so the quickstart's GitTarget in `default` is refused from then on: GR's deny by default.
    """
    (request,) = _samples("samples/commitrequest.yaml")
    providers = _samples("samples/clusterprovider.yaml")
    async with kube_client(plane.kubeconfig) as api:
        created = await create(api, request)
        for provider in providers:
            await create(api, provider)
    name = created["metadata"]["name"]
    assert name.startswith("save-")

    seen: dict[str, Any] = {}

    async def settled() -> bool:
        async with kube_client(plane.kubeconfig) as api:
            saved = _conditions(await _custom(api, Kind.COMMIT_REQUEST, name))
            custom = client.CustomObjectsApi(api)
            validated = [
                _conditions(
                    await custom.get_cluster_custom_object(GROUP, VERSION, Kind.CLUSTER_PROVIDER.plural, p)
                ).get("Validated", {})
                for p in ("default", "prod-eu-1")
            ]
            target = _ready(await _custom(api, Kind.GIT_TARGET, "example-target"))
        seen.update(request=saved.get("Ready"), validated=validated, target=target)
        return (
            saved.get("Ready", {}).get("reason") == "GitTargetUnavailable"
            and [v.get("reason") for v in validated] == ["InCluster", "KubeConfigSecretNotFound"]
            and target.get("status") == "False"
        )

    try:
        await wait_for(settled, "the CommitRequest and ClusterProvider samples' status", timeout_s=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from None
    async with kube_client(plane.kubeconfig) as api:
        saved = _conditions(await _custom(api, Kind.COMMIT_REQUEST, name))
        target = _ready(await _custom(api, Kind.GIT_TARGET, "example-target"))
        remote_provider = await client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, Kind.CLUSTER_PROVIDER.plural, "prod-eu-1"
        )
    assert "quickstart-gittarget" in saved["Ready"]["message"]
    validated = _conditions(remote_provider)["Validated"]
    assert (validated["status"], validated["message"]) == (
        "False",
        "Secret default/prod-eu-1-kubeconfig does not exist",
    )
    assert "ClusterProvider default" in target["message"]
    assert "spec.allowedNamespaces" in target["message"]


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


async def test_two_readers_racing_to_generate_make_one_key(plane: ControlPlane, tmp_path: Path) -> None:
    """Two controllers (a leader and one not fenced yet) generating the same Secret at once: the
    create-only request lets one win, and both publish the winner's recipient."""
    settings = ClusterSettings(name="default", kubeconfig=plane.kubeconfig)
    first, second = await open_client(settings), await open_client(settings)
    source = KeySource(NAMESPACE, "raced-age-key", generate=True)
    try:
        one, two = await asyncio.gather(
            AgeKeyReader(first).resolve([source]), AgeKeyReader(second).resolve([source])
        )
    finally:
        await first.close()
        await second.close()
    assert one[source].error == ""
    assert one[source].recipients == two[source].recipients
    assert len(one[source].recipients) == 1
    async with kube_client(plane.kubeconfig) as api:
        secret = await client.CoreV1Api(api).read_namespaced_secret("raced-age-key", NAMESPACE)
    assert len([k for k in secret.data if k.endswith(AGE_KEY_SUFFIX)]) == 1

    # a key Secret that exists without an entry gets one, by an update that keeps its other data
    async with kube_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespaced_secret(
            NAMESPACE,
            client.V1Secret(metadata=client.V1ObjectMeta(name="empty-keys"), string_data={"note": "x"}),
        )
    reader_client = await open_client(settings)
    try:
        filled = KeySource(NAMESPACE, "empty-keys", generate=True)
        found = await AgeKeyReader(reader_client).resolve([filled])
        assert len(found[filled].recipients) == 1
        unread = KeySource(NAMESPACE, "absent-keys", generate=False)
        missing = await AgeKeyReader(reader_client).resolve([unread])
        assert missing[unread].recipients == ()
        assert missing[unread].error.startswith("Secret default/absent-keys does not exist")
    finally:
        await reader_client.close()
    async with kube_client(plane.kubeconfig) as api:
        kept = await client.CoreV1Api(api).read_namespaced_secret("empty-keys", NAMESPACE)
    assert base64.b64decode(kept.data["note"]) == b"x"


async def test_the_charts_digest_key_survives_upgrades_and_reinstalls(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """Real `helm upgrade --install` against the apiserver: `lookup` finds the generated Secret and
    keeps its key, and `helm.sh/resource-policy: keep` leaves it through an uninstall."""
    helm = helm_path()
    assert helm is not None, "helm is not built: tests/deploy/build-helm.sh (make e2e runs it first)"
    release, namespace = "keys", "digest-release"
    install = [
        "upgrade", "--install", release, str(CHART), "--namespace", namespace, "--create-namespace",
        "--kubeconfig", str(plane.kubeconfig), "--no-hooks", "--set", "topicsJob.enabled=false",
    ]  # fmt: skip

    async def key() -> bytes:
        async with kube_client(plane.kubeconfig) as api:
            secret = await client.CoreV1Api(api).read_namespaced_secret(
                f"{release}-reverser-pipeline-digest-key", namespace
            )
        return base64.b64decode(secret.data["digest-key"])

    # helm's own state in the test's directory, not the runner's home
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(tmp_path / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
    }

    def helm_run(*args: str) -> None:
        result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, result.stderr

    await asyncio.to_thread(helm_run, *install)
    first = await key()
    assert len(first) == 64
    await asyncio.to_thread(helm_run, *install, "--set", "podAnnotations.rolled=yes")
    assert await key() == first, "an upgrade keeps the key"
    await asyncio.to_thread(
        helm_run, "uninstall", release, "--namespace", namespace, "--kubeconfig", str(plane.kubeconfig)
    )
    assert await key() == first, "an uninstall keeps the Secret"
    await asyncio.to_thread(helm_run, *install)
    assert await key() == first, "a reinstall finds it again"
