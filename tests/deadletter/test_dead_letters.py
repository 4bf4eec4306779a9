"""Dead letters end to end on both backends: the commit worker parks what it cannot decode or apply,
`reverser dead-letter list|show` says why, and `replay` re-submits a record once, which then becomes
a commit on a real (bare) Git remote after the configuration was fixed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from pipeline.cli import main
from pipeline.codec import BRANCH_WORK, codec
from pipeline.codec.branch_work import Write
from pipeline.codec.dead_letter import REPLAY_HEADER, letter_record
from pipeline.config import CustomResourceSettings, ProviderSettings, Settings
from pipeline.customresources.compile import CompiledConfig
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.state import ConfigState, encode_state
from pipeline.deadletter.book import Book
from pipeline.deadletter.reading import read_book
from pipeline.deadletter.replay import ReplayReport, Selection, replay_letters
from pipeline.exitcodes import ExitCode
from pipeline.log.api import FencedError, Log, Record, TopicPartition
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import branch_key
from tests.commit.helpers import BOB, Work, bare_remote, cm, files, log_lines
from tests.commit.logwork import append_work, commit_all
from tests.commit.test_commit_worker import with_git
from tests.conftest import started_log


def write_config(settings: Settings, path: Path) -> str:
    path.write_text(yaml.safe_dump(settings.model_dump(mode="json")), encoding="utf-8")
    return str(path)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def dead_lettered(reason: str) -> float:
    return REGISTRY.get_sample_value("reverser_commit_dead_lettered_total", {"reason": reason}) or 0.0


async def branch_work_ends(log: Log, settings: Settings) -> dict[TopicPartition, int]:
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    partitions = await log.partitions_for(topic)
    return await log.end_offsets([TopicPartition(topic, p) for p in range(partitions)])


async def run_worker_until_settled(settings: Settings) -> None:
    async with started_log(settings) as log:
        await commit_all(log, settings)


async def append_failures(settings: Settings) -> dict[str, tuple[int, int]]:
    """A good record, an undecodable one, an unappliable one (object JSON not a map), one for a
    provider the configuration lacks, and a good one: returns where each landed."""
    w = Work()
    broken = w.create(cm("broken"))
    assert isinstance(broken.body, Write)
    body = dataclasses.replace(broken.body, object_json=b"[1, 2]")
    async with started_log(settings) as log:
        [before] = await append_work(log, settings, [w.create(cm("before"))])
        topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
        garbage = await log.append(
            topic, b"\x00garbage", key=branch_key("git", "main"), headers=(codec(BRANCH_WORK).header,)
        )
        [unappliable, unknown, after] = await append_work(
            log,
            settings,
            [
                dataclasses.replace(broken, body=body),
                Work(provider="later").create(cm("late"), BOB),
                w.create(cm("after")),
            ],
        )
    return {
        "before": before,
        "garbage": (garbage.partition, garbage.offset),
        "unappliable": unappliable,
        "unknown": unknown,
        "after": after,
    }


def letters_by_class(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for letter in listing["letters"]:
        assert letter["error_class"] not in found, listing
        found[letter["error_class"]] = letter
    return found


def test_failed_work_is_dead_lettered_listed_shown_and_replayed_into_a_commit(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    later_remote = bare_remote(tmp_path / "later.git")
    cfg = with_git(settings, remote)
    config = write_config(cfg, tmp_path / "reverser.yaml")
    branch_work = TopicNames.for_prefix(cfg.log.topic_prefix).branch_work
    where = asyncio.run(append_failures(cfg))
    counts = {r: dead_lettered(r) for r in ("undecodable", "unappliable", "unknown_provider")}

    asyncio.run(run_worker_until_settled(cfg))

    assert sorted(files(remote)) == [
        "live/team-a/configmaps/after.yaml",
        "live/team-a/configmaps/before.yaml",
    ]
    for reason, before in counts.items():
        assert dead_lettered(reason) == before + 1, reason

    code, out, _ = run_cli(capsys, "dead-letter", "list", "--config", config, "--output", "json")
    assert code == 0
    listing = json.loads(out)
    letters = letters_by_class(listing)
    assert sorted(letters) == ["DecodeError", "RenderError", "UnknownProviderError"]
    expected_source = {
        "DecodeError": where["garbage"],
        "RenderError": where["unappliable"],
        "UnknownProviderError": where["unknown"],
    }
    for error_class, (partition, offset) in expected_source.items():
        letter = letters[error_class]
        assert letter["source"] == f"{branch_work}[{partition}]@{offset}"
        assert letter["stage"] == "commit-worker"
        assert letter["attempt"] == 1
        assert letter["replayed"] is False
        assert letter["schema_header"] == f"branch_work/{codec(BRANCH_WORK).current.version}"
    assert letters["RenderError"]["message"] == "object JSON is not a map"
    assert letters["UnknownProviderError"]["message"] == "provider 'later' is not configured"
    assert letters["DecodeError"]["decodes_now"] is False
    assert letters["UnknownProviderError"]["decodes_now"] is True
    assert letters["UnknownProviderError"]["key"] == "later:main"

    code, out, _ = run_cli(capsys, "dead-letter", "list", "--config", config)
    assert code == 0
    table = out.splitlines()
    assert table[0].split() == [
        "OFFSET",
        "PARKED",
        "STAGE",
        "SOURCE",
        "ATTEMPT",
        "ERROR",
        "STATUS",
        "MESSAGE",
    ]
    assert len(table) == 4
    assert all(" pending " in line for line in table[1:])

    render_offset = letters["RenderError"]["offset"]
    code, out, _ = run_cli(capsys, "dead-letter", "show", str(render_offset), "--config", config)
    assert code == 0
    assert f"dead letter {render_offset}" in out
    assert "error:       RenderError: object JSON is not a map" in out
    assert "stage:       commit-worker" in out
    assert "decodes now: yes, with this version's schemas" in out
    assert "status:      pending" in out

    # the fix: the provider the record names is configured now
    fixed = cfg.model_copy(
        update={
            "providers": [
                *cfg.providers,
                ProviderSettings(
                    name="later", url=str(later_remote), commit_window_s=0.2, push_cooldown_s=0.2
                ),
            ]
        }
    )
    fixed_config = write_config(fixed, tmp_path / "fixed.yaml")
    unknown_offset = letters["UnknownProviderError"]["offset"]
    garbage_offset = letters["DecodeError"]["offset"]
    code, out, _ = run_cli(
        capsys, "dead-letter", "replay", str(unknown_offset), str(garbage_offset), "--config", fixed_config
    )
    assert code == 0, out
    replayed_lines = sorted(line for line in out.splitlines() if line.startswith("replayed "))
    assert len(replayed_lines) == 2, out

    async def ends() -> dict[TopicPartition, int]:
        async with started_log(fixed) as log:
            return await branch_work_ends(log, fixed)

    ends_after_replay = asyncio.run(ends())
    code, out, _ = run_cli(capsys, "dead-letter", "replay", str(unknown_offset), "--config", fixed_config)
    assert code == ExitCode.FINDINGS
    partition, offset = where["unknown"]
    assert f"refused {unknown_offset}: {branch_work}[{partition}]@{offset} was already replayed" in out
    assert "nothing was replayed" in out
    assert asyncio.run(ends()) == ends_after_replay
    code, out, _ = run_cli(
        capsys, "dead-letter", "replay", str(unknown_offset), "--force", "--dry-run", "--config", fixed_config
    )
    assert code == 0
    assert out.strip() == f"would replay {unknown_offset}: {branch_work}[{partition}]@{offset}"
    assert asyncio.run(ends()) == ends_after_replay

    asyncio.run(run_worker_until_settled(fixed))

    assert log_lines(later_remote, fmt="%an|%s") == ["Bob|[CREATE] v1/configmaps/late"]
    assert sorted(files(later_remote)) == ["live/team-a/configmaps/late.yaml"]
    code, out, _ = run_cli(capsys, "dead-letter", "list", "--config", fixed_config, "--output", "json")
    listing = json.loads(out)
    assert len(listing["letters"]) == 4
    first, again = (letter for letter in listing["letters"] if letter["error_class"] == "DecodeError")
    assert first["replayed"] is True
    assert first["replayed_from_letter"] == garbage_offset
    # the replayed garbage failed again: a new letter, attempt 2, sourced at the re-submitted copy
    assert again["attempt"] == 2
    assert again["replayed"] is False
    assert again["source"] != first["source"]
    assert again["headers"][REPLAY_HEADER] == f"{garbage_offset}:1"
    [unknown] = (letter for letter in listing["letters"] if letter["error_class"] == "UnknownProviderError")
    assert unknown["replayed"] is True
    assert unknown["replayed_by"]
    code, out, _ = run_cli(
        capsys, "dead-letter", "list", "--pending", "--config", fixed_config, "--output", "json"
    )
    assert sorted(x["error_class"] for x in json.loads(out)["letters"]) == ["DecodeError", "RenderError"]


def test_cli_errors_name_the_argument(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(settings, tmp_path / "reverser.yaml")

    async def create() -> None:
        async with started_log(settings) as log:
            await log.create_topics(topic_specs(settings))

    asyncio.run(create())
    code, out, _ = run_cli(capsys, "dead-letter", "list", "--config", config)
    assert (code, out.strip()) == (0, f"no dead letters on {settings.log.topic_prefix}.dead-letter")
    code, _, err = run_cli(capsys, "dead-letter", "show", "7", "--config", config)
    assert code == ExitCode.USAGE
    assert "OFFSET: no dead letter at offset 7" in err
    code, _, err = run_cli(capsys, "dead-letter", "replay", "--config", config)
    assert code == ExitCode.USAGE
    assert "OFFSET: give the dead-letter offsets to replay, or --all-pending" in err
    code, _, err = run_cli(capsys, "dead-letter", "replay", "3", "--all-pending", "--config", config)
    assert code == ExitCode.USAGE
    assert "--all-pending: give dead-letter offsets or --all-pending, not both" in err
    code, _, err = run_cli(capsys, "dead-letter", "replay", "3", "--stage", "router", "--config", config)
    assert code == ExitCode.USAGE
    assert "--stage/--error-class: filters apply to --all-pending only" in err
    code, out, _ = run_cli(capsys, "dead-letter", "replay", "--all-pending", "--config", config)
    assert (code, out.strip()) == (0, "nothing to replay")
    with pytest.raises(SystemExit) as exited:
        main(["dead-letter", "show", "x1", "--config", config])
    assert exited.value.code == 2
    assert "OFFSET: 'x1' is not an integer" in capsys.readouterr().err


async def test_log_in_use_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The embedded log held by another owner (the running service): exit 3, as `topics` does."""
    settings = Settings(workdir=tmp_path / "work")
    config = write_config(settings, tmp_path / "reverser.yaml")
    async with started_log(settings):
        code = await asyncio.to_thread(main, ["dead-letter", "list", "--config", config])
    assert code == ExitCode.LOG_UNAVAILABLE
    assert "reverser dead-letter list: log unavailable: embedded log at" in capsys.readouterr().err


