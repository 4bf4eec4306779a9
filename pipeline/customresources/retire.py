"""What a deleted GitTarget leaves on its branch: the `TargetDeleted` work the controller publishes.

A target that leaves the configuration because its GitTarget object was deleted gets one
`TargetDeleted` record on `<prefix>.branch-work`, keyed by its (provider, branch) like the rest of
its work, written in the same transaction as the configuration version without it. The branch's
commit worker therefore learns of the deletion in log order, after every record routed for the
target before, on whichever replica owns the branch, and a redelivery repeats the same decision.

The decision is taken here, once, from the two configurations:

- only a deleted object counts: a target left out because its GitTarget became invalid (or its
  provider did) keeps its files, since a typo must never empty a folder;
- the files are removed only under prune `Always`, and only when no target of the new version
  writes the same or a nested folder of that branch (a GitTarget deleted and re-created under
  another name in one change keeps its folder); `Never` and `OnEvent` leave them;
- a target whose provider is gone too gets no record: nothing could push it.

The static file goes through the same rules (`retired_work`): a target a reload (SIGHUP) no longer
finds in the file was removed on purpose (an invalid file changes nothing), so the reloading
process appends its `TargetDeleted` (configuration version 0) once the stages run without it.
"""

from __future__ import annotations

from pipeline.codec.branch_work import TargetDeleted, WorkItem
from pipeline.config import Settings, TargetSettings, shares_folder
from pipeline.customresources.compile import CompiledConfig
from pipeline.customresources.objects import Kind, effective_name
from pipeline.prune import Prune

__all__ = ["REMOVING_PRUNE", "deleted_targets", "retired_work"]

#: The prune mode under which a deleted target's documents are removed from its branch.
REMOVING_PRUNE = Prune.ALWAYS


def _deleted_names(before: CompiledConfig, after: CompiledConfig, home_namespace: str) -> set[str]:
    """Targets of `before` whose GitTarget object no longer exists in `after` (not merely invalid)."""
    present = {
        effective_name(ref.namespace, ref.name, home_namespace)
        for ref in after.reports
        if ref.kind is Kind.GIT_TARGET
    }
    return {t.name for t in before.targets} - present


def deleted_targets(
    before: CompiledConfig,
    after: CompiledConfig,
    version: int,
    base: Settings,
    *,
    home_namespace: str,
    observed_at_ms: int,
) -> list[WorkItem]:
    """The `TargetDeleted` work of publishing `after` as `version` over `before` (pure).

    `base` is the static file (clusters, log); each configuration is combined with it to resolve
    a target's repository, branch and folder exactly as the rest of the pipeline does.
    """
    gone = _deleted_names(before, after, home_namespace)
    if not gone:
        return []
    return retired_work(
        before.settings(base),
        after.settings(base),
        gone,
        version,
        f"GitTarget {{name}} was deleted (configuration version {version})",
        observed_at_ms=observed_at_ms,
    )


def retired_work(
    old: Settings, new: Settings, gone: set[str], version: int, cause: str, *, observed_at_ms: int
) -> list[WorkItem]:
    """The `TargetDeleted` work of the targets `gone` from `old` to `new` (pure; both modes).

    `cause` is the reason's first sentence, with `{name}` for the target's name. The rules of the
    module's docstring apply: files go only under prune `Always` when no target of `new` writes
    the same or a nested folder, and a target whose provider is gone too gets no record.
    """
    remaining = [new.destination(t) for t in new.targets]
    providers = {p.name for p in new.providers}
    found: list[WorkItem] = []
    for target in old.targets:
        if target.name not in gone or target.provider not in providers:
            continue
        url, branch, path = old.destination(target)
        shared = any(shares_folder((url, branch, path), other) for other in remaining)
        remove = target.prune == REMOVING_PRUNE and not shared
        reason = cause.format(name=target.name)
        if shared and target.prune == REMOVING_PRUNE:
            reason += "; another target now writes its folder"
        found.append(_item(target, branch, version, remove, reason, observed_at_ms))
    return found


def _item(
    target: TargetSettings, branch: str, version: int, remove: bool, reason: str, observed_at_ms: int
) -> WorkItem:
    body = TargetDeleted(target.prune, remove, version, reason)
    return WorkItem.for_target(target, branch, observed_at_ms, body)
