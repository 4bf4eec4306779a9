"""The whole file: every section, and the rules that hold across sections (references, one
source of providers and targets, no two targets in one folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import model_validator

from pipeline.authormode import DEFAULT_ATTRIBUTION_MODE, AttributionMode, effective_mode
from pipeline.config.attribution import AttributionSettings
from pipeline.config.audit import AuditSettings
from pipeline.config.clusters import ClusterSettings
from pipeline.config.customresources import CustomResourceSettings
from pipeline.config.lag import LagSettings
from pipeline.config.log import LogSettings
from pipeline.config.metrics import MetricsSettings
from pipeline.config.providers import ProviderSettings
from pipeline.config.section import Section, unique_names
from pipeline.config.targets import TargetSettings
from pipeline.gitnames import normalize_target_path, paths_overlap, repository_key


def shares_folder(first: tuple[str, str, str], second: tuple[str, str, str]) -> bool:
    """Whether two destinations (`Settings.destination`) are the same or nested folders of one branch."""
    return first[:2] == second[:2] and paths_overlap(first[2], second[2])


class Settings(Section):
    """The whole configuration file."""

    workdir: Path = Path(".reverser")
    """State directory: the embedded log and the Git clones."""
    log: LogSettings = LogSettings()
    """The log backing the pipeline (Kafka or the embedded file log)."""
    metrics: MetricsSettings = MetricsSettings()
    """The metrics and health server."""
    audit: AuditSettings = AuditSettings()
    """The audit webhook ingress the apiservers post their audit events to."""
    attribution: AttributionSettings = AttributionSettings()
    """The fact index and the join of watch events with audit facts."""
    clusters: list[ClusterSettings] = []
    """Source clusters to watch."""
    providers: list[ProviderSettings] = []
    """Git remotes to write to."""
    targets: Annotated[list[TargetSettings], unique_names("target")] = []
    """Which cluster's resources land where."""
    lag: LagSettings = LagSettings()
    """The consumer-lag monitor."""
    custom_resources: CustomResourceSettings = CustomResourceSettings()
    """Providers, targets and rules from custom resources."""

    @model_validator(mode="after")
    def _one_source(self) -> Settings:
        """Providers and targets come from the file or from custom resources, never from both."""
        resources = self.custom_resources
        if not resources.enabled:
            return self
        if self.providers or self.targets:
            raise ValueError(
                "custom_resources.enabled: providers and targets come from the configbutler.ai "
                "custom resources; remove providers and targets from the file, or set "
                "custom_resources.enabled: false (`reverser config export` prints the resources)"
            )
        if not self.clusters:
            raise ValueError("custom_resources.enabled needs a cluster in clusters to read them from")
        if resources.cluster is not None and resources.cluster not in {c.name for c in self.clusters}:
            raise ValueError(f"custom_resources.cluster: unknown cluster {resources.cluster!r}")
        return self

    @property
    def resources_cluster(self) -> ClusterSettings:
        """The cluster the custom resources are read from (custom_resources.enabled only)."""
        wanted = self.custom_resources.cluster
        return next(c for c in self.clusters if wanted is None or c.name == wanted)

    @model_validator(mode="after")
    def _references(self) -> Settings:
        providers = {p.name for p in self.providers}
        clusters = {c.name for c in self.clusters}
        for index, target in enumerate(self.targets):
            if target.provider not in providers:
                raise ValueError(f"targets.{index}.provider: unknown provider {target.provider!r}")
            if clusters and target.cluster not in clusters:
                raise ValueError(f"targets.{index}.cluster: unknown cluster {target.cluster!r}")
        if self.clusters and self.resources_cluster.kubeconfig_secret is not None:
            raise ValueError(
                f"clusters.{self.resources_cluster.name}.kubeconfig_secret: this cluster holds the Secrets "
                "other clusters' kubeconfigs are read from, so it needs kubeconfig or in_cluster itself"
            )
        self._no_shared_folders()
        return self

    def _no_shared_folders(self) -> None:
        """Two targets writing the same or nested folders of one branch would sweep each other's files."""
        seen: list[tuple[str, tuple[str, str, str]]] = []
        for target in self.targets:
            here = self.destination(target)
            _, branch, path = here
            for name, other in seen:
                if shares_folder(here, other):
                    raise ValueError(
                        f"targets {name} and {target.name} write overlapping paths "
                        f"({other[2] or '/'} and {path or '/'}) on branch {branch} of the same repository"
                    )
            seen.append((target.name, here))

    def destination(self, target: TargetSettings) -> tuple[str, str, str]:
        """(repository, branch, normalized folder) a target writes to; its provider must exist.

        The repository is `repository_key` of the URL, so two spellings of one remote are one.
        """
        provider = self.provider(target.provider)
        return (
            repository_key(provider.url),
            target.branch or provider.default_branch,
            normalize_target_path(target.path),
        )

    def cluster_attribution_mode(self, cluster: ClusterSettings) -> AttributionMode:
        """The cluster's own attribution mode, else its audit route's, else the default."""
        if cluster.attribution is not None:
            return cluster.attribution
        route = next((r for r in self.audit.routes if r.name == cluster.route), None)
        if route is not None and route.attribution is not None:
            return route.attribution
        return DEFAULT_ATTRIBUTION_MODE

    def attribution_mode(self, target: TargetSettings) -> AttributionMode:
        """The target's own attribution mode, else its cluster's (a cluster not listed: the default)."""
        cluster = next((c for c in self.clusters if c.name == target.cluster), None)
        default = DEFAULT_ATTRIBUTION_MODE if cluster is None else self.cluster_attribution_mode(cluster)
        return effective_mode(target.attribution, default)

    def provider(self, name: str) -> ProviderSettings:
        for provider in self.providers:
            if provider.name == name:
                return provider
        raise KeyError(name)

    @property
    def embedded_log_dir(self) -> Path:
        """Where the embedded log keeps its topics and offsets, under the workdir."""
        return self.workdir / "log"

    def topic(self, name: str) -> str:
        """Full topic name for a pipeline topic such as `audit-facts`."""
        return f"{self.log.topic_prefix}.{name}"
