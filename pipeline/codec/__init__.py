"""Avro codecs for every record on the log.

Each record carries the header `reverser-schema: <name>/<version>`. Writers always use the
current schema in `schemas/`; readers resolve older versions (kept in `schemas/history/`) to the
current one, so a rolling upgrade never strands records already on the log.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from pipeline.log.api import Headers, PendingRecord

SCHEMA_HEADER = "reverser-schema"
# `pipeline/schemas` links to the top-level `schemas/`, so the files ship inside the wheel too.
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

FACT_BATCH = "fact_batch"
WATCH_EVENT = "watch_event"
BRANCH_WORK = "branch_work"
WATCH_CURSOR = "watch_cursor"
WATCH_CLAIM = "watch_claim"
DEAD_LETTER = "dead_letter"
OBJECT_STATE = "object_state"
CONFIG_STATE = "config_state"
TARGET_RESULT = "target_result"
STREAM_REPORT = "stream_report"
CREDENTIALS_REPORT = "credentials_report"
COMMIT_REQUEST_RESULT = "commit_request_result"
DEAD_LETTER_REPLAY = "dead_letter_replay"


class DecodeError(Exception):
    """A payload that cannot be decoded: missing or unknown schema header, or corrupt bytes."""


@dataclass(frozen=True, slots=True)
class SchemaFile:
    """One version of one schema, raw and parsed."""

    name: str
    version: int
    raw: dict[str, Any]
    parsed: Any


def load_schema_file(path: Path, name: str) -> SchemaFile:
    raw = json.loads(path.read_text(encoding="utf-8"))
    version = int(raw.get("version", 1))
    return SchemaFile(name, version, raw, fastavro.parse_schema(raw))


def history_files(name: str, schema_dir: Path = SCHEMA_DIR) -> dict[int, Path]:
    """Frozen earlier versions: `schemas/history/<name>.v<N>.avsc`."""
    found: dict[int, Path] = {}
    for path in (schema_dir / "history").glob(f"{name}.v*.avsc"):
        found[int(path.stem.rsplit(".v", 1)[1])] = path
    return found


class Codec:
    """Encodes and decodes one record type; the hot path is two fastavro calls."""

    __slots__ = ("_header", "_older", "current", "name")

    def __init__(self, name: str, schema_dir: Path = SCHEMA_DIR) -> None:
        self.name = name
        self.current = load_schema_file(schema_dir / f"{name}.avsc", name)
        self._header = f"{name}/{self.current.version}".encode()
        self._older = {
            version: load_schema_file(path, name)
            for version, path in history_files(name, schema_dir).items()
            if version != self.current.version
        }

    @property
    def header(self) -> tuple[str, bytes]:
        """The schema header every record of this type carries."""
        return (SCHEMA_HEADER, self._header)

    def encode(self, record: dict[str, Any]) -> bytes:
        """Avro-encode `record` (union branches as `(record_name, dict)` tuples)."""
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self.current.parsed, record)
        return buffer.getvalue()

    def record(
        self,
        data: dict[str, Any],
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers = (),
    ) -> PendingRecord:
        """`data` encoded as a record to append: this schema's header first, then `headers`."""
        return PendingRecord(self.encode(data), key=key, headers=(self.header, *headers), partition=partition)

    def decode(self, payload: bytes | None, schema_header: bytes | None) -> dict[str, Any]:
        """Decode a payload written with any known version of this schema."""
        if payload is None:
            raise DecodeError(f"{self.name}: record has no value")
        writer = self._writer_for(schema_header)
        try:
            buffer = io.BytesIO(payload)
            record = fastavro.schemaless_reader(
                buffer,
                writer.parsed,
                None if writer is self.current else self.current.parsed,
                return_record_name=True,
            )
        except Exception as exc:
            raise DecodeError(f"{self.name}: undecodable payload: {exc}") from exc
        if buffer.tell() != len(payload):
            raise DecodeError(f"{self.name}: {len(payload) - buffer.tell()} trailing bytes after the record")
        if not isinstance(record, dict):
            raise DecodeError(f"{self.name}: payload is not a record")
        return record

    def _writer_for(self, schema_header: bytes | None) -> SchemaFile:
        if schema_header is None:
            raise DecodeError(f"{self.name}: record has no {SCHEMA_HEADER} header")
        if schema_header == self._header:
            return self.current
        name, _, version = schema_header.decode("utf-8", "replace").partition("/")
        if name != self.name:
            raise DecodeError(f"{self.name}: record carries schema {name!r}")
        try:
            return self._older[int(version)]
        except (KeyError, ValueError):
            raise DecodeError(f"{self.name}: unknown schema version {version!r}") from None


_codecs: dict[str, Codec] = {}


def codec(name: str) -> Codec:
    """The shared codec for a schema name (schemas are parsed once per process)."""
    found = _codecs.get(name)
    if found is None:
        found = _codecs[name] = Codec(name)
    return found
