"""Logging for the long-running commands: plain text for people, JSON lines for shippers."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

LEVELS = ("debug", "info", "warning", "error")
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra={...}` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class RateLimit(logging.Filter):
    """At most one record per message template and logger every `every_s` seconds for
    the Kafka client's loggers: with the broker gone, kafka-python repeats the same
    warning (and traceback) hundreds of times a second.  The count of suppressed
    repeats is added to the next one let through."""

    def __init__(self, every_s: float = 10.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kafka"):
            return True
        key = (record.name, record.msg)
        now = time.monotonic()
        last, dropped = self._last.get(key, (0.0, 0))
        if now - last < self.every_s:
            self._last[key] = (last, dropped + 1)
            return False
        self._last[key] = (now, 0)
        if dropped:
            record.msg = f"{record.msg} (and {dropped} more like it)"
        return True


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # kafka-python is chatty at INFO (every connection, every coordinator lookup)
    logging.getLogger("kafka").setLevel(max(logging.WARNING, root.level))
