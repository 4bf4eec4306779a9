"""The admission fact source: AdmissionReview → fact (pure), and the endpoint over real HTTP.

The reviews are shaped as kube-apiserver v1.37 sends them (`admission.k8s.io/v1`; the e2e test
tests/e2e/test_admission_facts.py has a real apiserver send them and checks the same facts).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from pipeline.content.key import content_key, is_content_key
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.facts.admission import AUDIT_ID_PREFIX, InvalidReview, parse_review, reduce_review
from pipeline.facts.reduce import EventReason
from pipeline.models import GroupResource
from tests.audit.conftest import Running, read_batches

RECEIVED_US = 1_764_000_000_000_000


def configmap(name: str = "web", data: dict[str, str] | None = None, rv: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "shop",
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-12-06T10:00:00Z",
        "managedFields": [{"manager": "kubectl", "operation": "Update", "time": "2026-12-06T10:00:00Z"}],
    }
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"k": "v"}}


def review(
    operation: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    *,
    user: str = "alice",
    resource: tuple[str, str] = ("", "configmaps"),
    sub: str = "",
    dry_run: bool = False,
    uid: str = "req-1",
) -> dict[str, Any]:
    source = obj if obj is not None else old
    assert source is not None
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": resource[0], "version": "v1", "kind": source["kind"]},
            "resource": {"group": resource[0], "version": "v1", "resource": resource[1]},
            "subResource": sub,
            "name": source["metadata"].get("name", ""),
            "namespace": "shop",
            "operation": operation,
            "userInfo": {"username": user, "uid": "u-1", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }


def reduce(document: dict[str, Any]) -> Any:
    return reduce_review(parse_review(document), RECEIVED_US)


def watch_key(stored: dict[str, Any]) -> str:
    """The content key the router computes for the watch event of `stored` (its sanitized bytes)."""
    return content_key(sanitized_json(sanitize(stored)))


# --- the reduction ---------------------------------------------------------------------------------


def test_a_create_names_its_version_by_the_key_of_what_the_watch_will_write() -> None:
    admitted = configmap()
    stored = copy.deepcopy(admitted)
    stored["metadata"]["resourceVersion"] = "812"  # given by storage, after admission
    result = reduce(review("CREATE", admitted, uid="r-9"))
    assert result.reason == EventReason.QUEUED
    assert result.group_resource == GroupResource("", "configmaps")
    fact = result.fact
    assert (fact.author, fact.verb, fact.namespace, fact.name, fact.uid) == (
        "alice",
        "create",
        "shop",
        "web",
        "uid-web",
    )
    assert fact.audit_id == AUDIT_ID_PREFIX + "r-9"
    assert fact.stage_timestamp_us == RECEIVED_US
    assert is_content_key(fact.resource_version)
    assert fact.resource_version == watch_key(stored)


def test_an_update_is_keyed_by_the_new_content_and_a_no_op_for_git_makes_no_fact() -> None:
    old = configmap(rv="5")
    new = configmap(data={"k": "changed"}, rv="5")
    fact = reduce(review("UPDATE", new, old)).fact
    assert fact.verb == "update"
    assert fact.resource_version == watch_key(configmap(data={"k": "changed"}, rv="6"))
    assert fact.resource_version != watch_key(old)
    status_only = copy.deepcopy(old)
    status_only["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    status_only["metadata"]["finalizers"] = ["example.com/hold"]
    assert reduce(review("UPDATE", status_only, old)).reason == EventReason.UNCHANGED_CONTENT


def test_a_delete_names_the_uid_for_the_sticky_tier() -> None:
    result = reduce(review("DELETE", None, configmap(rv="9"), user="bob"))
    fact = result.fact
    assert (fact.author, fact.verb, fact.uid, fact.resource_version) == ("bob", "delete", "uid-web", "")


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (review("CREATE", configmap(), dry_run=True), EventReason.DRY_RUN),
        (review("CONNECT", configmap()), EventReason.READ_ONLY_OR_UNKNOWN_VERB),
        (review("UPDATE", configmap(), configmap(), sub="status"), EventReason.NON_SCALE_SUBRESOURCE),
        (review("CREATE", configmap(), user=""), EventReason.NO_ATTRIBUTION_FACT),
        (
            review("CREATE", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
            EventReason.NO_ATTRIBUTION_FACT,
        ),
    ],
)
def test_what_makes_no_fact(document: dict[str, Any], reason: EventReason) -> None:
    result = reduce(document)
    assert (result.reason, result.fact) == (reason, None)


def test_a_review_without_a_resource_makes_no_fact() -> None:
    document = review("CREATE", configmap())
    document["request"]["resource"] = {}
    assert (reduce(document).reason, reduce(document).fact) == (EventReason.NO_ATTRIBUTION_FACT, None)


def test_the_namespace_and_name_come_from_the_request_or_the_object_whichever_has_them() -> None:
    """generateName: the request's `name` is empty and the object carries the generated one; a body
    without `metadata.namespace` is created in the request's namespace."""
    generated = configmap("web-x7k2q")
    document = review("CREATE", generated)
    document["request"]["name"] = ""
    assert reduce(document).fact.name == "web-x7k2q"
    bare = configmap()
    del bare["metadata"]["namespace"]
    assert reduce(review("CREATE", bare)).fact.namespace == "shop"
    from_body = review("CREATE", configmap())
    from_body["request"]["namespace"] = ""
    assert reduce(from_body).fact.namespace == "shop"


