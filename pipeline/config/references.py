"""References to Kubernetes objects that hold what the configuration never does: kubeconfigs,
credentials, signing keys, known hosts. Only the reference is in the file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeline.config.section import DNS_LABEL, OBJECT_NAME, Section


class KubeconfigSecretReference(Section):
    """A Secret holding a source cluster's kubeconfig (gitops-reverser's ClusterProvider
    `spec.kubeConfig.secretRef`), read through the API server of the cluster the custom resources
    live in (`custom_resources.cluster`, else the first of `clusters`), so a remote cluster's
    credential never has to be a file in the pod. Only this reference is in the configuration."""

    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace of the Secret."""
    name: str = Field(pattern=OBJECT_NAME)
    """Name of the Secret."""
    key: str | None = Field(default=None, min_length=1)
    """The Secret key holding the kubeconfig; none: `value`, else `value.yaml` (Flux's order)."""

    def describe(self) -> str:
        return f"Secret {self.namespace}/{self.name}"


class SecretReference(Section):
    """A Secret holding a provider's Git credentials or signing key (keys: docs/secrets.md).

    Read by the commit worker from the cluster custom resources live in (`custom_resources.cluster`,
    else the first of `clusters`) when it first needs the remote, and again after the remote
    refuses them; only this reference is in the configuration, never a value.
    """

    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace of the Secret."""
    name: str = Field(pattern=OBJECT_NAME)
    """Name of the Secret."""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


class KnownHostsReference(Section):
    """A ConfigMap or Secret whose `known_hosts` (or `ssh_known_hosts`) key lists the SSH host keys."""

    kind: Literal["ConfigMap", "Secret"] = "ConfigMap"
    """ConfigMap (default) or Secret."""
    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace of the object."""
    name: str = Field(pattern=OBJECT_NAME)
    """Name of the object."""

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"
