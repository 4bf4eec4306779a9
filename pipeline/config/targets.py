"""A `targets` entry: where a cluster's resources land, which ones, and how they are written
(rules, encryption, messages, placement, kustomize rendering)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from pipeline.authormode import AttributionMode
from pipeline.config.references import SecretReference
from pipeline.config.section import DNS_LABEL, Section, closed_set
from pipeline.gitnames import check_branch_name, normalize_target_path
from pipeline.gotemplate.commitdata import GoTemplateError, MessageKind
from pipeline.gotemplate.commitdata import check as check_go_template
from pipeline.msgtemplate import check_template
from pipeline.operation import Operation
from pipeline.placement import NO_PLACEMENT, Placement, PlacementError, compile_placement
from pipeline.prune import Prune


class WatchRule(Section):
    """Resources (`resource` or `group/resource`) to mirror, in some namespaces or cluster-wide."""

    resources: list[Annotated[str, Field(pattern=r"^(\*|[a-z0-9.-]+)(/(\*|[a-z0-9.-]+))?$|^/\*$")]] = Field(
        min_length=1
    )
    """Resources to mirror, as `resource` or `group/resource`; or a pattern: `*` (every resource of
    every group), `group/*` (`/*`: the core group), `*/resource` (that resource in every group)."""
    namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = []
    """Namespaces to mirror them in; empty with cluster_wide: every namespace."""
    cluster_wide: bool = False
    """Mirror cluster-scoped resources, or namespaced ones in every namespace."""
    label_selector: str = ""
    """Kubernetes label selector the objects must match; empty: all."""
    operations: list[Annotated[Operation, closed_set(Operation)]] = []
    """Which changes of these resources reach Git (CREATE adds a file, UPDATE changes one, DELETE
    removes one, whether seen as a watch event or inferred from a snapshot); empty: all."""
    versions: list[Annotated[str, Field(pattern=r"^v[0-9]+((alpha|beta)[0-9]+)?$")]] = []
    """API versions to watch these resources at, in order of preference: the first one their
    group serves is watched (files carry that apiVersion); empty: the group's preferred version."""

    @model_validator(mode="after")
    def _one_scope(self) -> WatchRule:
        if self.cluster_wide and self.namespaces:
            raise ValueError("give either namespaces or cluster_wide, not both")
        return self


class EncryptionSettings(Section):
    """SOPS + age encryption of a target's Secrets and other sensitive resources (docs/secrets.md).

    Recipients come from `age_recipients`, or from the creation rules of `sops_config` (a copy of the
    repository's `.sops.yaml`). The digest key (from the environment, never this file) keys the
    content digest that lets unchanged Secrets produce no commit.
    """

    age_recipients: list[Annotated[str, Field(pattern=r"^age1[02-9ac-hj-np-z]{58}$")]] = []
    """age public keys the SOPS files are encrypted to."""
    sops_config: Path | None = None
    """A .sops.yaml to use instead of age_recipients."""
    digest_key_env: str = "REVERSER_SECRETS_DIGEST_KEY"
    """Environment variable holding the key of the content digests of sealed objects."""
    sensitive_resources: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9.-]+(/[A-Za-z0-9.-]+)?$")]] = []
    """Resources encrypted besides Secrets, as `resource` or `group/resource`."""
    age_key_secret: SecretReference | None = None
    """A Secret of `*.agekey` entries (age private keys, as Flux keeps them) whose public keys are
    added to age_recipients by the configuration controller (custom resources only); the private
    keys are never on the log."""
    generate_age_key: bool = False
    """Let the configuration controller create age_key_secret (one dated `*.agekey` entry) when it
    does not exist or holds no `*.agekey` entry."""

    @model_validator(mode="after")
    def _some_recipient(self) -> EncryptionSettings:
        if not self.age_recipients and self.sops_config is None and self.age_key_secret is None:
            raise ValueError("encryption needs age_recipients, sops_config or age_key_secret")
        if self.generate_age_key and self.age_key_secret is None:
            raise ValueError("generate_age_key needs age_key_secret")
        return self