def test_a_cluster_scoped_delete_without_an_old_object_is_named_by_its_request() -> None:
    document = review(
        "DELETE",
        None,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
        resource=("", "namespaces"),
    )
    document["request"]["oldObject"] = None
    document["request"]["namespace"] = ""
    fact = reduce(document).fact
    assert (fact.verb, fact.namespace, fact.name, fact.uid) == ("delete", "", "shop", "")


def test_an_update_of_bodies_without_metadata_is_kept_by_name_not_taken_for_a_no_op() -> None:
    """Nothing can say two bodies without metadata are the same stored object: the fact is kept (by
    name, with no content key) rather than dropped as an unchanged write."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "not-a-mapping", "data": {"k": "v"}}
    document = review("UPDATE", configmap(), configmap())
    document["request"].update(object=body, oldObject=copy.deepcopy(body))
    result = reduce(document)
    assert result.reason == EventReason.QUEUED
    assert (result.fact.name, result.fact.uid, result.fact.resource_version) == ("web", "", "")


def scale_of(replicas: int | None, rv: str = "41", uid: str = "d-1") -> dict[str, Any]:
    """A Scale as the apiserver builds it from its parent: the parent's name, uid and version."""
    meta = {"name": "web", "namespace": "shop", "uid": uid, "resourceVersion": rv}
    scale: dict[str, Any] = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta}
    if replicas is not None:
        scale["spec"] = {"replicas": replicas}
    return scale


def test_a_scale_names_the_version_it_makes_by_the_parents_uid_old_version_and_new_count() -> None:
    for resource in (("apps", "deployments"), ("apps", "statefulsets"), ("", "replicationcontrollers")):
        document = review("UPDATE", scale_of(5), scale_of(3), resource=resource, sub="scale")
        fact = reduce(document).fact
        assert (fact.name, fact.uid, fact.resource_version) == ("web", "d-1", "scale:41:5"), resource
    # a scale to the count it already has stores nothing: no fact
    result = reduce(review("UPDATE", scale_of(3), scale_of(3), resource=("apps", "deployments"), sub="scale"))
    assert (result.fact, result.reason) == (None, EventReason.UNCHANGED_CONTENT)


@pytest.mark.parametrize(
    ("new", "old", "resource"),
    [
        (scale_of(5), scale_of(3, rv=""), ("apps", "deployments")),  # no old version to start from
        (scale_of(5), None, ("apps", "deployments")),
        (scale_of(None), scale_of(3), ("apps", "deployments")),  # no count
        (scale_of(5, uid=""), scale_of(3, uid=""), ("apps", "deployments")),  # no uid
        (scale_of(5), scale_of(3), ("example.com", "widgets")),  # its scale may map to another field
    ],
)
def test_a_scale_that_cannot_name_its_version_is_answered_by_name(
    new: dict[str, Any], old: dict[str, Any] | None, resource: tuple[str, str]
) -> None:
    fact = reduce(review("UPDATE", new, old, resource=resource, sub="scale")).fact
    assert (fact.name, fact.uid, fact.resource_version) == ("web", "", "")


def test_the_uid_of_a_scale_comes_from_the_old_object_when_the_new_one_has_none() -> None:
    fact = reduce(
        review("UPDATE", scale_of(5, uid=""), scale_of(3), resource=("apps", "deployments"), sub="scale")
    ).fact
    assert (fact.uid, fact.resource_version) == ("d-1", "scale:41:5")


def test_a_secret_never_gets_a_content_key() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "shop", "uid": "s-1"},
        "data": {"p": "aHVudGVyMg=="},
    }
    fact = reduce(review("CREATE", secret, resource=("", "secrets"))).fact
    assert (fact.uid, fact.resource_version) == ("s-1", "")


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ([], "JSON object"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "EventList"}, "kind"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}, "request"),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}},
            "request.uid",
        ),
    ],
)
def test_an_envelope_that_is_not_a_review_is_named(document: Any, field: str) -> None:
    with pytest.raises(InvalidReview, match=field.replace(".", r"\.")):
        parse_review(document)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@given(
    spec=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    labels=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=3),
    noise=st.dictionaries(
        st.sampled_from(["resourceVersion", "generation", "managedFields", "selfLink"]), json_values
    ),
    status=json_values,
)
def test_the_key_ignores_everything_storage_and_controllers_change_but_not_intent(
    spec: dict[str, Any], labels: dict[str, str], noise: dict[str, Any], status: Any
) -> None:
    """Property: the admitted object and the stored one (new resourceVersion, status, managed
    fields) have one key; any change of intent gives another."""
    admitted: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "shop", "uid": "u", "labels": labels},
        "spec": spec,
    }
    stored = copy.deepcopy(admitted)
    stored["metadata"].update(noise)
    stored["status"] = status
    document = review("CREATE", admitted, resource=("apps", "deployments"))
    key = reduce(document).fact.resource_version
    assert key == watch_key(stored)
    changed = copy.deepcopy(stored)
    changed["spec"] = {**spec, "replicas-changed": True}
    assert watch_key(changed) != key


