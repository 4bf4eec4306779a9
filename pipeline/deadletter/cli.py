"""`reverser dead-letter list|show|replay`: why records failed, and re-submitting them after a fix.

Exit codes, as in the rest of the CLI: `0` done, `1` a replay was refused (nothing written),
`2` invalid configuration or arguments (the message names the argument), `3` the log could not be
opened or failed (the embedded log is in use by the running service, a broker is unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import hashlib
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from pipeline.codec import SCHEMA_HEADER, DecodeError, codec
from pipeline.commandline import add_bootstrap_argument, add_config_argument, settings_from_args
from pipeline.config import Settings
from pipeline.deadletter.book import Book, Entry
from pipeline.deadletter.reading import read_book
from pipeline.deadletter.replay import ReplayReport, Selection, SelectionError, replay_letters
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.log import open_log
from pipeline.log.topics import TopicNames
from pipeline.tables import OutputFormat, add_output_argument, aligned, document

__all__ = ["LetterView", "register"]

MESSAGE_COLUMN_CHARS = 60


class LetterView(BaseModel):
    """One dead letter as `list` and `show` print it."""

    offset: int
    source: str
    stage: str
    error_class: str
    message: str
    schema_header: str | None
    parked_at: str
    attempt: int
    key: str | None
    headers: dict[str, str]
    value_bytes: int | None
    value_sha256: str | None
    decodes_now: bool | None
    decode_error: str | None
    replayed: bool
    replayed_at: str | None
    replayed_by: str | None
    replayed_from_letter: int | None


def _iso(time_ms: int) -> str:
    if time_ms <= 0:
        return "-"
    return datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _decodes_now(entry: Entry) -> tuple[bool | None, str | None]:
    """Whether the failed value decodes with this version's codecs (a fix may have made it so)."""
    letter = entry.letter
    if letter.schema is None:
        return None, f"the record has no {SCHEMA_HEADER} header"
    name = letter.schema.partition("/")[0]
    if not name.isidentifier():
        return False, f"unknown schema {name!r}"
    try:
        codec(name).decode(letter.value, letter.schema.encode())
    except FileNotFoundError:
        return False, f"unknown schema {name!r}"
    except DecodeError as exc:
        return False, str(exc)
    return True, None


def view(entry: Entry) -> LetterView:
    letter = entry.letter
    decodes, error = _decodes_now(entry)
    receipt = entry.replayed
    return LetterView(
        offset=entry.offset,
        source=str(letter.source),
        stage=letter.stage,
        error_class=letter.error_class or "-",
        message=letter.message,
        schema_header=letter.schema,
        parked_at=_iso(letter.time_ms),
        attempt=letter.attempt,
        key=None if letter.key is None else _text(letter.key),
        headers={name: _text(value) for name, value in letter.headers},
        value_bytes=None if letter.value is None else len(letter.value),
        value_sha256=None if letter.value is None else hashlib.sha256(letter.value).hexdigest(),
        decodes_now=decodes,
        decode_error=error,
        replayed=receipt is not None,
        replayed_at=None if receipt is None else _iso(receipt.time_ms),
        replayed_by=None if receipt is None else receipt.by,
        replayed_from_letter=None if receipt is None else receipt.letter_offset,
    )


def _short(message: str) -> str:
    line = message.replace("\n", " ")
    if len(line) <= MESSAGE_COLUMN_CHARS:
        return line
    return line[: MESSAGE_COLUMN_CHARS - 3] + "..."


def render_list(book: Book, views: Sequence[LetterView], output: OutputFormat) -> str:
    if output is not OutputFormat.TABLE:
        return document(
            {
                "topic": book.topic,
                "letters": [v.model_dump() for v in views],
                "unreadable": [{"offset": u.offset, "error": u.error} for u in book.unreadable],
                "lost_to_retention": book.lost,
            },
            output,
        )
    lines = []
    if views:
        rows = [("OFFSET", "PARKED", "STAGE", "SOURCE", "ATTEMPT", "ERROR", "STATUS", "MESSAGE")]
        rows += [
            (
                str(v.offset),
                v.parked_at,
                v.stage,
                v.source,
                str(v.attempt),
                v.error_class,
                f"replayed ({v.replayed_at})" if v.replayed else "pending",
                _short(v.message),
            )
            for v in views
        ]
        lines.append(aligned(rows))
    else:
        lines.append(f"no dead letters on {book.topic}")
    for unreadable in book.unreadable:
        lines.append(f"warning: record {unreadable.offset} of {book.topic} is unreadable: {unreadable.error}")
    if book.lost:
        lines.append(f"warning: {book.lost} record(s) of {book.topic} were deleted by retention")
    return "\n".join(lines)


