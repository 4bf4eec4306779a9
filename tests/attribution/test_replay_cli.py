"""`reverser replay facts` rebuilds the index from the fact topic and reports what it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.codec import FACT_BATCH, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.api import PendingRecord
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key


async def publish(settings: Settings, batches: list[FactBatch]) -> None:
    log = open_log(settings)
    await log.start()
    try:
        await log.create_topics(topic_specs(settings))
        fact_codec = codec(FACT_BATCH)
        await log.append_many(
            TopicNames.for_prefix(settings.log.topic_prefix).audit_facts,
            [
                PendingRecord(
                    fact_codec.encode(batch.to_avro()),
                    key=stream_key(batch.route, batch.group_resource),
                    headers=(fact_codec.header,),
                )
                for batch in batches
            ],
        )
    finally:
        await log.close()


async def test_replay_facts_reports_records_entries_and_streams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(workdir=tmp_path)
    cms = GroupResource("", "configmaps")
    deployments = GroupResource("apps", "deployments")
    await publish(
        settings,
        [
            FactBatch(
                "prod",
                cms,
                [AuthorFact("alice", verb="create", namespace="a", name="x", uid="u1", resource_version="1")],
            ),
            FactBatch(
                "prod",
                deployments,
                [AuthorFact("bob", verb="update", namespace="a", name="w", uid="u2", resource_version="2")],
            ),
            FactBatch("prod", cms, [AuthorFact("", verb="create", name="refused")]),
        ],
    )
    code = await _run_cli(["replay", "facts", "--workdir", str(tmp_path), "--output", "json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records_applied"] == 2
    assert report["records_refused"] == 1
    assert report["gaps"] == 0
    assert report["streams"] == {"prod/apps/deployments": 2, "prod/configmaps": 2}
    assert report["entries"] == 4


async def _run_cli(argv: list[str]) -> int:
    """Run the CLI in a worker thread: it owns its own event loop, as from a shell."""
    import asyncio

    return await asyncio.to_thread(main, argv)
