"""Models shared by every stage: group/resource names, the record keys on the log, readiness reports."""

from __future__ import annotations

from typing import NamedTuple


class Readiness(NamedTuple):
    """Whether a stage is ready, and if not, a short reason for `/readyz` and the logs.

    Defined down here so a stage can report it without importing the service that aggregates it.
    """

    ready: bool
    detail: str = ""


class GroupResource(NamedTuple):
    """A Kubernetes group/resource; `group` is "" for the core group."""

    group: str
    resource: str

    @property
    def key(self) -> str:
        """`resource` for the core group, else `group/resource` (never the dotted form)."""
        return f"{self.group}/{self.resource}" if self.group else self.resource

    @classmethod
    def parse(cls, text: str) -> GroupResource:
        """Parse `resource` or `group/resource`."""
        group, _, resource = text.rpartition("/")
        return cls(group, resource)


#: gitops-reverser's CommitRequests: the custom resources' controller looks up the fact of each
#: one's create to name its submitter, so the audit ingress keeps facts of this type on the
#: route of the cluster the custom resources live in although no target watches it.
COMMIT_REQUESTS = GroupResource("configbutler.ai", "commitrequests")


def escape_route(route: str) -> str:
    """Escape `%` and `:` so `route:grKey` stays unambiguous for any route string."""
    return route.replace("%", "%25").replace(":", "%3A")


def stream_key(route: str, gr: GroupResource) -> bytes:
    """Record key for audit facts and watch events: one (route, group/resource) per partition."""
    return f"{escape_route(route)}:{gr.key}".encode()


def route_of_stream_key(key: bytes) -> str:
    """The route a `stream_key` was built from (undoing `escape_route`)."""
    escaped = key.decode("utf-8", "replace").partition(":")[0]
    return escaped.replace("%3A", ":").replace("%25", "%")


def stream_name(route: str, gr: GroupResource) -> str:
    """Human form `<route>/<grKey>`, used in metric labels and logs."""
    return f"{route}/{gr.key}"


def branch_key(provider: str, branch: str) -> bytes:
    """Record key for branch work: one (provider, branch) FIFO per partition."""
    return f"{escape_route(provider)}:{branch}".encode()


def compare_versions(left: str, right: str) -> int | None:
    """-1, 0 or 1 as resourceVersion `left` is older than, the same as or newer than `right`.

    Kubernetes documents resourceVersions as opaque, but every apiserver-served type uses decimal
    etcd revisions, which order changes cluster-wide. Two versions are compared only when both are
    ASCII decimal integers; None means incomparable (callers then take the safe side).
    """
    if not (left.isdigit() and right.isdigit() and left.isascii() and right.isascii()):
        return None
    a, b = int(left), int(right)
    return (a > b) - (a < b)