async def test_two_replays_at_once_resubmit_a_record_once(any_log: Log, settings: Settings) -> None:
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    await any_log.create_topics(topic_specs(settings))
    failed = Record(names.branch_work, 0, 41, 0, b"git/main", b"payload", (("reverser-schema", b"x/1"),))
    letter = letter_record(failed, "commit-worker", ValueError("boom"), 1)
    await any_log.append(names.dead_letter, letter.value, key=letter.key, headers=letter.headers)

    async def replay() -> ReplayReport:
        return await replay_letters(
            any_log, settings.log.topic_prefix, Selection(offsets=(0,)), by="t@h", now_ms=2
        )

    outcomes = await asyncio.gather(replay(), replay(), return_exceptions=True)
    written = [o for o in outcomes if isinstance(o, ReplayReport) and o.written]
    assert len(written) == 1, outcomes
    [other] = [o for o in outcomes if o is not written[0]]
    assert isinstance(other, FencedError) or (isinstance(other, ReplayReport) and other.refused), other
    book = await read_book(any_log, names.dead_letter)
    [entry] = book.entries
    assert entry.replayed is not None
    assert entry.replayed.by == "t@h"
    replayed_to = written[0].replayed[0]
    assert replayed_to.new_offset is not None
    tp = TopicPartition(names.branch_work, replayed_to.partition or 0)
    reader = any_log.reader()
    await reader.assign({tp: 0})
    try:
        fetched = await reader.fetch(timeout_ms=2000)
    finally:
        await reader.close()
    assert [(r.value, r.key, r.header(REPLAY_HEADER)) for r in fetched.records] == [
        (b"payload", b"git/main", b"0:1")
    ]


