"""Background tasks of a stage: how they stop, and how one that died is told (every stage alike)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_all", "logged_failure", "task_failure"]


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task, then wait for each to finish, so none outlives the stage that owns it.

    All are cancelled before any is awaited: a task that waits on another must not keep it alive.
    A task that had already died is not awaited: its error was reported (`task_failure`) and must
    not stop the stage from stopping the others.
    """
    pending = [task for task in tasks if task_failure([task]) is None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def task_failure(tasks: Iterable[asyncio.Task[Any]]) -> str | None:
    """`<task name>: <error>` of the first task that ended on an exception, else None."""
    for task in tasks:
        if task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                return f"{task.get_name()}: {error!r}"
    return None


def logged_failure(task: asyncio.Task[Any], logger: logging.Logger, stage: str) -> str | None:
    """A done-callback's check: the task's failure (see `task_failure`), logged with its traceback."""
    failure = task_failure([task])
    if failure is not None:
        logger.error("%s task %s failed", stage, task.get_name(), exc_info=task.exception())
    return failure
