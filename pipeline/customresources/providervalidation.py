"""A ClusterProvider's `Validated` condition: its kubeconfig Secret read and checked, never dialled.

gitops-reverser validates a ClusterProvider's `spec.kubeConfig` on every reconcile without
contacting the cluster it names: no `kubeConfig` is the operator's own cluster (`InCluster`);
otherwise the Secret in the operator's namespace must exist, hold the key and hold a kubeconfig
that neither runs anything in the pod nor trusts anything of it (`Validated`, else the
`KubeConfig...` reason of `pipeline.kube.kubeconfigsecret.KubeconfigReason`). The check is the one
the watch stage applies when it opens the cluster's client, so the condition says what a watch
would meet. Secrets are not watched (that would keep every Secret value of the cluster in memory):
the controller reads them before a compile and every `REFRESH_S` meanwhile, so fixing or rotating a
Secret shows without a change to the ClusterProvider. A Secret the API server would not give (403,
no answer) is `Unknown`: nothing about the kubeconfig is known then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pipeline.config import KubeconfigSecretReference
from pipeline.customresources.clusterconnection import read_connection
from pipeline.customresources.objects import CustomResource, Kind
from pipeline.customresources.problems import FieldProblem
from pipeline.kube.client import KubeClient
from pipeline.kube.kubeconfigsecret import KubeconfigReason, KubeconfigSecretError, read_kubeconfig

__all__ = ["ValidatedReason", "Validation", "spec_validation", "validate_providers"]


class ValidatedReason(StrEnum):
    """gitops-reverser's `Validated=True` reasons, and ours for a provider not checked yet."""

    VALIDATED = "Validated"
    IN_CLUSTER = "InCluster"
    NOT_CHECKED = "NotChecked"


@dataclass(frozen=True, slots=True)
class Validation:
    """A provider's `Validated` condition: `status` is `True`, `False` or `Unknown`."""

    status: str
    reason: str
    message: str

    @property
    def failed(self) -> bool:
        return self.status == "False"


NOT_CHECKED = Validation("Unknown", ValidatedReason.NOT_CHECKED, "the kubeconfig Secret was not read yet")


def spec_validation(resource: CustomResource, home_namespace: str) -> Validation | KubeconfigSecretReference:
    """What the spec alone decides (no kubeConfig, or a malformed one), else the Secret to read."""
    problems: list[FieldProblem] = []
    connection = read_connection(resource, problems, [])
    if resource.spec.get("kubeConfig") is None:
        return Validation(
            "True",
            ValidatedReason.IN_CLUSTER,
            "no spec.kubeConfig: the cluster the controller runs in, or the file's cluster of this name",
        )
    malformed = [p for p in problems if p.path.startswith("spec.kubeConfig")]
    if malformed or connection.secret_name is None:
        shown = "; ".join(p.describe() for p in malformed) or "spec.kubeConfig.secretRef is required"
        return Validation("False", KubeconfigReason.INVALID, shown)
    return KubeconfigSecretReference(
        namespace=home_namespace, name=connection.secret_name, key=connection.secret_key
    )


async def validate_providers(
    client: KubeClient, providers: Iterable[CustomResource], home_namespace: str
) -> dict[str, Validation]:
    """Each ClusterProvider's validation by name, reading its Secret through `client`."""
    out: dict[str, Validation] = {}
    for resource in providers:
        if resource.ref.kind is not Kind.CLUSTER_PROVIDER:
            continue
        decided = spec_validation(resource, home_namespace)
        if isinstance(decided, Validation):
            out[resource.ref.name] = decided
            continue
        try:
            await read_kubeconfig(client, decided)
        except KubeconfigSecretError as exc:
            status = "Unknown" if exc.reason is KubeconfigReason.SECRET_UNREADABLE else "False"
            out[resource.ref.name] = Validation(status, exc.reason, str(exc))
            continue
        out[resource.ref.name] = Validation(
            "True", ValidatedReason.VALIDATED, f"kubeconfig {decided.describe()} validated"
        )
    return out
