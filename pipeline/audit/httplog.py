"""aiohttp's server log on the audit listener: a client's malformed HTTP is counted, not a traceback.

aiohttp answers a request it cannot parse (broken chunked framing, a bad request line, an
oversized header) with a 400 of its own before any handler runs, and logs the parser's exception
with a traceback at ERROR. On a listener anyone on the network can reach that turns other
people's mistakes into error-log floods, and the refusal is not counted with the others. This log
counts such a refusal as `malformed_http` and notes it at debug level by exception type only (the
parser's message quotes request bytes, and audit bodies carry Secret data); every other exception
aiohttp logs is left an error with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

from pipeline.audit.metrics import REJECTED_REQUESTS, UNDECLARED_ROUTE
from pipeline.audit.rejections import Rejection

__all__ = ["ServerLog"]


class ServerLog(logging.LoggerAdapter[logging.Logger]):
    """The `logger` of the listener's aiohttp request handlers."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__(target, {})

    def log(
        self,
        level: int,
        msg: object,
        *args: object,
        exc_info: Any = None,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> None:
        # aiohttp logs a parser refusal with the exception as exc_info: at ERROR, or at DEBUG for a
        # first request that is not HTTP at all (TLS or a port scan on a plain listener).
        if isinstance(exc_info, HttpProcessingError):
            REJECTED_REQUESTS.labels(UNDECLARED_ROUTE, Rejection.MALFORMED_HTTP).inc()
            self.logger.debug(
                "malformed HTTP request answered 400 by the parser: %s", type(exc_info).__name__
            )
            return
        super().log(
            level,
            msg,
            *args,
            exc_info=exc_info,
            stack_info=stack_info,
            stacklevel=stacklevel,
            extra=extra,
            **kwargs,
        )
