"""The real `kustomize build` of every render root an in-place edit touches, before and after.

An edit to a file kustomize renders is right only if the folder renders as the cluster changed
(`pipeline.intent.render` decides that from the two outputs). This module is the I/O around that
decision: it finds the render roots (kustomizations no other kustomization lists) that reach a
written file, writes the folder's files as they are and as the edit leaves them into two scratch
trees, and runs the configured kustomize binary on each root in both.

kustomize runs as users run it by default (no plugins, no exec functions, no Helm, root-only
loading), with a scratch `HOME` so no plugin directory is found, proxies pointing at a closed port
so nothing is fetched, and a timeout. Remote bases never get this far: the intent layer refuses
them by name before anything is planned. A binary that is missing, a build that fails or times
out is `RenderFailed`, naming the binary or the root; a render that moves otherwise than the
cluster did is `RenderMismatch`. Either way nothing is written.

The check is blocking (a subprocess per root and tree); the branch worker runs the commit that
calls it on a thread (`BranchWorker._commit`), so the event loop keeps serving other branches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.commit import metrics
from pipeline.commit.inplace import LiveChange
from pipeline.config import KustomizeRender, KustomizeSettings
from pipeline.intent.documents import IntentRefusal, RefusalReason
from pipeline.intent.homes import FolderIndex, HomeIndex, ObjectKey
from pipeline.intent.plan import FileWrite
from pipeline.intent.render import render_verdict, rendered_objects

__all__ = ["RenderCheck", "build_argv", "render_roots"]

#: kustomize reads nothing from the network here; a proxy on a port nothing listens on makes any
#: fetch that slipped past the intent layer's refusal fail at once instead of reaching out.
_NO_NETWORK = "http://127.0.0.1:9"
_STDERR_CHARS = 300


def _reach(index: HomeIndex, directory: str, seen: frozenset[str]) -> Iterable[str]:
    """Every file the kustomization in `directory` renders from: itself, its patches, its
    resources, and what the kustomizations it lists reach."""
    kustomization = index.kustomizations[directory]
    yield kustomization.path
    yield from kustomization.patch_files
    for entry in kustomization.resources:
        if entry in index.kustomizations and entry not in seen:
            yield from _reach(index, entry, seen | {entry})
        else:
            yield entry


def render_roots(index: HomeIndex, written: Iterable[str]) -> list[str]:
    """The directories of the render roots whose rendering reads one of the `written` paths."""
    paths = set(written)
    listed = {entry for k in index.kustomizations.values() for entry in k.resources}
    roots = sorted(d for d in index.kustomizations if d not in listed)
    return [root for root in roots if paths.intersection(_reach(index, root, frozenset({root})))]


def build_argv(binary: str, folder: Path) -> list[str]:
    """`kustomize build` of `folder`: an absolute scratch path, after `--` all the same (a folder
    of the user's repository may be called anything, `-o` included)."""
    return [binary, "build", "--", str(folder.absolute())]


def _describe(root: str) -> str:
    return root or "."


class RenderCheck:
    """A target's `kustomize` settings, applied to one planned edit at a time."""

    __slots__ = ("_settings", "_target")

    def __init__(self, settings: KustomizeSettings, target: str = "") -> None:
        self._settings = settings
        self._target = target

    @property
    def enabled(self) -> bool:
        return self._settings.render is KustomizeRender.ON

    def verify(self, folder: FolderIndex, writes: tuple[FileWrite, ...], change: LiveChange) -> None:
        """Nothing when every render root that reads a written file renders as `change` says (or no
        root reads one); raises IntentRefusal otherwise. `folder` is still as it was before the
        edit."""
        if not self.enabled or not writes:
            return
        roots = render_roots(folder.index, (w.path for w in writes))
        if not roots:
            return
        binary = self._binary()
        after = dict(folder.files)
        for write in writes:
            if write.data is None:
                after.pop(write.path, None)
            else:
                after[write.path] = write.data
        with tempfile.TemporaryDirectory(prefix="reverser-kustomize-") as scratch:
            base = Path(scratch)
            _write_tree(base / "before", folder.files)
            _write_tree(base / "after", after)
            for root in roots:
                try:
                    before_out = self._build(binary, base, "before", root, "before the edit")
                    after_out = self._build(binary, base, "after", root, "after the edit")
                    _judge(root, rendered_objects(before_out), rendered_objects(after_out), change)
                except IntentRefusal as refusal:
                    # the root's kustomization is the file the status names
                    refusal.path = refusal.path or folder.index.kustomizations[root].path
                    raise

    def _binary(self) -> str:
        configured = self._settings.binary
        found = shutil.which(configured)
        if found is None:
            raise IntentRefusal(
                RefusalReason.RENDER_FAILED,
                f"the kustomize binary {configured!r} (targets[].kustomize.binary) is not an executable "
                "file or on PATH; render is on, so no kustomize folder is edited unchecked",
            )
        return found

    def _build(self, binary: str, base: Path, tree: str, root: str, when: str) -> str:
        home = base / "home"
        home.mkdir(exist_ok=True)
        env = {
            "PATH": os.defpath,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home),
            "KUSTOMIZE_PLUGIN_HOME": str(home / "no-plugins"),
            "HTTP_PROXY": _NO_NETWORK,
            "HTTPS_PROXY": _NO_NETWORK,
            "ALL_PROXY": _NO_NETWORK,
            "NO_PROXY": "",
            "GIT_TERMINAL_PROMPT": "0",
        }
        folder = base / tree / root if root else base / tree
        started = time.monotonic()
        try:
            result = subprocess.run(
                build_argv(binary, folder),
                capture_output=True,
                text=True,
                env=env,
                timeout=self._settings.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self._observe(metrics.BuildOutcome.TIMEOUT, started)
            raise IntentRefusal(
                RefusalReason.RENDER_FAILED,
                f"kustomize build {_describe(root)} {when} took longer than "
                f"{self._settings.timeout_s:g}s (targets[].kustomize.timeout_s)",
            ) from None
        except OSError as exc:
            raise IntentRefusal(
                RefusalReason.RENDER_FAILED, f"cannot run the kustomize binary {binary!r}: {exc.strerror}"
            ) from None
        self._observe(
            metrics.BuildOutcome.OK if result.returncode == 0 else metrics.BuildOutcome.FAILED, started
        )
        if result.returncode != 0:
            detail = result.stderr.replace(str(base / tree) + "/", "").strip()[:_STDERR_CHARS]
            raise IntentRefusal(
                RefusalReason.RENDER_FAILED,
                f"kustomize build {_describe(root)} fails {when}: {detail}",
            )
        return result.stdout

    def _observe(self, outcome: metrics.BuildOutcome, started: float) -> None:
        metrics.KUSTOMIZE_BUILDS.labels(self._target, outcome).inc()
        metrics.KUSTOMIZE_BUILD_SECONDS.labels(self._target).observe(time.monotonic() - started)


def _write_tree(root: Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _judge(
    root: str, before: Mapping[ObjectKey, Any], after: Mapping[ObjectKey, Any], change: LiveChange
) -> None:
    """A root that renders the changed object must move as the cluster did; any other root
    must not move at all (an overlay of another environment, a root the object is not in)."""
    key = _rendered_key(change.key, before, after)
    if key is None:
        if before != after:
            raise IntentRefusal(
                RefusalReason.RENDER_MISMATCH,
                f"the edit changes the rendering of {_describe(root)}, which does not render "
                f"{change.key.kind} {change.key.namespace}/{change.key.name}",
            )
        return
    refusal = render_verdict(before, after, key, (change.before, change.after))
    if refusal is not None:
        raise IntentRefusal(refusal.reason, f"kustomize build {_describe(root)}: {refusal.detail}")


def _rendered_key(
    key: ObjectKey, before: Mapping[ObjectKey, Any], after: Mapping[ObjectKey, Any]
) -> ObjectKey | None:
    """The changed object as this root renders it, or None when the root does not render it.

    A cluster-scoped object, or a document the namespace of which comes from whatever applies
    the folder (Flux's `targetNamespace`), renders without one."""
    for candidate in (key, ObjectKey(key.group, key.kind, "", key.name)):
        if candidate in before or candidate in after:
            return candidate
    return None
