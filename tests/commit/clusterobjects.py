"""Secrets and ConfigMaps in memory, read like the commit worker reads them from the API server.

Stands in for the Kubernetes API in the commit tests (the reader's contract is the same `get` that
tests/e2e/test_custom_resources_rbac.py runs against the real kube-apiserver as the chart's
ServiceAccount).
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.gitcredentials import CredentialsError, CredentialsReason

SECRET = ("Secret", "team-a", "git-creds")


class Objects:
    """Objects by (kind, namespace, name): what the API server would answer to `get`.

    `refused` holds the objects whose `get` is forbidden (RBAC), answered as the reader does.
    """

    def __init__(self) -> None:
        self.data: dict[tuple[str, str, str], dict[str, bytes]] = {}
        self.refused: set[tuple[str, str, str]] = set()
        self.reads = 0

    async def read(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes]:
        self.reads += 1
        if (kind, namespace, name) in self.refused:
            raise CredentialsError(
                CredentialsReason.FORBIDDEN, f"{kind} {namespace}/{name}: forbidden to this ServiceAccount"
            )
        found = self.data.get((kind, namespace, name))
        if found is None:
            raise CredentialsError(CredentialsReason.NOT_FOUND, f"{kind} {namespace}/{name} does not exist")
        return found
