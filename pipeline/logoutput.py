"""How `reverser` writes its log records: text for a terminal, or one JSON object per line for a
log collector, and the environment variables that choose both without a flag.

It sits at the bottom of the package and imports nothing heavy: the command line configures
logging before it loads a subcommand, and `pipeline.config` reads the variable names from here so
that it does not warn about them as unknown settings.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from enum import StrEnum

from pipeline.redaction import redact_text

__all__ = [
    "LOG_FORMAT_VARIABLE",
    "LOG_LEVEL_VARIABLE",
    "TEXT_FORMAT",
    "JsonFormatter",
    "LogFormat",
    "formatter_for",
]

#: The default of `--log-level` (the flag wins).
LOG_LEVEL_VARIABLE = "REVERSER_LOG_LEVEL"
#: The default of `--log-format` (the flag wins).
LOG_FORMAT_VARIABLE = "REVERSER_LOG_FORMAT"
#: The text format's line layout (`logging.Formatter` style).
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFormat(StrEnum):
    """What `--log-format` accepts."""

    TEXT = "text"
    JSON = "json"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: `time` (UTC, ISO 8601, milliseconds), `level`, `logger`,
    `message`, and `exc` (the traceback) when the record carries one.

    The message and traceback have URL credentials taken out (`pipeline.redaction`): a collector
    keeps lines longer, and shows them to more people, than a terminal does."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        if record.exc_info:
            line["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    """The formatter of the output handler for `log_format`."""
    if log_format is LogFormat.JSON:
        return JsonFormatter()
    return logging.Formatter(TEXT_FORMAT)
