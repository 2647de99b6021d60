import logging

import orjson
import pytest

from streamdedup.config import parse_duration_ms
from streamdedup.errors import ConfigError
from streamdedup.ops.logs import JsonFormatter


def test_json_lines_carry_extra_fields() -> None:
    record = logging.makeLogRecord(
        {
            "name": "streamdedup.kafka.worker",
            "levelno": 20,
            "levelname": "INFO",
            "msg": "x %d",
            "args": (3,),
            "partition": 2,
        }
    )
    out = orjson.loads(JsonFormatter().format(record))
    assert out["message"] == "x 3" and out["level"] == "info" and out["partition"] == 2
    assert out["time"].endswith("Z")


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("7d", 604_800_000),
        ("12h", 43_200_000),
        ("30m", 1_800_000),
        ("90s", 90_000),
        ("250ms", 250),
        ("1.5h", 5_400_000),
        ("2w", 1_209_600_000),
        ("45", 45_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "7x", "d", "-1d", "0s", "1..5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration_ms(text)


def test_kafka_client_repeats_are_rate_limited() -> None:
    from streamdedup.ops.logs import RateLimit

    f = RateLimit(every_s=60)

    def rec(name: str, msg: str) -> logging.LogRecord:
        return logging.makeLogRecord({"name": name, "msg": msg, "levelno": 30})

    passed = [f.filter(rec("kafka.producer.sender", "retrying %s")) for _ in range(100)]
    assert passed == [True] + [False] * 99
    assert f.filter(rec("kafka.producer.sender", "another message"))
    assert all(f.filter(rec("streamdedup.kafka.worker", "ours")) for _ in range(5))  # never ours
    f.every_s = 0
    again = rec("kafka.producer.sender", "retrying %s")
    assert f.filter(again) and again.msg.endswith("(and 99 more like it)")


def test_kafka_refusals_are_remembered_and_explained() -> None:
    import logging

    from streamdedup.ops.logs import KafkaRefusals

    refusals = KafkaRefusals.install()
    assert KafkaRefusals.install() is refusals  # one per process
    refusals.reset()
    timeout = TimeoutError("Unable to bootstrap from b:9092")
    assert refusals.explain("b:9092", timeout) == (
        "cannot use the Kafka cluster at b:9092: Unable to bootstrap from b:9092"
    )
    kafka = logging.getLogger("kafka.net.connection")
    kafka.warning("Bootstrap connection to %s failed: %s", "bootstrap-0", "no route")
    assert refusals.last is None
    kafka.error("Connection failed: %s", "[Error 58] SaslAuthenticationFailedError: bad")
    assert "SaslAuthenticationFailedError" in refusals.explain("b:9092", timeout)
    assert "authentication or protocol mismatch" in refusals.explain("b:9092", timeout)
    refusals.reset()
    kafka.error("Connection lost: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    assert refusals.last == "[SSL: CERTIFICATE_VERIFY_FAILED]"
    refusals.reset()


def _record(name: str, msg: str, exc: BaseException | None) -> logging.LogRecord:
    info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, info)


def test_the_closed_socket_race_traceback_is_dropped_and_nothing_else() -> None:
    """kafka-python 3.0 logs a traceback when it reads from a transport it has just
    closed; that exact shape is dropped, other errors of the same logger are kept."""
    from streamdedup.ops.logs import ClosedSocketRace

    keep = ClosedSocketRace().filter
    closed = "<KafkaTCPTransport [none] (closed)>: Error receiving network data closing socket"
    race = AttributeError("'NoneType' object has no attribute 'recv'")
    assert not keep(_record("kafka.net.transport", closed, race))
    assert keep(_record("kafka.net.transport", closed, ConnectionResetError("reset")))
    open_ = closed.replace("(closed)", "(connected)")
    assert keep(_record("kafka.net.transport", open_, race))
    assert keep(_record("kafka.conn", closed, race))
    assert keep(_record("kafka.net.transport", closed, None))


def test_short_slow_task_warnings_are_dropped_long_ones_kept() -> None:
    """kafka-python 3's "Task ... ran for 0.106s (>0.100s threshold)": the worker's own
    batch holding the GIL, dropped; a pause of seconds is kept, as is anything else."""
    from streamdedup.ops.logs import SlowTaskNoise

    keep = SlowTaskNoise().filter

    def warning(name: str, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)

    slow = "Task <Task poll> ran for {}s (>0.100s threshold). It is blocking the event loop"
    assert not keep(warning("kafka.net.selector", slow.format("0.106")))
    assert not keep(warning("kafka.net.selector", slow.format("4.990")))
    assert keep(warning("kafka.net.selector", slow.format("7.500")))
    assert keep(warning("kafka.net.selector", "Task <x> left RUNNING after step"))
    assert keep(warning("kafka.conn", slow.format("0.106")))
