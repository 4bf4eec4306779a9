"""AdmissionReview → author fact: the fact source for clusters whose audit webhook cannot be set.

Managed control planes (EKS, GKE, AKS) do not let users configure the kube-apiserver's audit
webhook, but every write still passes validating admission with its `userInfo`, `object` and
`oldObject`. This module turns one `admission.k8s.io/v1` AdmissionReview into at most one fact,
purely (the ingress does the HTTP and the log). Admission runs before the write is stored, so it
never knows the resourceVersion the write will get; a create or update therefore names its version
by the content key of the object as it will be stored (`pipeline.content.key`), which the router
computes from the watch event's sanitized bytes too (docs/attribution.md, "Admission facts").

What admission cannot know is decided here, explicitly:
- a dry run is never stored: no fact;
- an update that leaves the mirrored (sanitized) content as it was (a status, finalizer or
  controller-annotation write) can never be a commit, and would only make its content key look
  claimed by a second user: no fact;
- a request that fails after admission (a later webhook's denial, a conflict) leaves a fact no
  watch event will ever match; it ages out with the TTL;
- sensitive types (Secrets) get no content key: a digest of a Secret's data on the log could be
  guessed offline. They are named by the name tier, deletes by uid as always;
- a write through the `scale` subresource names its version by the scale key
  (`pipeline.content.scale`: the parent's uid, its resourceVersion before the write and the new
  replica count), because a Scale is not the object and its content key would match nothing; a
  scale that leaves the count as it was stores nothing: no fact.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from pipeline.codec.fact_batch import AuthorFact
from pipeline.content.key import content_key
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.content.scale import SCALED_RESOURCES, scale_key, spec_replicas
from pipeline.content.sensitivity import is_sensitive
from pipeline.facts.reduce import DISPLAY_NAME_EXTRA, EMAIL_EXTRA, EventReason, Reduction, user_extra
from pipeline.models import GroupResource

__all__ = [
    "ADMISSION_REVIEW_API_VERSION",
    "AUDIT_ID_PREFIX",
    "InvalidReview",
    "Review",
    "allowed_response",
    "parse_review",
    "reduce_review",
]

ADMISSION_REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
#: A fact's `auditID` names its source: an admission fact's is this prefix and the request's uid.
AUDIT_ID_PREFIX: Final = "admission/"

_VERBS: Final = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}


class InvalidReview(ValueError):
    """The body is not an AdmissionReview request; the message names the field, never content."""


class Review(NamedTuple):
    """The parts of an AdmissionReview the ingress needs besides the fact: its uid (echoed in the
    answer, which the apiserver checks) and the request."""

    uid: str
    request: dict[str, Any]


def parse_review(document: object) -> Review:
    """Check the envelope; the request's own fields are read leniently by `reduce_review`."""
    if not isinstance(document, dict):
        raise InvalidReview("expected a JSON object")
    if document.get("kind") != "AdmissionReview":
        raise InvalidReview("kind must be AdmissionReview")
    if document.get("apiVersion") != ADMISSION_REVIEW_API_VERSION:
        raise InvalidReview(f"apiVersion must be {ADMISSION_REVIEW_API_VERSION}")
    request = document.get("request")
    if not isinstance(request, dict):
        raise InvalidReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidReview("request.uid must be a non-empty string")
    return Review(uid, request)


def allowed_response(uid: str) -> dict[str, Any]:
    """The answer to every review: allowed. This source observes writes, it never decides them."""
    return {
        "apiVersion": ADMISSION_REVIEW_API_VERSION,
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }


def _text(mapping: object, key: str) -> str:
    if not isinstance(mapping, dict):
        return ""
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def _mirrored(obj: object) -> bytes | None:
    """The sanitized canonical JSON the watch would write for `obj`; None if it is not an object."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    return sanitized_json(sanitize(obj))


def reduce_review(review: Review, received_us: int) -> Reduction:
    """At most one fact for one review; `received_us` (UTC µs) stands in for the stage time."""
    request = review.request
    resource = request.get("resource")
    group, name_of_resource = _text(resource, "group"), _text(resource, "resource")
    gr = GroupResource(group, name_of_resource) if name_of_resource else None
    operation = _text(request, "operation")
    verb = _VERBS.get(operation)
    subresource = _text(request, "subResource")
    if subresource and (verb is None or subresource != "scale"):
        return Reduction(EventReason.NON_SCALE_SUBRESOURCE, gr, None)
    if verb is None:
        return Reduction(EventReason.READ_ONLY_OR_UNKNOWN_VERB, gr, None)
    if request.get("dryRun") is True:
        return Reduction(EventReason.DRY_RUN, gr, None)
    if gr is None:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    user = request.get("userInfo")
    author = _text(user, "username")
    if not author:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    new, old = request.get("object"), request.get("oldObject")
    stored = old if verb == "delete" else new
    metadata = stored.get("metadata") if isinstance(stored, dict) else None
    namespace = _text(request, "namespace") or _text(metadata, "namespace")
    name = _text(metadata, "name") or _text(request, "name")
    if not name:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    uid = key = ""
    if subresource:
        replicas, before = spec_replicas(new), spec_replicas(old)
        if replicas is not None and replicas == before:
            return Reduction(EventReason.UNCHANGED_CONTENT, gr, None)
        # A Scale's metadata is its parent's: uid, and the resourceVersion the write starts from.
        # Without both (or for a custom resource, whose scale may map to another field than
        # `spec.replicas`) the fact names no version and its name answers (the name tier).
        old_metadata = old.get("metadata") if isinstance(old, dict) else None
        previous_rv = _text(old_metadata, "resourceVersion")
        uid = _text(metadata, "uid") or _text(old_metadata, "uid")
        if uid and previous_rv and replicas is not None and (gr.group, gr.resource) in SCALED_RESOURCES:
            key = scale_key(previous_rv, replicas)
        else:
            uid = ""
    elif verb == "delete":
        uid = _text(metadata, "uid")
    else:
        uid = _text(metadata, "uid")
        mirrored = _mirrored(new)
        if verb == "update" and mirrored is not None and mirrored == _mirrored(old):
            return Reduction(EventReason.UNCHANGED_CONTENT, gr, None)
        if mirrored is not None and uid and not is_sensitive(gr.group, gr.resource):
            key = content_key(mirrored)
    extra = user.get("extra") if isinstance(user, dict) else None
    fact = AuthorFact(
        author,
        user_extra(extra, DISPLAY_NAME_EXTRA),
        user_extra(extra, EMAIL_EXTRA),
        verb,
        AUDIT_ID_PREFIX + review.uid,
        namespace,
        name,
        uid,
        key,
        received_us,
    )
    return Reduction(EventReason.QUEUED, gr, fact)
