"""Where a new object's file goes: the target's `placement` templates, then the folder's root.

Placement runs only for an object that has no home yet; an object with a home is always edited
where it is. The order, as gitops-reverser resolves it:

1. `byType["{group}/{version}/{resource}"]` (core types without the group: `v1/configmaps`);
2. `default`;
3. the folder's single kustomization that the pipeline models, if there is exactly one and it
   renders the object in its own namespace (it sets none, or the object's): beside it, as
   `{kind}-{name}.yaml` in lower case, so kustomize renders the new file (an object of another
   namespace placed there would be rendered into the kustomization's);
4. otherwise nothing here: the caller writes today's canonical path.

The templates themselves (their variables and checks) are `pipeline.placement`'s, below the
configuration that compiles them; this module adds the step only the folder's index can answer.
"""

from __future__ import annotations

import posixpath

from pipeline.intent.homes import HomeIndex
from pipeline.placement import PlacedObject, Placement, PlacementSource

__all__ = ["resolve"]


def resolve(
    policy: Placement, obj: PlacedObject, index: HomeIndex, target_path: str
) -> tuple[str, PlacementSource] | None:
    """The repository path of a new object and the step that chose it, or None for the canonical
    path. Raises PlacementError for a sensitive object a template could bundle."""
    chosen = policy.choose(obj)
    if chosen is not None:
        path, source = chosen
        return (f"{target_path}/{path}" if target_path else path), source
    if len(index.kustomizations) == 1 and not index.refused_kustomizations:
        root = next(iter(index.kustomizations.values()))
        if root.namespace not in ("", obj.namespace):
            return None
        name = f"{obj.kind.lower()}-{obj.name}.yaml"
        path = posixpath.join(root.directory, name) if root.directory else name
        return path, PlacementSource.KUSTOMIZE_ROOT
    return None
