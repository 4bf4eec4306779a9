"""The `custom_resources` section: providers and targets from configbutler.ai objects, and
what tenant namespaces may point them at."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipeline.config.section import DNS_LABEL, Section
from pipeline.gitnames import check_remote_url, check_url_without_password, normalize_target_path
from pipeline.globs import GlobError, check_glob

#: What `{namespace}` in a tenant grant's prefixes stands for: the object's own namespace.
NAMESPACE_PLACEHOLDER = "{namespace}"


class TenantGrant(Section):
    """What GitProviders and GitTargets in some tenant namespaces may point at (docs/security.md, Tenants).

    Deny by default, as gitops-reverser's ClusterProvider `allowedNamespaces`: an object outside
    `custom_resources.namespace` whose namespace no grant matches gets no provider and no target.
    `{namespace}` in a prefix stands for the object's own namespace, so one grant serves every team.
    """

    namespaces: list[str] = Field(min_length=1)
    """Namespaces the grant is for, as Go path.Match globs (`team-*`)."""
    url_prefixes: list[str] = Field(min_length=1)
    """A GitProvider's `spec.url` must start with one of these, ending at a `/` (or be one), such as
    `https://git.example.com/{namespace}/`."""
    path_prefixes: list[str] = [NAMESPACE_PLACEHOLDER]
    """A GitTarget's `spec.path` must be one of these folders or inside one (`.`: anywhere in the
    repository); default `{namespace}`."""
    clusters: list[str] = []
    """Entries of `clusters` a GitTarget there may mirror (its namespace there); empty: only the
    cluster the custom resources live in."""

    @field_validator("namespaces")
    @classmethod
    def _globs(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                check_glob(pattern)
            except GlobError as exc:
                raise ValueError(f"namespace pattern {pattern!r}: {exc}") from None
        return patterns

    @field_validator("url_prefixes")
    @classmethod
    def _urls(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            check_url_without_password(check_remote_url(prefix.replace(NAMESPACE_PLACEHOLDER, "x")))
        return prefixes

    @field_validator("path_prefixes")
    @classmethod
    def _paths(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            normalize_target_path(prefix.replace(NAMESPACE_PLACEHOLDER, "x"))
        return prefixes


class CustomResourceSettings(Section):
    """Providers, targets and rules from `configbutler.ai` custom resources (docs/custom-resources.md).

    Enabled, the file keeps everything else (log, clusters, audit, ...) but may not list providers
    or targets: the two sources are never mixed. `cluster` names the entry of `clusters` the
    objects live in (default: the first); objects in `namespace` keep their names, others are
    named `namespace/name`.
    """

    enabled: bool = False
    """Read providers, targets and rules from configbutler.ai custom resources instead of this file."""
    cluster: str | None = None
    """The entry of `clusters` whose API holds the custom resources; none: the first."""
    namespace: str = Field(default="reverser", pattern=DNS_LABEL)
    """The controller's namespace: objects there keep their names, others are named `namespace/name`."""
    tenants: list[TenantGrant] = []
    """Repositories and folders the objects of other namespaces may use; none: no other namespace
    gets a provider or a target (docs/security.md, Tenants)."""
