"""Logging for the long-running commands: plain text for people, JSON lines for shippers."""

from __future__ import annotations

import contextlib
import logging
import re
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


class ClosedSocketRace(logging.Filter):
    """Drops kafka-python 3.0's traceback for a receive on a transport it has just closed.

    When a consumer closes while its network thread is reading, kafka-python logs
    "<KafkaTCPTransport ... (closed)>: Error receiving network data" with an
    `AttributeError: 'NoneType' object has no attribute 'recv'` traceback: the socket was
    closed by the client itself, nothing is lost, yet a user reads a traceback on every
    such shutdown.  Only that exact shape is dropped; every other Kafka error passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "kafka.net.transport" or not record.exc_info:
            return True
        exc = record.exc_info[1]
        return not (
            isinstance(exc, AttributeError)
            and "(closed)" in record.getMessage()
            and "Error receiving network data" in record.getMessage()
        )


class SlowTaskNoise(logging.Filter):
    """Drops kafka-python 3's "Task ... ran for 0.106s (>0.100s threshold)" warnings of
    short pauses.  Its network thread shares the GIL with the worker's batch -- HTML
    extraction, shingling, the index's transaction -- so a tenth of a second between
    its steps is this process at work, not a stuck connection; every batch printed
    one.  A pause of `keep_s` or more still shows: that one may be a problem."""

    _ELAPSED = re.compile(r"ran for ([0-9.]+)s \(>")

    def __init__(self, keep_s: float = 5.0) -> None:
        super().__init__()
        self.keep_s = keep_s

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "kafka.net.selector" or record.levelno != logging.WARNING:
            return True
        found = self._ELAPSED.search(record.getMessage())
        return found is None or float(found.group(1)) >= self.keep_s


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    handler.addFilter(ClosedSocketRace())
    handler.addFilter(SlowTaskNoise())
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # kafka-python is chatty at INFO (every connection, every coordinator lookup)
    logging.getLogger("kafka").setLevel(max(logging.WARNING, root.level))


class KafkaRefusals(logging.Handler):
    """Remembers the last authentication or TLS failure kafka-python logs.

    When the broker refuses the client (a SASL mechanism it does not offer, a wrong user
    name or password, a TLS handshake failure), kafka-python only logs the reason and
    later gives up with "Unable to bootstrap"; `explain` turns that into what to check.
    Installed once on the `kafka` logger; `reset` before connecting."""

    _REFUSAL = re.compile(r"\b\w*(?:Sasl|Authentication|SSL|Ssl)\w*Error\b|\[SSL: \w+\]")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    @classmethod
    def install(cls) -> KafkaRefusals:
        logger = logging.getLogger("kafka")
        for handler in logger.handlers:
            if isinstance(handler, cls):
                return handler
        handler = cls()
        logger.addHandler(handler)
        return handler

    def reset(self) -> None:
        self.last = None

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            found = self._REFUSAL.search(record.getMessage())
            if found:
                self.last = found.group(0)

    def explain(self, bootstrap_servers: str, exc: BaseException) -> str:
        if self.last is None:
            return f"cannot use the Kafka cluster at {bootstrap_servers}: {exc}"
        return (
            f"the Kafka broker at {bootstrap_servers} refused the connection ({self.last}): "
            "an authentication or protocol mismatch; check --security-protocol, "
            "--sasl-mechanism, --sasl-username/--sasl-password and the --ssl-* files"
        )
