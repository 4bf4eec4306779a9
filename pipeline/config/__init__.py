"""The one YAML configuration file, validated by pydantic.

Every option can also be set from the environment: `REVERSER_<SECTION>__<FIELD>` (nested with
double underscores), e.g. `REVERSER_LOG__BOOTSTRAP_SERVERS=k:9092`. A value for a string field is
taken verbatim (a password may look like YAML: `*x`, `NO`, `0x1F`, `a #b`); any other value is
parsed as YAML. An invalid file exits with the path of the offending field and the reason; an
invalid environment value is named by its variable and never echoed, since it may be a secret.

The package has a module per section (`log`, `audit`, `clusters`, `providers`, `targets`, ...),
the whole file in `settings`, and reading it in `environment` and `loading`; this face is what the
rest of the service imports, so a section can move between modules without touching a caller.
"""

from pipeline.config.addresses import BootstrapServers, HostPort, check_bootstrap_servers, split_host_port
from pipeline.config.attribution import AttributionSettings
from pipeline.config.audit import AdmissionSettings, AuditRoute, AuditSettings, AuditTls
from pipeline.config.clusters import CLUSTER_DEFAULTS, ClusterSettings
from pipeline.config.customresources import NAMESPACE_PLACEHOLDER, CustomResourceSettings, TenantGrant
from pipeline.config.environment import ENV_PREFIX
from pipeline.config.errors import ConfigError
from pipeline.config.lag import LagSettings, LagThreshold
from pipeline.config.loading import load_settings, revalidate
from pipeline.config.log import Compression, LogBackend, LogSettings, SaslSettings, TlsSettings, TopicSettings
from pipeline.config.metrics import MetricsSettings
from pipeline.config.providers import (
    CommitterSettings,
    ProviderSettings,
    SigningFormat,
    SigningSettings,
    SshSettings,
)
from pipeline.config.references import KnownHostsReference, KubeconfigSecretReference, SecretReference
from pipeline.config.settings import Settings, shares_folder
from pipeline.config.targets import (
    CommitMessageSettings,
    EncryptionSettings,
    KustomizeRender,
    KustomizeSettings,
    PlacementSettings,
    TargetSettings,
    WatchRule,
)

__all__ = [
    "CLUSTER_DEFAULTS",
    "ENV_PREFIX",
    "NAMESPACE_PLACEHOLDER",
    "AdmissionSettings",
    "AttributionSettings",
    "AuditRoute",
    "AuditSettings",
    "AuditTls",
    "BootstrapServers",
    "ClusterSettings",
    "CommitMessageSettings",
    "CommitterSettings",
    "Compression",
    "ConfigError",
    "CustomResourceSettings",
    "EncryptionSettings",
    "HostPort",
    "KnownHostsReference",
    "KubeconfigSecretReference",
    "KustomizeRender",
    "KustomizeSettings",
    "LagSettings",
    "LagThreshold",
    "LogBackend",
    "LogSettings",
    "MetricsSettings",
    "PlacementSettings",
    "ProviderSettings",
    "SaslSettings",
    "SecretReference",
    "Settings",
    "SigningFormat",
    "SigningSettings",
    "SshSettings",
    "TargetSettings",
    "TenantGrant",
    "TlsSettings",
    "TopicSettings",
    "WatchRule",
    "check_bootstrap_servers",
    "load_settings",
    "revalidate",
    "shares_folder",
    "split_host_port",
]
