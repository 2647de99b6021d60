"""`produce` on a WARC archive reads it as `dedup` does: a page over --max-doc-bytes,
as stored or once decoded, is not sent and is counted (exit 1), and a compression
bomb costs no more memory than the limit; a WARC archive on stdin is told by its
first bytes.  On a real broker."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from streamdedup.errors import EXIT_REJECTED
from tests.support.cli import run
from tests.support.pages import Rec, page, write_warc

pytestmark = pytest.mark.integration

# `produce` in a child of a child, whose peak memory (RUSAGE_CHILDREN: of its
# waited-for children only) is that of the command alone
_PEAK = """
import resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "streamdedup.cli", *sys.argv[1:]], capture_output=True)
sys.stderr.buffer.write(proc.stderr)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def _gzip_bomb(decoded_mb: int) -> bytes:
    squeeze = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = b"<p>" + b"a " * (1 << 19)
    return b"".join([*(squeeze.compress(block) for _ in range(decoded_mb)), squeeze.flush()])


def _sent(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    try:
        return [(m.key, m.value) for m in consumer]
    finally:
        consumer.close()


def test_produce_bounds_warc_pages_by_max_doc_bytes(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A 300 KB record decoding to 300 MB: not sent, counted, exit 1, and the page
    after it sent; the command's peak memory stays far below the decoded size."""
    path = write_warc(
        tmp_path / "a.warc.gz",
        [
            Rec("https://e/before", page("valgrind-faq")),
            Rec("https://e/bomb", _gzip_bomb(300), http_headers=(("Content-Encoding", "gzip"),)),
            Rec("https://e/after", page("nodejs-synopsis")),
        ],
    )
    topic = f"pages-{uuid.uuid4().hex[:8]}"
    args = ["produce", str(path), "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *args, "--max-doc-bytes", "1000000"],
        capture_output=True,
        timeout=300,
    )
    status, peak_mb = map(int, proc.stdout.split())
    err = proc.stderr.decode()
    assert status == EXIT_REJECTED, err
    assert "sent 2 HTML pages" in err and "1 not sent (too_large 1)" in err
    assert peak_mb < 200, f"peak RSS {peak_mb} MB"
    sent = _sent(kafka_bootstrap, topic)
    assert sent == [
        (b"https://e/before", page("valgrind-faq")),
        (b"https://e/after", page("nodejs-synopsis")),
    ]


def test_produce_tells_a_warc_archive_on_stdin(kafka_bootstrap: str, tmp_path: Path) -> None:
    path = write_warc(tmp_path / "a.warc.gz", [Rec("https://e/p", page("valgrind-faq"))])
    topic = f"pages-{uuid.uuid4().hex[:8]}"
    proc = run(
        "produce",
        "-",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        stdin=path.read_bytes(),
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"sent 1 HTML pages" in proc.stderr
    assert _sent(kafka_bootstrap, topic) == [(b"https://e/p", page("valgrind-faq"))]
