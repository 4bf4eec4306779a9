"""The accept gate and fact reduction: every recorded audit event, and docs/audit-ingress.md's edge cases."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.facts.reduce import (
    UIDSET_NO_UIDS,
    UIDSET_UID_CAP,
    Reduction,
    category,
    group_facts,
    reduce_event,
)
from pipeline.facts.reduce import (
    EventReason as Reason,
)
from pipeline.facts.timeutil import parse_rfc3339_us
from pipeline.models import GroupResource
from tests.audit.corpus import (
    CORPUS,
    MUTATIONLAB_AUDIT_FILES,
    WEBHOOK_FILES,
    load_recording,
    now_us,
    token_value,
)

NOW = datetime(2026, 11, 30, 9, 50, 1, 123456, tzinfo=UTC)
CONFIGMAPS = GroupResource("", "configmaps")


def tok(kind: str, number: int | None = None) -> str:
    return token_value(kind, None if number is None else str(number), NOW)


def lab(relative: str) -> Any:
    return load_recording(CORPUS / "mutationlab" / relative, NOW)


def webhook_events(name: str) -> list[Any]:
    document = load_recording(CORPUS / "webhook" / name, NOW)
    return list(document["items"]) if document.get("kind") == "EventList" else [document]


def base_event(**overrides: Any) -> dict[str, Any]:
    """A minimal accepted create of configmap `cm` by `alice`."""
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "auditID": "a-1",
        "stage": "ResponseComplete",
        "verb": "create",
        "requestURI": "/api/v1/namespaces/ns/configmaps",
        "user": {"username": "alice"},
        "objectRef": {"resource": "configmaps", "namespace": "ns", "name": "cm", "apiVersion": "v1"},
        "responseStatus": {"code": 201},
        "responseObject": {
            "metadata": {"name": "cm", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"}
        },
        "stageTimestamp": "2026-06-25T10:11:12.123456Z",
    }
    event.update(overrides)
    return event


# --- the corpus ----------------------------------------------------------------------------------

MUTATIONLAB_EXPECTED: dict[str, tuple[str, dict[str, Any] | None]] = {
    "configmap/create-succeeds/audit.create.yaml": (
        Reason.QUEUED,
        {"name": "cm-a", "uid": tok("uid", 1), "resource_version": tok("rv", 1), "verb": "create"},
    ),
    "configmap/update/audit.update.yaml": (
        Reason.QUEUED,
        {"name": "cm-a", "uid": tok("uid", 1), "resource_version": tok("rv", 2), "verb": "update"},
    ),
    "configmap/server-side-apply/audit.patch.yaml": (
        Reason.QUEUED,
        {"name": "cm-a", "uid": tok("uid", 1), "resource_version": tok("rv", 2), "verb": "patch"},
    ),
    "configmap/no-op-apply/audit.patch.yaml": (
        Reason.QUEUED,
        {"name": "cm-a", "uid": tok("uid", 1), "resource_version": tok("rv", 1), "verb": "patch"},
    ),
    "configmap/generate-name-create/audit.create.yaml": (
        Reason.QUEUED,
        {"name": "cm-gen-<rand-1>", "uid": tok("uid", 1), "resource_version": tok("rv", 1)},
    ),
    "configmap/deletecollection/audit.deletecollection.yaml": (
        Reason.QUEUED,
        {
            "name": "",
            "uid": "",
            "resource_version": "",
            "verb": "deletecollection",
            "label_selector": "mutationlab.configbutler.ai/scenario=deletecollection",
            "uids": [tok("uid", 1), tok("uid", 3), tok("uid", 5)],
        },
    ),
    "configmap/dry-run-create/audit.create.yaml": (Reason.DRY_RUN, None),
    "configmap/record-and-reject/audit.create.yaml": (Reason.FAILED_REQUEST, None),
    "flunder/aggregated-api-write/audit.create.yaml": (Reason.NO_ATTRIBUTION_FACT, None),
}


def test_every_mutationlab_audit_file_has_an_expectation() -> None:
    found = {str(p.relative_to(CORPUS / "mutationlab")) for p in MUTATIONLAB_AUDIT_FILES}
    assert found == set(MUTATIONLAB_EXPECTED)


@pytest.mark.parametrize("relative", sorted(MUTATIONLAB_EXPECTED))
def test_mutationlab_recording(relative: str) -> None:
    reason, fields = MUTATIONLAB_EXPECTED[relative]
    reduction = reduce_event(lab(relative))
    assert reduction.reason == reason
    if fields is None:
        assert reduction.fact is None
        return
    fact = reduction.fact
    assert fact is not None
    assert fact.author == "system:admin"
    assert fact.namespace == tok("ns", 1)
    assert fact.audit_id == "<auditID-1>"
    assert fact.stage_timestamp_us == now_us(NOW)
    assert reduction.group_resource == CONFIGMAPS
    for key, value in fields.items():
        assert getattr(fact, key) == value, key
    assert reduction.uidset_reason is None


def test_aggregated_write_without_name_is_filed_under_its_api_group() -> None:
    reduction = reduce_event(lab("flunder/aggregated-api-write/audit.create.yaml"))
    flunders = GroupResource("wardle.example.com", "flunders")
    assert reduction == Reduction(Reason.NO_ATTRIBUTION_FACT, flunders, None)


def test_every_webhook_file_has_an_expectation() -> None:
    assert {p.name for p in WEBHOOK_FILES} == {
        "aggregated-flunder-create-eventlist.yaml",
        "config-deletecollection.yaml",
        "config-update.yaml",
        "flux-secret-dryrun-patch-eventlist.yaml",
        "flux-secret-persisted-patch-eventlist.yaml",
    }


def test_webhook_aggregated_flunder_with_name_gets_an_rv_only_fact() -> None:
    (event,) = webhook_events("aggregated-flunder-create-eventlist.yaml")
    reduction = reduce_event(event)
    assert reduction.reason == Reason.QUEUED
    assert reduction.group_resource == GroupResource("wardle.example.com", "flunders")
    assert reduction.fact == AuthorFact(
        author="jane@acme.com",
        verb="create",
        audit_id="aggregated-flunder-create",
        namespace="default",
        name="aggregated-shallow-flunder",
        resource_version="456",
    )


def test_webhook_deletecollection_lists_every_uid_and_matches_all() -> None:
    (event,) = webhook_events("config-deletecollection.yaml")
    reduction = reduce_event(event)
    fact = reduction.fact
    assert reduction.reason == Reason.QUEUED
    assert fact is not None
    assert fact.label_selector == ""
    assert fact.uids == [
        "4015879e-2f93-4368-8e25-8ba3807cba02",
        "39c1b9fc-d8b1-4108-843c-9529963b1744",
        "82d7711c-78fc-4180-97c2-740bfc64f0c5",
        "f57e336b-1bbb-404b-9013-5123795941a5",
        "c92a3c2b-702e-43ed-bf9f-53d2e280dbe7",
        "5aba884c-1d31-4ff2-b55b-17d76e0bf2a7",
    ]
    assert (fact.namespace, fact.name, fact.uid, fact.resource_version) == ("new-config-ns", "", "", "")
    assert fact.stage_timestamp_us == parse_rfc3339_us("2025-12-03T09:26:48.537056Z")


def test_webhook_patch_backfills_uid_from_response_and_takes_yaml_timestamps() -> None:
    (event,) = webhook_events("config-update.yaml")
    assert isinstance(event["stageTimestamp"], datetime)  # unquoted in the recording
    reduction = reduce_event(event)
    assert reduction.reason == Reason.QUEUED
    assert reduction.fact == AuthorFact(
        author="system:admin",
        verb="patch",
        audit_id="89e50d9e-7963-4836-87ab-a18685930369",
        namespace="new-config-ns",
        name="test-config3",
        uid="271ee126-790e-4ee3-a7f8-f8451c550e8d",
        resource_version="13772844",
        stage_timestamp_us=parse_rfc3339_us("2025-12-02T11:19:13.941570Z"),
    )


def test_webhook_flux_dry_run_is_dropped_and_persisted_patch_published() -> None:
    (dry,) = webhook_events("flux-secret-dryrun-patch-eventlist.yaml")
    assert reduce_event(dry).reason == Reason.DRY_RUN
    (persisted,) = webhook_events("flux-secret-persisted-patch-eventlist.yaml")
    reduction = reduce_event(persisted)
    fact = reduction.fact
    assert reduction.reason == Reason.QUEUED
    assert fact is not None
    assert reduction.group_resource == GroupResource("", "secrets")
    assert (fact.author, fact.name, fact.uid) == (
        "system:serviceaccount:flux-system:kustomize-controller",
        "app-secret",
        "",
    )
    assert fact.resource_version == "102"  # response RV, never the request's 101


# --- the accept gate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"stage": "RequestReceived"}, Reason.STAGE),
        ({"stage": "ResponseStarted"}, Reason.STAGE),
        ({"stage": "Panic"}, Reason.STAGE),
        ({"stage": "responsecomplete"}, Reason.STAGE),
        ({"stage": None}, Reason.STAGE),
        ({"verb": "get"}, Reason.READ_ONLY_OR_UNKNOWN_VERB),
        ({"verb": "list"}, Reason.READ_ONLY_OR_UNKNOWN_VERB),
        ({"verb": "watch"}, Reason.READ_ONLY_OR_UNKNOWN_VERB),
        ({"verb": "impersonate"}, Reason.READ_ONLY_OR_UNKNOWN_VERB),
        ({"verb": 5}, Reason.READ_ONLY_OR_UNKNOWN_VERB),
        ({"responseStatus": {"code": 300}}, Reason.FAILED_REQUEST),
        ({"responseStatus": {"code": 403}}, Reason.FAILED_REQUEST),
        ({"responseStatus": {"code": 409}}, Reason.FAILED_REQUEST),
        ({"responseStatus": {"code": "201"}}, Reason.MALFORMED_EVENT),
        ({"requestURI": "/api/v1/namespaces/ns/configmaps?dryRun=All"}, Reason.DRY_RUN),
        ({"requestURI": "/api/v1/namespaces/ns/configmaps?force=true&dryRun=x&dryRun=All"}, Reason.DRY_RUN),
        ({"requestURI": "/api/v1/namespaces/ns/configmaps?dry%52un=All"}, Reason.DRY_RUN),
        (
            {"objectRef": {"resource": "configmaps", "name": "cm", "subresource": "status"}},
            Reason.NON_SCALE_SUBRESOURCE,
        ),
        (
            {"objectRef": {"resource": "pods", "name": "p", "subresource": "exec"}},
            Reason.NON_SCALE_SUBRESOURCE,
        ),
        (
            {"objectRef": {"resource": "pods", "name": "p", "subresource": "eviction"}},
            Reason.NON_SCALE_SUBRESOURCE,
        ),
        (
            {"objectRef": {"resource": "deployments", "name": "d", "subresource": "Scale"}},
            Reason.NON_SCALE_SUBRESOURCE,
        ),
        (
            {
                "verb": "get",
                "stage": "RequestReceived",
                "objectRef": {"resource": "d", "subresource": "scale"},
            },
            Reason.NON_SCALE_SUBRESOURCE,
        ),
        (
            {
                "requestObject": {"metadata": {"resourceVersion": "7"}},
                "responseObject": {"metadata": {"name": "cm", "resourceVersion": "7"}},
            },
            Reason.UNCHANGED_RESOURCE_VERSION,
        ),
    ],
)
def test_gate_drops(overrides: dict[str, Any], reason: str) -> None:
    reduction = reduce_event(base_event(**overrides))
    assert reduction.reason == reason
    assert reduction.fact is None


def test_subresource_gate_runs_before_the_stage_check() -> None:
    event = base_event(stage="RequestReceived", objectRef={"resource": "pods", "subresource": "log"})
    assert reduce_event(event).reason == Reason.NON_SCALE_SUBRESOURCE


@pytest.mark.parametrize(
    "overrides",
    [
        {"verb": "PATCH"},
        {"verb": "Update"},
        {"responseStatus": {"code": 299}},
        {"responseStatus": {"code": 0}},
        {"responseStatus": {"metadata": {}}},
        {"responseStatus": None},
        {"requestURI": "/api/v1/namespaces/ns/configmaps?dryRun=all"},
        {"requestURI": "/api/v1/namespaces/ns/configmaps?dryRun="},
        {"requestURI": "api/v1/namespaces/ns/configmaps?dryRun=All"},  # not a request URI
        {"requestURI": "/api/v1/%zz?dryRun=All"},  # bad escape in the path: URI does not parse
        {"requestURI": "/api/v1/x?dryRun=%zzAll"},  # bad pair skipped
        {"requestURI": None},
        {
            "requestObject": {"metadata": {}},
            "responseObject": {"metadata": {"name": "cm", "resourceVersion": "7"}},
        },
        {"requestObject": {"metadata": {"resourceVersion": "6"}}},
        {
            "requestObject": "not an object",
            "responseObject": {"metadata": {"name": "cm", "resourceVersion": "7"}},
        },
    ],
)
def test_gate_accepts(overrides: dict[str, Any]) -> None:
    reduction = reduce_event(base_event(**overrides))
    assert reduction.reason == Reason.QUEUED
    assert reduction.fact is not None


def test_scale_patch_is_accepted_and_filed_under_the_parent_type() -> None:
    event = base_event(
        verb="patch",
        objectRef={
            "resource": "deployments",
            "apiGroup": "apps",
            "namespace": "ns",
            "name": "web",
            "subresource": "scale",
        },
        responseObject={
            "kind": "Scale",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-9", "resourceVersion": "44"},
        },
    )
    reduction = reduce_event(event)
    assert reduction.reason == Reason.QUEUED
    assert reduction.group_resource == GroupResource("apps", "deployments")
    assert reduction.fact is not None
    assert reduction.fact.uid == "u-9"


def test_nil_and_malformed_items() -> None:
    assert reduce_event(None) == Reduction(Reason.NIL_EVENT, None, None)
    item: object
    for item in (3, "event", [], True, 1.5):
        assert reduce_event(item) == Reduction(Reason.MALFORMED_EVENT, None, None)


def test_verb_is_kept_verbatim() -> None:
    reduction = reduce_event(base_event(verb="PATCH"))
    assert reduction.fact is not None
    assert reduction.fact.verb == "PATCH"


# --- the reduction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"objectRef": None},
        {"objectRef": "configmaps"},
        {"objectRef": {"resource": "", "name": "cm"}},
        {"user": None},
        {"user": {"username": ""}},
        {"user": {"username": 7}},
        {"user": {}},
        {"objectRef": {"resource": "configmaps", "namespace": "ns"}, "responseObject": None},
        {"objectRef": {"resource": "configmaps", "namespace": "ns"}, "responseObject": {"metadata": "x"}},
    ],
)
def test_accepted_events_without_a_fact(overrides: dict[str, Any]) -> None:
    reduction = reduce_event(base_event(**overrides))
    assert reduction.reason == Reason.NO_ATTRIBUTION_FACT
    assert reduction.fact is None


def test_impersonated_user_is_credited_with_its_own_extras() -> None:
    event = base_event(
        user={
            "username": "admin",
            "extra": {
                "configbutler.ai/claims/display-name": ["Admin"],
                "configbutler.ai/claims/email": ["a@x.io"],
            },
        },
        impersonatedUser={
            "username": "jane",
            "extra": {"configbutler.ai/claims/display-name": ["Jane Doe", "ignored"]},
        },
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.author, fact.display_name, fact.email) == ("jane", "Jane Doe", "")


@pytest.mark.parametrize("impersonated", [None, {}, {"username": ""}, {"username": None}, "jane"])
def test_impersonation_without_username_falls_back_to_the_user(impersonated: Any) -> None:
    event = base_event(
        user={"username": "alice", "extra": {"configbutler.ai/claims/email": ["alice@x.io"]}},
        impersonatedUser=impersonated,
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.author, fact.email) == ("alice", "alice@x.io")


@pytest.mark.parametrize(
    "extra", [{"configbutler.ai/claims/email": []}, {"configbutler.ai/claims/email": "x"}, "x", None]
)
def test_malformed_extras_read_as_absent(extra: Any) -> None:
    fact = reduce_event(base_event(user={"username": "alice", "extra": extra})).fact
    assert fact is not None
    assert fact.email == ""
    assert fact.display_name == ""


def test_write_backfills_response_first_and_never_overwrites_object_ref() -> None:
    event = base_event(
        objectRef={"resource": "configmaps", "namespace": "ns"},
        requestObject={"metadata": {"name": "from-request", "uid": "req-uid"}},
        responseObject={"metadata": {"name": "from-response", "resourceVersion": "9"}},
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.namespace, fact.name, fact.uid) == ("ns", "from-response", "req-uid")


def test_a_missing_object_ref_namespace_is_backfilled_from_the_body() -> None:
    event = base_event(
        objectRef={"resource": "configmaps", "name": "cm", "uid": "ref-uid"},
        responseObject={"metadata": {"namespace": "from-response", "name": "other", "uid": "body-uid"}},
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.namespace, fact.name, fact.uid) == ("from-response", "cm", "ref-uid")


def test_a_non_string_response_resource_version_is_ignored_not_compared() -> None:
    ref = {"resource": "configmaps", "namespace": "ns", "name": "cm", "resourceVersion": "5"}
    event = base_event(
        verb="update",
        responseStatus={"code": 200},
        objectRef=ref,
        requestObject={"metadata": {"resourceVersion": 7}},
        responseObject={"metadata": {"uid": "u-1", "resourceVersion": 7}},
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.uid, fact.resource_version) == ("u-1", "5")


def test_a_non_string_request_uri_gives_an_empty_label_selector() -> None:
    event = base_event(
        verb="deletecollection",
        requestURI=5,
        responseStatus={"code": 200},
        objectRef={"resource": "configmaps", "namespace": "ns"},
        responseObject=None,
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert fact.label_selector == ""


def test_delete_backfills_request_first() -> None:
    event = base_event(
        verb="delete",
        responseStatus={"code": 200},
        objectRef={"resource": "configmaps", "namespace": "ns"},
        requestObject={"metadata": {"name": "from-request"}},
        responseObject={"metadata": {"name": "from-response", "uid": "resp-uid", "resourceVersion": "11"}},
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.name, fact.uid, fact.resource_version) == ("from-request", "resp-uid", "11")


def test_delete_answered_with_status_does_not_read_details_uid() -> None:
    """Trap 13: upstream parity, `Status.details.uid` is not a source of identity."""
    event = base_event(
        verb="delete",
        responseStatus={"code": 200},
        objectRef={"resource": "configmaps", "namespace": "ns", "name": "cm"},
        requestObject={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal"},
        responseObject={
            "kind": "Status",
            "metadata": {},
            "status": "Success",
            "details": {"name": "cm", "uid": "u-7"},
        },
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.name, fact.uid, fact.resource_version) == ("cm", "", "")


def test_object_ref_values_win_over_bodies() -> None:
    event = base_event(
        objectRef={"resource": "configmaps", "namespace": "ns", "name": "cm", "uid": "ref-uid"},
        responseObject={"metadata": {"namespace": "other", "name": "other", "uid": "body-uid"}},
    )
    fact = reduce_event(event).fact
    assert fact is not None
    assert (fact.namespace, fact.name, fact.uid) == ("ns", "cm", "ref-uid")


def test_resource_version_comes_from_the_response_then_object_ref_never_the_request() -> None:
    ref = {"resource": "configmaps", "namespace": "ns", "name": "cm", "resourceVersion": "5"}
    fact = reduce_event(
        base_event(objectRef=ref, requestObject={"metadata": {"resourceVersion": "4"}}, responseObject=None)
    ).fact
    assert fact is not None
    assert fact.resource_version == "5"
    fact = reduce_event(
        base_event(
            objectRef=dict(ref, resourceVersion=""),
            requestObject={"metadata": {"resourceVersion": "4"}},
            responseObject=None,
        )
    ).fact
    assert fact is not None
    assert fact.resource_version == ""
    fact = reduce_event(base_event(objectRef=ref, responseObject={"metadata": {"resourceVersion": "6"}})).fact
    assert fact is not None
    assert fact.resource_version == "6"


def collection(
    uri: str = "/api/v1/namespaces/ns/configmaps", body: Any = None, **overrides: Any
) -> dict[str, Any]:
    return base_event(
        verb="deletecollection",
        requestURI=uri,
        responseStatus={"code": 200},
        objectRef={"resource": "configmaps", "namespace": "ns"},
        requestObject={"kind": "DeleteOptions"},
        responseObject=body,
        **overrides,
    )


def items(*uids: str | None) -> dict[str, Any]:
    return {
        "kind": "ConfigMapList",
        "items": [{"metadata": {} if uid is None else {"uid": uid, "name": f"n-{uid}"}} for uid in uids],
    }


@pytest.mark.parametrize(
    ("uri", "selector"),
    [
        ("/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dweb", "app=web"),
        ("/api/v1/namespaces/ns/configmaps?labelSelector=app+in+(a%2Cb)&labelSelector=x", "app in (a,b)"),
        ("/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dx", ""),
        ("/api/v1/namespaces/ns/configmaps", ""),
        ("not a uri?labelSelector=app%3Dweb", ""),
        ("/api/v1/%zz?labelSelector=app%3Dweb", ""),
        ("/api/v1/x?labelSelector=a;b&labelSelector=c", "c"),
        # a badly escaped pair is skipped as Go's url.ParseQuery does: no selector, not a mangled one
        ("/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dweb%zz", ""),
        ("/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dweb%zz&labelSelector=b", "b"),
    ],
)
def test_collection_selector_from_request_uri(uri: str, selector: str) -> None:
    fact = reduce_event(collection(uri)).fact
    assert fact is not None
    assert fact.label_selector == selector


def test_collection_clears_object_identity_but_keeps_namespace() -> None:
    event = collection(body=items("u1", "u2"))
    event["objectRef"] = {
        "resource": "configmaps",
        "namespace": "ns",
        "name": "x",
        "uid": "y",
        "resourceVersion": "1",
    }
    reduction = reduce_event(event)
    fact = reduction.fact
    assert fact is not None
    assert (fact.namespace, fact.name, fact.uid, fact.resource_version) == ("ns", "", "", "")
    assert fact.uids == ["u1", "u2"]
    assert reduction.uidset_reason is None


@pytest.mark.parametrize(
    "body",
    [
        None,
        "garbage",
        {},
        {"kind": "Status", "metadata": {}},
        {"kind": "DeleteOptions"},
        items(),
        {"items": "x"},
    ],
)
def test_collection_without_list_body_has_no_uid_set_and_no_metric(body: Any) -> None:
    reduction = reduce_event(collection(body=body))
    assert reduction.fact is not None
    assert reduction.fact.uids is None
    assert reduction.uidset_reason is None


def test_collection_items_without_uid_are_skipped_or_counted() -> None:
    reduction = reduce_event(collection(body=items(None, "u2", "", None)))
    assert reduction.fact is not None
    assert reduction.fact.uids == ["u2"]
    reduction = reduce_event(collection(body={"items": [None, 3, {"metadata": {"uid": 5}}, {}]}))
    assert reduction.fact is not None
    assert reduction.fact.uids is None
    assert reduction.uidset_reason == UIDSET_NO_UIDS


def test_collection_uid_cap_counts_items_before_filtering() -> None:
    reduction = reduce_event(collection(body=items("u1", None, None)), uid_cap=2)
    assert reduction.fact is not None
    assert reduction.fact.uids is None
    assert reduction.uidset_reason == UIDSET_UID_CAP
    reduction = reduce_event(collection(body=items("u1", None)), uid_cap=2)
    assert reduction.fact is not None
    assert reduction.fact.uids == ["u1"]


def test_a_uid_cap_of_one_keeps_one_item_and_refuses_two() -> None:
    one = reduce_event(collection(body=items("u1")), uid_cap=1)
    assert one.fact is not None
    assert (one.fact.uids, one.uidset_reason) == (["u1"], None)
    two = reduce_event(collection(body=items("u1", "u2")), uid_cap=1)
    assert two.fact is not None
    assert (two.fact.uids, two.uidset_reason) == (None, UIDSET_UID_CAP)


@pytest.mark.parametrize("resource", [5, None, ["configmaps"], {"name": "configmaps"}])
def test_a_non_string_resource_gives_no_fact_and_an_empty_type(resource: object) -> None:
    event = base_event(objectRef={"resource": resource, "namespace": "ns", "name": "cm", "apiGroup": 3})
    reduction = reduce_event(event)
    assert reduction == Reduction(Reason.NO_ATTRIBUTION_FACT, GroupResource("", ""), None)
    assert group_facts("r", [reduction]) == []


def test_default_uid_cap_is_ten_thousand() -> None:
    uids = [f"u{i}" for i in range(10_001)]
    over = reduce_event(collection(body=items(*uids)))
    assert over.uidset_reason == UIDSET_UID_CAP
    at_cap = reduce_event(collection(body=items(*uids[:10_000])), uid_cap=0)
    assert at_cap.fact is not None
    assert at_cap.fact.uids is not None
    assert len(at_cap.fact.uids) == 10_000


def test_malformed_bodies_never_fail_the_event() -> None:
    body: object
    for body in (
        None,
        1,
        "x",
        [],
        {"metadata": None},
        {"metadata": []},
        {"metadata": {"name": 3, "uid": []}},
    ):
        reduction = reduce_event(base_event(requestObject=body, responseObject=body))
        assert reduction.reason == Reason.QUEUED
        assert reduction.fact is not None
        assert (reduction.fact.name, reduction.fact.uid) == ("cm", "")


# --- time ----------------------------------------------------------------------------------------


def us(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-06-25T10:11:12.123456Z", us(datetime(2026, 6, 25, 10, 11, 12, 123456, tzinfo=UTC))),
        ("2026-06-25T10:11:12.123456789Z", us(datetime(2026, 6, 25, 10, 11, 12, 123456, tzinfo=UTC))),
        ("2026-06-25T10:11:12.999999999Z", us(datetime(2026, 6, 25, 10, 11, 12, 999999, tzinfo=UTC))),
        ("2026-06-25T10:11:12.1Z", us(datetime(2026, 6, 25, 10, 11, 12, 100000, tzinfo=UTC))),
        ("2026-06-25T10:11:12Z", us(datetime(2026, 6, 25, 10, 11, 12, tzinfo=UTC))),
        ("2026-06-25T12:11:12.5+02:00", us(datetime(2026, 6, 25, 10, 11, 12, 500000, tzinfo=UTC))),
        ("2026-06-25t10:11:12-01:30", us(datetime(2026, 6, 25, 11, 41, 12, tzinfo=UTC))),
        ("2026-06-25 10:11:12Z", 0),
        ("2026-02-30T10:11:12.123456Z", 0),
        ("2026-06-25T23:59:60.000000Z", 0),
        ("2026-06-25T24:00:00Z", 0),
        ("2026-06-25T10:11:12.12345\u0663Z", 0),
        ("2026-06-25T10:11:12.+12345Z", 0),
        ("\u0662026-06-25T10:11:12.123456Z", 0),
        ("2026-06-25T10:11:12.123456z", us(datetime(2026, 6, 25, 10, 11, 12, 123456, tzinfo=UTC))),
        ("2026-06-25", 0),
        ("2026-13-25T10:11:12Z", 0),
        ("2026-06-25T10:11:12.1234567890Z", 0),
        ("2026-06-25T10:11:12", 0),
        ("0001-01-01T00:00:00Z", 0),
        ("", 0),
        (None, 0),
        (12345, 0),
        (datetime(2026, 6, 25, 10, 11, 12, 7), us(datetime(2026, 6, 25, 10, 11, 12, 7, tzinfo=UTC))),
        (
            datetime(2026, 6, 25, 12, 11, 12, tzinfo=timezone(timedelta(hours=2))),
            us(datetime(2026, 6, 25, 10, 11, 12, tzinfo=UTC)),
        ),
    ],
)
def test_stage_timestamp(text: object, expected: int) -> None:
    assert parse_rfc3339_us(text) == expected


def test_unparseable_stage_timestamp_leaves_the_fact_timeless() -> None:
    fact = reduce_event(base_event(stageTimestamp="yesterday")).fact
    assert fact is not None
    assert fact.stage_timestamp_us == 0


# --- grouping ------------------------------------------------------------------------------------


def test_five_events_over_three_types_make_three_batches_in_first_appearance_order() -> None:
    def write(resource: str, group: str, name: str) -> Reduction:
        event = base_event(
            objectRef={"resource": resource, "apiGroup": group, "namespace": "ns", "name": name}
        )
        return reduce_event(event)

    reductions = [
        write("deployments", "apps", "web"),
        write("configmaps", "", "config"),
        reduce_event(base_event(verb="get")),
        write("deployments", "apps", "api"),
        write("secrets", "", "creds"),
        write("configmaps", "", "other"),
    ]
    batches = group_facts("prod", reductions)
    assert [(b.route, b.group_resource.key, [f.name for f in b.facts]) for b in batches] == [
        ("prod", "apps/deployments", ["web", "api"]),
        ("prod", "configmaps", ["config", "other"]),
        ("prod", "secrets", ["creds"]),
    ]
    assert all(isinstance(b, FactBatch) for b in batches)


def test_no_facts_no_batches() -> None:
    assert group_facts("r", [reduce_event(None), reduce_event(base_event(stage="Panic"))]) == []


def test_categories() -> None:
    assert category(Reason.QUEUED) == "stored"
    assert category(Reason.WRITE_ERROR) == "error"
    assert category(Reason.NO_ATTRIBUTION_FACT) == "skipped"
    dropped = (
        Reason.STAGE,
        Reason.DRY_RUN,
        Reason.NIL_EVENT,
        Reason.MALFORMED_EVENT,
        Reason.NON_SCALE_SUBRESOURCE,
    )
    for reason in dropped:
        assert category(reason) == "dropped"
    assert category("something_new") == "error"


# --- property tests ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)

EVENT_KEYS = [
    "stage", "verb", "requestURI", "user", "impersonatedUser", "objectRef", "responseStatus",
    "requestObject", "responseObject", "stageTimestamp", "auditID",
]  # fmt: skip


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    """A realistic corpus event with some fields replaced by arbitrary JSON."""
    path = draw(st.sampled_from(MUTATIONLAB_AUDIT_FILES + WEBHOOK_FILES))
    document = load_recording(path, NOW)
    event = copy.deepcopy(document["items"][0] if document.get("kind") == "EventList" else document)
    for key in draw(st.lists(st.sampled_from(EVENT_KEYS), max_size=4)):
        event[key] = draw(json_values)
    return dict(event)


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_arbitrary_json_never_raises(value: Any) -> None:
    reduction = reduce_event(value)
    assert isinstance(reduction.reason, str)
    if reduction.fact is not None:
        assert reduction.fact.author
        json.dumps(reduction.fact.to_avro())


@given(mutated_events())
@settings(max_examples=200, deadline=None)
def test_mutated_corpus_events_never_raise_and_facts_encode(event: dict[str, Any]) -> None:
    from pipeline.codec import FACT_BATCH, codec

    reduction = reduce_event(event)
    batches = group_facts("r", [reduction])
    assert len(batches) == (1 if reduction.fact is not None else 0)
    for batch in batches:
        assert batch.facts[0].author
        codec(FACT_BATCH).encode(batch.to_avro())


@given(
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9999, 12, 31)),
    st.integers(min_value=0, max_value=999),
)
def test_timestamp_fast_path_agrees_with_the_full_parse(moment: datetime, nanos: int) -> None:
    expected = us(moment.replace(tzinfo=UTC))
    micro = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")
    assert parse_rfc3339_us(micro + "Z") == expected  # fast path
    assert parse_rfc3339_us(f"{micro}{nanos:03d}Z") == expected  # nine digits: truncated
    assert parse_rfc3339_us(micro + "+00:00") == expected  # offset form: full parse
