"""Reading the Namespaces' labels for the namespace policies' selectors.

The apiserver is a stand-in here (a list of pages, or a KubeError), because what is under test is
the reader's choice of when to list and what to keep; the real list against a real apiserver, and
a relabel taking effect, is in tests/e2e/test_cluster_providers.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from pipeline.customresources.clusterprovider import selects_by_label
from pipeline.customresources.namespacelabels import NAMESPACE_LIST_ERRORS, NamespaceLabelReader
from pipeline.customresources.objects import parse_object
from pipeline.kube.client import KubeError

API = "configbutler.ai/v1alpha3"


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata}


class Namespaces:
    """Answers LISTs of /api/v1/namespaces with `pages`, or fails with `error`."""

    def __init__(self, *pages: list[dict[str, Any]]) -> None:
        self.pages = list(pages)
        self.error: KubeError | None = None
        self.lists = 0

    async def list_pages(
        self, path: str, query: Sequence[tuple[str, str]], page_size: int
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        assert path == "/api/v1/namespaces"
        self.lists += 1
        if self.error is not None:
            raise self.error
        for page in self.pages:
            yield page, "10"


def _provider(policy: dict[str, Any]) -> Any:
    return parse_object(
        {"apiVersion": API, "kind": "ClusterProvider", "metadata": {"name": "default"}, "spec": policy}
    )


def _target(policy: dict[str, Any]) -> Any:
    spec = {"providerRef": {"name": "repo"}, "branch": "main", "path": "a", "allowedSourceNamespaces": policy}
    metadata = {"name": "t", "namespace": "team-a"}
    return parse_object({"apiVersion": API, "kind": "GitTarget", "metadata": metadata, "spec": spec})


SELECTING = _provider({"allowedNamespaces": {"selector": {"matchLabels": {"tier": "trusted"}}}})


def test_only_a_declared_selector_asks_for_labels() -> None:
    assert not selects_by_label([_provider({"allowedNamespaces": {"names": ["team-a"]}})])
    assert not selects_by_label([_target({"names": ["team-a"]})])
    assert selects_by_label([SELECTING])
    assert selects_by_label([_provider({"accessFrom": {"selector": {}}})])
    assert selects_by_label([_target({"selector": {"matchLabels": {"share": "yes"}}})])


async def test_labels_of_every_page_are_read_and_nothing_is_listed_without_a_selector() -> None:
    api = Namespaces([_namespace("team-a", {"tier": "trusted"})], [_namespace("team-b")])
    reader = NamespaceLabelReader(api)  # type: ignore[arg-type]
    assert await reader.read([_provider({"allowedNamespaces": {"names": ["x"]}})]) is None
    assert (api.lists, reader.wanted) == (0, False)
    assert await reader.read([SELECTING]) == {"team-a": {"tier": "trusted"}, "team-b": {}}
    assert reader.wanted


async def test_a_failed_list_keeps_the_last_good_labels_and_is_counted() -> None:
    api = Namespaces([_namespace("team-a", {"tier": "trusted"})])
    reader = NamespaceLabelReader(api)  # type: ignore[arg-type]
    errors_before = NAMESPACE_LIST_ERRORS._value.get()
    api.error = KubeError(403, "Forbidden", "namespaces is forbidden")
    assert await reader.read([SELECTING]) is None, "no good list yet: labels unknown, names only"
    api.error = None
    good = await reader.read([SELECTING])
    api.error = KubeError(0, "Unreachable", "connection refused")
    assert await reader.read([SELECTING]) == good == {"team-a": {"tier": "trusted"}}
    assert NAMESPACE_LIST_ERRORS._value.get() == errors_before + 2


async def test_a_wakeup_by_commit_results_reuses_the_last_list() -> None:
    api = Namespaces([_namespace("team-a", {"tier": "trusted"})])
    reader = NamespaceLabelReader(api)  # type: ignore[arg-type]
    assert await reader.read([SELECTING], relist=False) == {"team-a": {"tier": "trusted"}}, "none yet: listed"
    api.pages = [[_namespace("team-a", {"tier": "sandbox"})]]
    assert await reader.read([SELECTING], relist=False) == {"team-a": {"tier": "trusted"}}
    assert api.lists == 1
    assert await reader.read([SELECTING]) == {"team-a": {"tier": "sandbox"}}
    assert api.lists == 2
