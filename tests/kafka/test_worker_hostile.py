"""Hostile messages on Kafka: each goes to the dead-letter topic and the worker goes on
(before, a lone-surrogate id or deep nesting raised in the batch and the worker
crash-looped on the same message)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from tests.support.kafka import Topics, verdicts_by_offset

pytestmark = pytest.mark.integration

GOOD = b'{"id": "ok", "text": "a perfectly good document with words"}'


@pytest.mark.parametrize(
    ("fmt", "values", "reasons"),
    [
        (
            "json",
            [
                GOOD,
                b'{"id": "\\ud800", "text": "a lone surrogate as the id"}',
                b'{"id": "deep", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
                b'{"id": 123456789012345678901234567890, "text": "x"}',
                b'{"id": "s", "text": "a lone \\udc00 surrogate in the text is fine"}',
            ],
            [b"bad_id", b"malformed_json", b"bad_id"],
        ),
        (
            "msgpack",
            [
                msgpack.packb({"id": "ok", "text": "a perfectly good document with words"}),
                b"\x91" * 3000,
                b"\x81\x80\x00",
                msgpack.packb({"id": "\ud800", "text": "x"}, unicode_errors="surrogatepass"),
                msgpack.packb({"id": "s", "text": "another good document"}),
            ],
            [b"malformed_msgpack", b"malformed_msgpack", b"invalid_utf8"],
        ),
    ],
)
def test_hostile_messages_are_dead_lettered(
    kafka_bootstrap: str, tmp_path: Path, fmt: str, values: list[bytes], reasons: list[bytes]
) -> None:
    t = Topics(kafka_bootstrap)
    t.produce(values)
    r = t.run_worker(tmp_path / "idx", "--input-format", fmt)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"Traceback" not in r.stderr, r.stderr.decode()[-3000:]
    assert sorted(verdicts_by_offset(t.read(t.output, expect=2))) == [(0, 0), (0, 4)]
    dead = t.read(t.dlq, expect=3)
    assert [dict(m.headers)["streamdedup.reason"] for m in dead] == reasons
    assert all(dict(m.headers)["streamdedup.message"] for m in dead)


SASL = [
    "--security-protocol",
    "SASL_PLAINTEXT",
    "--sasl-mechanism",
    "SCRAM-SHA-256",
    "--sasl-username",
    "someone",
    "--sasl-password",
    "wrong",
]


@pytest.mark.parametrize("command", ["worker", "replay"])
def test_sasl_against_a_broker_without_it_says_so(
    kafka_bootstrap: str, tmp_path: Path, command: str
) -> None:
    """kafka-python only logs the refusal and then reports "Unable to bootstrap"."""
    import subprocess
    import sys

    extra = ["--output", str(tmp_path / "out.jsonl")] if command == "replay" else []
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            command,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--index",
            str(tmp_path / "idx"),
            "--connect-timeout",
            "5",
            # --connect-timeout bounds the wait for a TCP answer; the refused bootstrap
            # after it is kafka-python's own wait (30 s by default): 3 s see the refusal
            *("--consumer-option", "bootstrap_timeout_ms=3000"),
            *("--producer-option", "bootstrap_timeout_ms=3000"),
            *SASL,
            *extra,
        ],
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 3, r.stderr.decode()[-3000:]
    assert b"Traceback" not in r.stderr, r.stderr.decode()[-3000:]
    last = r.stderr.decode().strip().splitlines()[-1]
    assert "authentication or protocol mismatch" in last and "--sasl-mechanism" in last
