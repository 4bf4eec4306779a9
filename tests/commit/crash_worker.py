"""A commit worker in its own process, for crash tests: `python -m tests.commit.crash_worker SETTINGS.json`.

With `REVERSER_TEST_CRASH_AT=committed|pushed|state-written|offsets-committed` the process
SIGKILLs itself at that hook point (right after a local commit, right after a push, right after
the object-state append and before the offset commit, or right after an offset commit), which is
exactly what
an OOM kill or a node loss does. Otherwise it runs until every branch-work offset is committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from pipeline.commit.consumer import CommitWorker
from pipeline.config import Settings
from pipeline.log import open_log
from tests.commit.logwork import wait_settled


async def _hook(point: str) -> None:
    if point == os.environ.get("REVERSER_TEST_CRASH_AT"):
        os.kill(os.getpid(), signal.SIGKILL)


async def main(settings: Settings) -> None:
    log = open_log(settings)
    await log.start()
    worker = CommitWorker(settings, log, hook=_hook)
    await worker.start()
    try:
        await wait_settled(log, settings, timeout_s=90)
    finally:
        await worker.stop()
        await log.close()


if __name__ == "__main__":
    asyncio.run(main(Settings.model_validate_json(Path(sys.argv[1]).read_text())))