class CommitMessageSettings(Section):
    """A target's commit message templates (docs/commit-worker.md, Messages).

    `subject`/`body` in `${variable}` syntax: `${operation}`, `${resource}`, `${api_version}`,
    `${namespace}`, `${name}`, `${author}`, `${count}`, `${target}` and `${objects}` (one line per
    object). Or gitops-reverser's Go templates, which write the whole message: `event_template`
    (a window of one object), `group_template` (several) and `reconcile_template` (a snapshot),
    with GR's variables. The `Reverser-*` trailers are always appended by the worker and cannot
    be written by a template.
    """

    subject: str | None = None
    """Subject line template; none: the built-in subject."""
    body: str | None = None
    """Body template; none: the built-in body."""
    event_template: str | None = None
    """Go text/template for a window of one object (GR's `eventTemplate`); none: the built-in message."""
    group_template: str | None = None
    """Go text/template for a window of several objects (GR's `groupTemplate`); none: built-in."""
    reconcile_template: str | None = None
    """Go text/template for a snapshot's commit (GR's `reconcileTemplate`); none: built-in."""

    @field_validator("subject", "body")
    @classmethod
    def _known_variables(cls, text: str | None) -> str | None:
        return None if text is None else check_template(text)

    @field_validator("event_template", "group_template", "reconcile_template")
    @classmethod
    def _go_template(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is None:
            return None
        try:
            return check_go_template(MessageKind(str(info.field_name).removesuffix("_template")), text)
        except GoTemplateError as exc:
            raise ValueError(f"Go template: {exc}") from None

    @model_validator(mode="after")
    def _one_style(self) -> CommitMessageSettings:
        if (self.subject is not None or self.body is not None) and (
            self.event_template is not None or self.group_template is not None
        ):
            raise ValueError(
                "subject/body and event_template/group_template both write a window's message; keep one"
            )
        return self


class PlacementSettings(Section):
    """gitops-reverser's `placement`: where the file of a new object goes in the target folder
    (an object that already has a home file is edited there; docs/intent.md)."""

    by_type: dict[str, str] = {}
    """Path template per type, keyed `group/version/resource` (`v1/configmaps` for the core group),
    e.g. `{namespace}/{resource}/{name}.yaml`."""
    default: str | None = None
    """Path template for the types `by_type` does not name; none: beside the folder's single
    kustomization, else the canonical path."""
    _compiled: Placement = PrivateAttr(default=NO_PLACEMENT)

    @model_validator(mode="after")
    def _compile(self) -> PlacementSettings:
        try:
            self._compiled = compile_placement(self.by_type, self.default, fields=("by_type", "default"))
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def compiled(self) -> Placement:
        """The templates, parsed and checked (`pipeline.placement`)."""
        return self._compiled


class KustomizeRender(StrEnum):
    """Whether the commit worker runs `kustomize build` on the folders an edit touches."""

    ON = "on"
    OFF = "off"


class KustomizeSettings(Section):
    """The real `kustomize build` of every kustomization an in-place edit touches, before and after:
    the edit is committed only when the rendering changes exactly as the cluster did
    (docs/commit-worker.md)."""

    render: Annotated[KustomizeRender, closed_set(KustomizeRender)] = KustomizeRender.OFF
    """on: render before and after each edit of a kustomize folder and refuse one that renders
    otherwise (RenderMismatch) or cannot be rendered (RenderFailed); off: edit without rendering."""
    binary: str = "kustomize"
    """The kustomize executable: a path, or a name looked up on PATH."""
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    """How long one `kustomize build` may take before the edit is refused (RenderFailed)."""

    @field_validator("render", mode="before")
    @classmethod
    def _yaml_switch(cls, render: Any) -> Any:
        """YAML 1.1 reads a bare `on`/`off` as a boolean; it means the same here."""
        if isinstance(render, bool):
            return KustomizeRender.ON if render else KustomizeRender.OFF
        return render


class TargetSettings(Section):
    """Where one cluster's resources land: a path on a branch of a provider."""

    name: str
    """The target's name (unique)."""
    provider: str
    """The provider whose remote this target writes to."""
    branch: str | None = None
    """Branch on the remote; none: the provider's default_branch."""
    path: str = "."
    """Folder on the branch the cluster's objects are written under."""
    cluster: str = "default"
    """The source cluster this target mirrors."""
    prune: Annotated[Prune, closed_set(Prune)] = Prune.ON_EVENT
    """When objects that no longer exist are removed from the branch: Never, OnEvent (deletions only) or
    Always (also after a snapshot)."""
    commit_window_s: float | None = Field(default=None, ge=0)
    """Overrides the provider's commit_window_s for this target."""
    rules: list[WatchRule] = []
    """Which resources of the cluster are mirrored."""
    encryption: EncryptionSettings | None = None
    """SOPS encryption of Secrets and other sensitive resources; none: they are not written."""
    commit_message: CommitMessageSettings | None = None
    """Commit message templates; none: the built-in messages."""
    attribution: AttributionMode | None = None
    """Overrides its cluster's attribution mode for this target; none: the cluster's."""
    placement: PlacementSettings | None = None
    """Where new objects' files go (gitops-reverser's `spec.placement`); none: beside the folder's
    single kustomization, else the canonical path."""
    kustomize: KustomizeSettings = KustomizeSettings()
    """Rendering kustomize folders before and after an in-place edit."""

    @property
    def placement_policy(self) -> Placement:
        """The compiled `placement` (no templates when it is not set)."""
        return self.placement.compiled if self.placement is not None else NO_PLACEMENT

    @field_validator("branch")
    @classmethod
    def _branch_name(cls, branch: str | None) -> str | None:
        return None if branch is None else check_branch_name(branch)

    @model_validator(mode="after")
    def _sensitive_placement(self) -> TargetSettings:
        """No placement template may bundle objects of the target's sensitive types: their SOPS
        documents each need a file of their own (`Placement.check_sensitive`)."""
        if self.placement is None or self.encryption is None:
            return self
        # `group/resource` or `resource`, as `pipeline.models.GroupResource.parse` reads them
        extra = [entry.strip().lower().rpartition("/") for entry in self.encryption.sensitive_resources]
        try:
            self.placement.compiled.check_sensitive(
                ((group, resource) for group, _, resource in extra),
                ("placement.by_type", "placement.default"),
            )
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("path")
    @classmethod
    def _safe_path(cls, path: str) -> str:
        normalize_target_path(path)
        return path
