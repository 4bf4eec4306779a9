"""Branch-work builders and Git inspection helpers for the commit-worker tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from pipeline.codec.branch_work import (
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    ResyncObject,
    WorkAuthor,
    WorkItem,
    Write,
)
from pipeline.codec.stream_id import StreamId

ALICE = WorkAuthor("RESOLVED", "alice@example.com", "Alice Example", "alice@example.com", "exact", "user")
BOB = WorkAuthor("RESOLVED", "bob", "Bob", "not-an-email", "collection", "user")
NOBODY = WorkAuthor("UNRESOLVED", tier="absent")
CONFIGURED = WorkAuthor("NOT_ATTEMPTED", tier="none")


def cm(name: str, namespace: str = "team-a", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data or {"key": "value"},
    }


class Work:
    """Builds consecutive work items for one (provider, branch) FIFO with increasing offsets."""

    def __init__(
        self,
        provider: str = "git",
        branch: str = "main",
        target: str = "t1",
        path: str = "live",
        partition: int = 0,
        start: int = 0,
        step_ms: int = 1000,
    ) -> None:
        self.provider = provider
        self.branch = branch
        self.target = target
        self.path = path
        self.partition = partition
        self.offset = start
        self.observed_ms = 1_767_000_000_000
        self.step_ms = step_ms

    def _item(
        self,
        body: Any,
        *,
        target: str | None = None,
        path: str | None = None,
        group: str = "",
        version: str = "v1",
        resource: str = "configmaps",
        scope: str = "team-a",
    ) -> WorkItem:
        item = WorkItem(
            partition=self.partition,
            offset=self.offset,
            provider=self.provider,
            branch=self.branch,
            path=self.path if path is None else path,
            stream=StreamId(target or self.target, "default", group, version, resource, scope),
            observed_at_ms=self.observed_ms,
            body=body,
        )
        self.offset += 1
        self.observed_ms += self.step_ms
        return item

    def write(
        self,
        op: str,
        obj: dict[str, Any] | None,
        author: WorkAuthor = ALICE,
        *,
        name: str | None = None,
        namespace: str = "team-a",
        rv: str = "1",
        **kw: Any,
    ) -> WorkItem:
        meta = (obj or {}).get("metadata", {})
        return self._item(
            Write(
                operation=op,
                namespace=meta.get("namespace", namespace),
                name=name or meta["name"],
                uid="uid-" + (name or meta["name"]),
                resource_version=rv,
                object_json=None if obj is None else json.dumps(obj).encode(),
                author=author,
            ),
            **kw,
        )

    def create(self, obj: dict[str, Any], author: WorkAuthor = ALICE, **kw: Any) -> WorkItem:
        return self.write("CREATE", obj, author, **kw)

    def update(self, obj: dict[str, Any], author: WorkAuthor = ALICE, **kw: Any) -> WorkItem:
        return self.write("UPDATE", obj, author, **kw)

    def delete(self, name: str, author: WorkAuthor = ALICE, namespace: str = "team-a", **kw: Any) -> WorkItem:
        return self.write("DELETE", None, author, name=name, namespace=namespace, **kw)

    def snapshot(
        self,
        epoch: int,
        objs: list[dict[str, Any]],
        rv: str = "100",
        chunk_size: int = 2,
        object_rvs: dict[str, str] | None = None,
        **kw: Any,
    ) -> list[WorkItem]:
        items = [self._item(ResyncBegin(epoch, rv), **kw)]
        chunks = [objs[i : i + chunk_size] for i in range(0, len(objs), chunk_size)]
        for seq, chunk in enumerate(chunks):
            objects = tuple(
                ResyncObject(
                    o["metadata"].get("namespace", ""),
                    o["metadata"]["name"],
                    "u",
                    (object_rvs or {}).get(o["metadata"]["name"], "1"),
                    json.dumps(o).encode(),
                )
                for o in chunk
            )
            items.append(self._item(ResyncChunk(epoch, seq, objects), **kw))
        items.append(self._item(ResyncEnd(epoch, len(chunks), len(objs), rv), **kw))
        return items


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def bare_remote(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def log_lines(remote: Path, branch: str = "main", fmt: str = "%an <%ae>|%cn|%s") -> list[str]:
    """The branch history, oldest first."""
    out = git(remote, "log", "--reverse", f"--format={fmt}", branch)
    return [line for line in out.splitlines() if line]


def files(remote: Path, branch: str = "main") -> dict[str, str]:
    """Every file on the branch tip with its content."""
    names = git(remote, "ls-tree", "-r", "--name-only", branch).split()
    return {name: git(remote, "show", f"{branch}:{name}") for name in names}


def foreign_push(remote: Path, workdir: Path, path: str, content: str, branch: str = "main") -> None:
    """Somebody else commits a file to the branch through a normal clone."""
    clone = workdir / "foreign"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    git(clone, "fetch", "-q", "origin")
    if git(clone, "branch", "-r", "--list", f"origin/{branch}").strip():
        git(clone, "checkout", "-q", "-B", branch, f"origin/{branch}")
    else:
        git(clone, "checkout", "-q", "--orphan", branch)
    target = clone / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    git(clone, "add", path)
    git(
        clone,
        "-c",
        "user.name=Human",
        "-c",
        "user.email=human@example.com",
        "commit",
        "-q",
        "-m",
        f"human edit {path}",
    )
    git(clone, "push", "-q", "origin", f"HEAD:{branch}")


def replay_argv(config: Path, *extra: str) -> list[str]:
    """`reverser replay branch` of provider `git`, branch `main`, with the config file and `extra`."""
    return ["replay", "branch", "--config", str(config), "--provider", "git", "--branch", "main", *extra]