def render_show(v: LetterView, output: OutputFormat) -> str:
    """One letter as labelled lines (`table`, the default), or as the document `list` prints per letter."""
    if output is not OutputFormat.TABLE:
        return document(v.model_dump(mode="json"), output)
    if v.decodes_now is None:
        decodes = f"unknown ({v.decode_error})"
    elif v.decodes_now:
        decodes = "yes, with this version's schemas"
    else:
        decodes = f"no: {v.decode_error}"
    if v.replayed:
        status = f"replayed {v.replayed_at} by {v.replayed_by} (from letter {v.replayed_from_letter})"
    else:
        status = "pending"
    value = "none" if v.value_bytes is None else f"{v.value_bytes} bytes, sha256 {v.value_sha256}"
    fields = [
        ("source", v.source),
        ("stage", v.stage),
        ("error", f"{v.error_class}: {v.message}"),
        ("schema", v.schema_header or "(no header)"),
        ("parked", f"{v.parked_at} (attempt {v.attempt})"),
        ("key", "none" if v.key is None else repr(v.key)),
        ("headers", ", ".join(f"{k}={val}" for k, val in v.headers.items()) or "none"),
        ("value", value),
        ("decodes now", decodes),
        ("status", status),
    ]
    width = max(len(name) for name, _ in fields) + 1
    body = [f"  {(name + ':').ljust(width)} {text}" for name, text in fields]
    return "\n".join([f"dead letter {v.offset}", *body])


def render_replay(report: ReplayReport, dry_run: bool) -> str:
    lines = []
    for refusal in report.refused:
        lines.append(f"refused {refusal.offset}: {refusal.reason}")
    for duplicate in report.duplicates:
        lines.append(f"skipped {duplicate.offset}: {duplicate.reason}")
    if report.refused:
        lines.append(f"nothing was replayed ({len(report.refused)} refused)")
        return "\n".join(lines)
    for done in report.replayed:
        if dry_run:
            lines.append(f"would replay {done.offset}: {done.source}")
        else:
            lines.append(
                f"replayed {done.offset}: {done.source} -> "
                f"{done.source.topic}[{done.partition}]@{done.new_offset}"
            )
    if not report.replayed:
        lines.append("nothing to replay")
    return "\n".join(lines)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def _list_or_show(settings: Settings) -> Book:
    async with open_log(settings) as log:
        return await read_book(log, TopicNames.for_prefix(settings.log.topic_prefix).dead_letter)


async def _replay(settings: Settings, selection: Selection, force: bool, dry_run: bool) -> ReplayReport:
    async with open_log(settings) as log:
        prefix = settings.log.topic_prefix
        return await replay_letters(
            log,
            prefix,
            selection,
            by=_who(),
            now_ms=int(time.time() * 1000),
            force=force,
            dry_run=dry_run,
        )


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    command = args.dead_letter_command
    try:
        if command == "replay":
            selection = Selection(
                offsets=tuple(args.offsets),
                all_pending=args.all_pending,
                stage=args.stage,
                error_class=args.error_class,
            )
            report = asyncio.run(_replay(settings, selection, args.force, args.dry_run))
            print(render_replay(report, args.dry_run))
            return ExitCode.FINDINGS if report.refused else ExitCode.OK
        book = asyncio.run(_list_or_show(settings))
    except SelectionError as exc:
        raise usage_error(str(exc)) from None
    if command == "show":
        entry = book.entry(args.offset)
        if entry is None:
            known = ", ".join(map(str, book.offsets())) or "none"
            raise usage_error(
                f"OFFSET: no dead letter at offset {args.offset} of {book.topic} (letters: {known})"
            )
        print(render_show(view(entry), args.output))
        return ExitCode.OK
    entries = [e for e in book.entries if not args.pending or e.replayed is None]
    if args.stage is not None:
        entries = [e for e in entries if e.letter.stage == args.stage]
    print(render_list(book, [view(e) for e in entries], args.output))
    return ExitCode.OK


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"OFFSET: {text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"OFFSET: {value} is negative")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dead-letter")
    actions = parser.add_subparsers(dest="dead_letter_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every dead letter with its stage, error and replay status")
    add_config_argument(listing, reads_existing_log=True)
    add_bootstrap_argument(listing)
    listing.add_argument("--pending", action="store_true", help="only letters not replayed yet")
    listing.add_argument("--stage", help="only letters of this stage (router, commit-worker)")
    add_output_argument(listing)
    listing.set_defaults(func=_run)

    show = actions.add_parser("show", help="one dead letter in full: source, error, headers, value")
    add_config_argument(show, reads_existing_log=True)
    add_bootstrap_argument(show)
    show.add_argument("offset", type=_offset, metavar="OFFSET", help="the letter's offset (from list)")
    add_output_argument(show)
    show.set_defaults(func=_run)

    replay = actions.add_parser(
        "replay",
        help="re-submit letters' records to their own topics after a fix (once each, unless --force)",
    )
    add_config_argument(replay, reads_existing_log=True)
    add_bootstrap_argument(replay)
    replay.add_argument("offsets", type=_offset, nargs="*", metavar="OFFSET", help="letters to replay")
    replay.add_argument("--all-pending", action="store_true", help="every letter not replayed yet")
    replay.add_argument("--stage", help="with --all-pending: only letters of this stage")
    replay.add_argument("--error-class", help="with --all-pending: only letters with this error class")
    replay.add_argument("--force", action="store_true", help="re-submit records that were replayed before")
    replay.add_argument("--dry-run", action="store_true", help="say what would be replayed, write nothing")
    replay.set_defaults(func=_run)
