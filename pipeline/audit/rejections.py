"""Why the ingress refuses a request: one closed set of reasons, each with its status code.

Every refusal is answered with its status and a one-line reason (never any body content) and
counted in `reverser_audit_rejected_requests_total{route,reason}`, so hostile or broken input is a
4xx the operator can see, never a 500 (which the apiserver retries forever). The reasons that
come before the caller is authorized also close the connection: a client without credentials
gets one answer per connection, and cannot keep a slot by sending a request now and then.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Rejection", "RequestRejected"]


class Rejection(StrEnum):
    """The `reason` label of a refused request; `status` is its HTTP status code."""

    MALFORMED_HTTP = "malformed_http"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BARE_ENDPOINT = "bare_endpoint"
    MISSING_ROUTE = "missing_route"
    NESTED_ROUTE = "nested_route"
    UNKNOWN_ROUTE = "unknown_route"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    BODY_TOO_LARGE = "body_too_large"
    BODIES_IN_FLIGHT = "bodies_in_flight"
    READ_TIMEOUT = "read_timeout"
    BROKEN_BODY = "broken_body"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    WRONG_KIND = "wrong_kind"
    WRONG_API_VERSION = "wrong_api_version"
    ITEMS_NOT_A_LIST = "items_not_a_list"
    TOO_MANY_EVENTS = "too_many_events"
    NOT_AN_ADMISSION_REVIEW = "not_an_admission_review"

    @property
    def status(self) -> int:
        return _STATUS[self]

    @property
    def before_authorization(self) -> bool:
        """Refused before the caller's credentials were accepted: the connection is closed too."""
        return self in _BEFORE_AUTHORIZATION


_STATUS: dict[Rejection, int] = {
    # Answered by aiohttp's parser itself, before any handler (see pipeline.audit.httplog).
    Rejection.MALFORMED_HTTP: 400,
    Rejection.NOT_FOUND: 404,
    Rejection.METHOD_NOT_ALLOWED: 405,
    Rejection.BARE_ENDPOINT: 400,
    Rejection.MISSING_ROUTE: 400,
    Rejection.NESTED_ROUTE: 400,
    Rejection.UNKNOWN_ROUTE: 404,
    Rejection.UNAUTHENTICATED: 401,
    Rejection.FORBIDDEN: 403,
    Rejection.UNSUPPORTED_ENCODING: 415,
    Rejection.BODY_TOO_LARGE: 413,
    # The one refusal that asks for a retry: the body was fine, the ingress is full right now.
    Rejection.BODIES_IN_FLIGHT: 503,
    Rejection.READ_TIMEOUT: 408,
    Rejection.BROKEN_BODY: 400,
    Rejection.INVALID_JSON: 400,
    Rejection.NOT_AN_OBJECT: 400,
    Rejection.WRONG_KIND: 400,
    Rejection.WRONG_API_VERSION: 400,
    Rejection.ITEMS_NOT_A_LIST: 400,
    Rejection.TOO_MANY_EVENTS: 413,
    Rejection.NOT_AN_ADMISSION_REVIEW: 400,
}

_BEFORE_AUTHORIZATION = frozenset(
    {
        Rejection.MALFORMED_HTTP,
        Rejection.NOT_FOUND,
        Rejection.METHOD_NOT_ALLOWED,
        Rejection.BARE_ENDPOINT,
        Rejection.MISSING_ROUTE,
        Rejection.NESTED_ROUTE,
        Rejection.UNKNOWN_ROUTE,
        Rejection.UNAUTHENTICATED,
        Rejection.FORBIDDEN,
    }
)


class RequestRejected(Exception):
    """Ends a request early with a reason's status and a short message (never any body content)."""

    def __init__(self, rejection: Rejection, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.rejection = rejection
        self.status = rejection.status
        self.message = message
        self.headers = headers or {}
