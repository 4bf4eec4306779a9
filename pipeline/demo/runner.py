"""Runs the bundled recording through the real stages on the embedded log and a local Git remote."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import subprocess
import time
from pathlib import Path

import aiohttp
import pyrage
import yaml

from pipeline.commit.git.sshremote import write_private_file
from pipeline.config import (
    AuditSettings,
    EncryptionSettings,
    LogBackend,
    LogSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.demo.recording import (
    AuditStep,
    Recording,
    WatchRecordBuilder,
    WatchStep,
    group_resource_of,
)
from pipeline.log.api import Log, TopicPartition
from pipeline.log.topics import TopicNames
from pipeline.models import GroupResource
from pipeline.sealing import Sealer, sealer_for

logger = logging.getLogger(__name__)

PROVIDER = "demo"
TARGET = "shop"
STEP_PAUSE_S = 0.15
CATCH_UP_TIMEOUT_S = 120.0
#: The running demo's lag monitor refreshes this often, so the Burrow API it prints answers with
#: the demo's groups seconds after the replay, not half a minute later.
LAG_POLL_INTERVAL_S = 2.0


DEMO_RESOURCES = ("configmaps", "apps/deployments")
#: The API discovery of the recorded cluster (`write_demo_discovery`).
DISCOVERY = Path(__file__).with_name("discovery.yaml")
DEMO_SECRET = "clusters/default/shop/secrets/payment-gateway.sops.yaml"


def demo_age_key(workdir: Path) -> tuple[Path, str]:
    """The demo's age identity file (made once in the workdir) and its recipient."""
    key_file = workdir.resolve() / "demo" / "age.key"
    if not key_file.exists():
        write_private_file(key_file, str(pyrage.x25519.Identity.generate()))
    identity = pyrage.x25519.Identity.from_str(key_file.read_text(encoding="ascii").strip())
    return key_file, str(identity.to_public())


def demo_digest_key(workdir: Path) -> str:
    """The demo's secret digest key (made once in the workdir, like an operator's env variable)."""
    key_file = workdir.resolve() / "demo" / "digest.key"
    if not key_file.exists():
        write_private_file(key_file, secrets.token_hex(32))
    return key_file.read_text(encoding="ascii").strip()


def demo_settings(base: Settings) -> Settings:
    """The base settings plus a provider (a bare repo in the workdir) and one target whose Secrets
    are encrypted to the demo's age key."""
    workdir = base.workdir.resolve()
    _, recipient = demo_age_key(workdir)
    remote = workdir / "demo" / "remote.git"
    return base.model_copy(
        update={
            "workdir": workdir,
            "log": LogSettings(backend=LogBackend.EMBEDDED, topic_prefix=base.log.topic_prefix, fsync=False),
            "audit": AuditSettings(addr=base.audit.addr, allow_plain_http=True),
            "lag": base.lag.model_copy(update={"poll_interval_s": LAG_POLL_INTERVAL_S}),
            "providers": [
                ProviderSettings(
                    name=PROVIDER,
                    url=str(remote),
                    default_branch="main",
                    commit_window_s=1.0,
                    push_cooldown_s=0.0,
                )
            ],
            "targets": [
                TargetSettings(
                    name=TARGET,
                    provider=PROVIDER,
                    path="clusters/default",
                    cluster="default",
                    rules=[WatchRule(resources=[*DEMO_RESOURCES, "secrets"], namespaces=["shop"])],
                    encryption=EncryptionSettings(age_recipients=[recipient]),
                )
            ],
        }
    )


def write_demo_config(settings: Settings) -> Path:
    """The demo's settings as a configuration file in its workdir, so the other commands can be
    pointed at the demo's log and remote with `--config` (only what differs from the defaults)."""
    path = settings.workdir / "demo" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = settings.model_dump(mode="json", exclude_defaults=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def write_demo_discovery(settings: Settings) -> Path:
    """The recorded cluster's API discovery beside the configuration, for `reverser watch-rules
    --discovery`: the demo has no apiserver to ask which resources its rules name."""
    path = settings.workdir / "demo" / "discovery.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DISCOVERY.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def ensure_bare_remote(path: Path) -> None:
    if not (path / "HEAD").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "init", "--quiet", "--bare", "--initial-branch=main", "--end-of-options", str(path)],
            check=True,
        )