def test_a_letter_naming_a_topic_no_stage_reads_again_is_refused_and_nothing_written(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A letter "from" the config topic holding configuration version 999: once, a replay made it
    the running configuration. Now it is refused in one line naming the topic, and counted."""
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    version = encode_state(ConfigState(999, 0, CompiledConfig([], [], {}, {}, [])))
    forged = Record(names.config, 0, 0, 0, version.key, version.value, version.headers)
    letter = letter_record(forged, "commit-worker", ValueError("forged"), 1)

    with_config_topic = settings.model_copy(update={"custom_resources": CustomResourceSettings(enabled=True)})

    async def park() -> None:
        async with started_log(settings) as log:
            await log.create_topics(topic_specs(with_config_topic))
            await log.append(names.dead_letter, letter.value, key=letter.key, headers=letter.headers)

    async def published() -> ConfigState | None:
        async with started_log(settings) as log:
            follower = ConfigFollower(log, names.config)
            try:
                return await follower.catch_up()
            finally:
                await follower.close()

    asyncio.run(park())
    config = write_config(settings, tmp_path / "reverser.yaml")
    code, out, _ = run_cli(capsys, "dead-letter", "replay", "0", "--force", "--config", config)
    assert code == ExitCode.FINDINGS
    assert out.splitlines() == [
        f"refused 0: topic {names.config} is not one a stage reads again (a replay writes only to "
        f"{names.branch_work}, {names.watch_events})",
        "nothing was replayed (1 refused)",
    ]
    assert asyncio.run(published()) is None, "no configuration version was written"
    book = asyncio.run(_book(settings))
    assert [entry.replayed for entry in book.entries] == [None], "and no receipt"


async def _book(settings: Settings) -> Book:
    async with started_log(settings) as log:
        return await read_book(log, TopicNames.for_prefix(settings.log.topic_prefix).dead_letter)
