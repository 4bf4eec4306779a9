"""Every replica's view of `<prefix>.config`: the newest effective configuration, and each new one.

Reading the log (not the custom resources) is what makes every replica and every stage run the
same version, and what lets a restarted process start with the configuration it had: the
controller may be on another replica, or not elected yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pipeline.codec import DecodeError
from pipeline.codec.commit_request_result import REQUEST_KEY_PREFIX, RequestResult, decode_request_result
from pipeline.codec.credentials_report import CREDENTIALS_KEY_PREFIX, CredentialsReport, decode_credentials
from pipeline.codec.stream_report import REPORT_KEY_PREFIX, StreamReport, decode_report
from pipeline.codec.target_result import RESULT_KEY_PREFIX, TargetResult, decode_result
from pipeline.customresources.state import ConfigState, decode_state
from pipeline.log.api import Log, LogError, Reader, Record, TopicPartition

__all__ = ["ConfigFollower"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

_FETCH_TIMEOUT_MS = 500
_RETRY_S = 1.0


def _decoded(record: Record, decode: Callable[[Record], T], what: str) -> T | None:
    """`decode(record)`, or None (logged) for a record this version cannot read: one bad record
    on the config topic must not stop every replica from following the ones after it."""
    try:
        return decode(record)
    except DecodeError as exc:
        logger.error("config topic offset %d: undecodable %s, skipped: %s", record.offset, what, exc)
        return None


class ConfigFollower:
    """Reads the config topic from its start; `latest` is the newest decodable state."""

    def __init__(self, log_: Log, topic: str) -> None:
        self._log = log_
        self._tp = TopicPartition(topic, 0)
        self._reader: Reader | None = None
        self.latest: ConfigState | None = None
        #: The last commit and push of each target (`result/<target>` records of the commit worker).
        self.results: dict[str, TargetResult] = {}
        #: The streams each cluster's leader runs (`streams/<cluster>` records of the watch stage).
        self.reports: dict[str, StreamReport] = {}
        #: Whether each provider's credentials from its Secret work (`credentials/<provider>` records
        #: of the commit worker).
        self.credentials: dict[str, CredentialsReport] = {}
        #: What became of each CommitRequest, by (namespace, name) (`commitrequest/...` records of
        #: the commit worker).
        self.requests: dict[tuple[str, str], RequestResult] = {}
        self.results_changed = asyncio.Event()
        # `catch_up` (a stage asking) and `follow` share one reader.
        self._reading = asyncio.Lock()

    async def catch_up(self) -> ConfigState | None:
        """Read up to the current end of the topic (a restart's first step); returns the newest state."""
        end = (await self._log.end_offsets([self._tp]))[self._tp]
        async with self._reading:
            reader = await self._open()
            while reader.position(self._tp) < end:
                await self._fetch_once(reader)
        return self.latest

    async def _open(self) -> Reader:
        if self._reader is None:
            start = (await self._log.beginning_offsets([self._tp]))[self._tp]
            self._reader = self._log.reader()
            await self._reader.assign({self._tp: start})
        return self._reader

    async def _fetch_once(self, reader: Reader) -> bool:
        fetched = await reader.fetch(timeout_ms=_FETCH_TIMEOUT_MS)
        newer = False
        for record in fetched.records:
            if record.value is None:
                continue
            if record.key is not None and record.key.startswith(RESULT_KEY_PREFIX):
                result = _decoded(record, decode_result, "result")
                if result is not None:
                    self.results[result.target] = result
                    self.results_changed.set()
                continue
            if record.key is not None and record.key.startswith(REQUEST_KEY_PREFIX):
                request = _decoded(record, decode_request_result, "commit-request result")
                if request is not None:
                    self.requests[(request.namespace, request.name)] = request
                    self.results_changed.set()
                continue
            if record.key is not None and record.key.startswith(CREDENTIALS_KEY_PREFIX):
                credentials = _decoded(record, decode_credentials, "credentials report")
                if credentials is not None:
                    self.credentials[credentials.provider] = credentials
                    self.results_changed.set()
                continue
            if record.key is not None and record.key.startswith(REPORT_KEY_PREFIX):
                report = _decoded(record, decode_report, "stream report")
                if report is not None:
                    self.reports[report.cluster] = report
                    self.results_changed.set()
                continue
            state = _decoded(record, decode_state, "configuration")
            if state is None:
                continue
            if self.latest is None or state.version > self.latest.version:
                self.latest = state
                newer = True
        return newer

    def stream_states(self) -> dict[str, str]:
        """Each reported stream's state (`Streaming`, `Replaying`, `Backoff`, ...) by identity."""
        return {s.stream: s.state for report in self.reports.values() for s in report.streams}

    def running_streams(self) -> frozenset[str]:
        """The identities of every stream some cluster's leader reports as streaming."""
        return frozenset().union(*(report.running() for report in self.reports.values()))

    async def follow(self, on_change: Callable[[ConfigState], Awaitable[None]]) -> None:
        """Call `on_change` with every newer state, until cancelled; log outages are retried."""
        while True:
            try:
                async with self._reading:
                    reader = await self._open()
                    newer = await self._fetch_once(reader)
                if newer:
                    assert self.latest is not None
                    await on_change(self.latest)
            except LogError as exc:
                logger.warning("reading the config topic failed (retrying): %s", exc)
                await asyncio.sleep(_RETRY_S)

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
