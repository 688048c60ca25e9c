"""One logging setup for every dilochain process: human-readable lines by default, one JSON
object per line (``--log-format json``) for log collectors."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time (UTC, ISO 8601), level, logger, message, and the
    exception text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _StandardError(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(fmt: LogFormat = "text", level: int = logging.INFO) -> None:
    """Send every logger's records at ``level`` and above to standard error in ``fmt``
    (replacing an earlier call's handler, so a command may switch format after reading its
    config; other handlers, e.g. a test runner's, stay)."""
    handler = _StandardError()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        if isinstance(old, _StandardError):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