# --- the endpoint ------------------------------------------------------------------------------------


def reviews(route: str, reason: str) -> float:
    category = {"queued": "stored", "write_error": "error"}.get(reason, "dropped")
    return (
        REGISTRY.get_sample_value(
            "reverser_admission_reviews_total", {"route": route, "reason": reason, "category": category}
        )
        or 0.0
    )


async def send(
    http: aiohttp.ClientSession,
    running: Running,
    body: bytes | dict[str, Any],
    path: str = "/admission-webhook/default",
    **headers: str,
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(
        running.url(path), data=data, headers={"Content-Type": "application/json", **headers}
    ) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if resp.content_type == "application/json" else text


async def test_a_review_is_allowed_with_its_uid_once_its_fact_is_on_the_log(
    start_ingress: Any, http: aiohttp.ClientSession
) -> None:
    running: Running = await start_ingress(admission={"enabled": True})
    before = reviews("default", "queued")
    status, answer = await send(http, running, review("CREATE", configmap(), uid="r-42"))
    assert status == 200
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "r-42", "allowed": True},
    }
    [(_key, batch)] = await read_batches(running)
    assert batch.group_resource == GroupResource("", "configmaps")
    [fact] = batch.facts
    assert (fact.author, fact.audit_id) == ("alice", "admission/r-42")
    assert reviews("default", "queued") == before + 1
    # a no-op for Git and a dry run are allowed too, and stored nowhere
    for document in (review("UPDATE", configmap(), configmap()), review("CREATE", configmap(), dry_run=True)):
        status, answer = await send(http, running, document)
        assert (status, answer["response"]["allowed"]) == (200, True)
    assert len(await read_batches(running)) == 1


async def test_a_log_that_does_not_answer_still_allows_the_write_and_counts_the_lost_fact(
    start_ingress: Any, http: aiohttp.ClientSession
) -> None:
    running: Running = await start_ingress(admission={"enabled": True, "publish_timeout_s": 0.2})
    await running.log.close()  # every append now fails
    before = reviews("default", "write_error")
    status, answer = await send(http, running, review("CREATE", configmap()))
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert reviews("default", "write_error") == before + 1


async def test_refusals_name_the_reason_and_a_disabled_source_is_not_there(
    start_ingress: Any, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADMISSION_TOKEN", "s3cret-path-token")
    routes = [{"name": "default", "bearer_tokens_env": ["ADMISSION_TOKEN"]}]
    running: Running = await start_ingress(admission={"enabled": True}, routes=routes)
    ok = review("CREATE", configmap())
    assert (await send(http, running, ok))[0] == 401
    assert (await send(http, running, ok, "/admission-webhook/default/wrong-token"))[0] == 403
    status, answer = await send(http, running, ok, "/admission-webhook/default/s3cret-path-token")
    assert (status, answer["response"]["allowed"]) == (200, True)
    status, _ = await send(http, running, ok, Authorization="Bearer s3cret-path-token")
    assert status == 200
    status, text = await send(http, running, b"{", "/admission-webhook/default/s3cret-path-token")
    assert (status, text.strip()) == (400, "invalid admission review: body is not valid JSON")
    status, text = await send(
        http, running, {"kind": "AdmissionReview"}, "/admission-webhook/default/s3cret-path-token"
    )
    assert (status, text.strip()) == (400, "invalid admission review: apiVersion must be admission.k8s.io/v1")
    assert (await send(http, running, ok, "/admission-webhook/nope/x"))[0] == 404
    assert (await send(http, running, ok, "/admission-webhook/default/a/b"))[0] == 400
    assert len(await read_batches(running)) == 2
    off: Running = await start_ingress()
    assert (await send(http, off, ok))[0] == 404


def test_the_identity_providers_claims_name_the_author_like_an_audit_fact() -> None:
    document = review("CREATE", configmap())
    document["request"]["userInfo"]["extra"] = {
        "configbutler.ai/claims/display-name": ["Alice Liddell"],
        "configbutler.ai/claims/email": ["alice@example.com"],
    }
    fact = reduce(document).fact
    assert (fact.author, fact.display_name, fact.email) == ("alice", "Alice Liddell", "alice@example.com")