async def _payload(step: WatchStep, sealer: Sealer) -> bytes | None:
    """A sensitive object's sealed document, as the watch stage writes it (None: the plain JSON)."""
    gr, _ = group_resource_of(step.obj)
    if not sealer.applies_to(gr):
        return None
    clean = sanitize(step.obj)
    return await sealer.seal(clean, sanitized_json(clean), gr)


async def replay_recording(log_: Log, settings: Settings, recording: Recording, audit_url: str) -> None:
    """Append the snapshot and watch steps (Secrets sealed); POST the audit steps to the webhook."""
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    target = settings.targets[0]
    assert target.encryption is not None
    sealer = sealer_for(target, {target.encryption.digest_key_env: demo_digest_key(settings.workdir)})
    assert sealer is not None
    builder = WatchRecordBuilder(recording.cluster, recording.cluster, TARGET, recording.namespace)
    epoch = int(time.time() * 1000)
    by_type: dict[tuple[GroupResource, str], list[dict[str, object]]] = {
        (GroupResource("", "configmaps"), "v1"): [],
        (GroupResource("apps", "deployments"), "v1"): [],
    }
    for obj in recording.snapshot:
        by_type[group_resource_of(obj)].append(obj)
    for (gr, version), objects in by_type.items():
        await log_.append_many(
            topics.watch_events, builder.snapshot(gr, version, epoch, recording.snapshot_rv, objects)
        )
    async with aiohttp.ClientSession() as session:
        for step in recording.steps:
            if isinstance(step, AuditStep):
                body = json.dumps(step.event_list).encode()
                async with session.post(
                    audit_url, data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    if response.status != 200:
                        raise RuntimeError(
                            f"audit webhook answered {response.status}: {await response.text()}"
                        )
            else:
                record = builder.live(step, await _payload(step, sealer))
                await log_.append(topics.watch_events, record.value, key=record.key, headers=record.headers)
            await asyncio.sleep(STEP_PAUSE_S)


async def wait_until_committed(log_: Log, settings: Settings, timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
    """Wait until every consumer group has committed up to the end of the topics it reads."""
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    watched = {topics.watch_events, topics.branch_work}
    deadline = time.monotonic() + timeout_s
    while True:
        caught_up = await _groups_caught_up(log_, watched)
        if caught_up:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pipeline did not catch up within {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


async def _groups_caught_up(log_: Log, topics: set[str]) -> bool:
    ends: dict[TopicPartition, int] = {}
    for topic in topics:
        partitions = await log_.partitions_for(topic)
        ends.update(await log_.end_offsets([TopicPartition(topic, p) for p in range(partitions)]))
    readers: set[str] = set()
    for group in await log_.list_groups():
        committed = await log_.group_offsets(group)
        for tp, end in ends.items():
            if tp in committed:
                readers.add(tp.topic)
                if committed[tp] < end:
                    return False
    busy = {tp.topic for tp, end in ends.items() if end > 0}
    return busy <= readers


async def already_replayed(log_: Log, settings: Settings) -> bool:
    """A restart on the same workdir resumes the pipeline instead of replaying the story twice."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
    partitions = await log_.partitions_for(topic)
    ends = await log_.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return any(end > 0 for end in ends.values())


def git_history(remote: Path) -> str:
    """The attributed history of the demo branch, oldest first, with the pipeline's trailers."""
    result = subprocess.run(
        [
            "git",
            f"--git-dir={remote}",
            "log",
            "--reverse",
            "main",
            "--format=%h%x00%an <%ae>%x00%s%x00%(trailers:only,unfold)%x1e",
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return f"(no history: {result.stderr.strip()})"
    lines: list[str] = []
    for entry in filter(None, (chunk.strip() for chunk in result.stdout.split("\x1e"))):
        sha, author, subject, trailers = entry.split("\x00")
        lines.append(f"{sha}  {author}")
        lines.append(f"    {subject}")
        lines.extend(f"    {trailer}" for trailer in trailers.splitlines() if trailer)
        lines.append("")
    return "\n".join(lines)
