"""HTML messages on Kafka (`--input-format html`), on the real broker: an archive of
real pages streamed by `streamdedup produce`, the worker's verdicts equal to `dedup`'s
on the same archive, bad pages dead-lettered with their reason, the id taken from a
header (`--id-header`), and `replay` giving the same verdicts."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.cli import lines, run
from tests.support.kafka import Topics
from tests.support.pages import Rec, page, short_items, syndicated, write_warc

pytestmark = pytest.mark.integration

ORIGINAL = "https://nodejs.org/api/punycode.html"
COPY = "https://mirror.example/punycode.html"
ITEM1, ITEM2 = "https://nodejs.org/news/1", "https://nodejs.org/news/2"
KEYS = ("id", "verdict", "duplicate_of", "cluster", "similarity", "exact")


def archive(tmp: Path) -> Path:
    original, copy = syndicated("punycode")
    item1, item2 = short_items()
    return write_warc(
        tmp / "crawl.warc.gz",
        [
            Rec(ORIGINAL, original),
            Rec("https://nodejs.org/logo.pdf", b"%PDF-1.7", "application/pdf"),
            Rec(ITEM1, item1),
            Rec(COPY, copy),
            Rec(ITEM2, item2),
            # over a produce request's 1 MiB: `produce` leaves it out, and says so
            Rec("https://nodejs.org/all.html", page("nodejs-punycode") * 80),
        ],
    )


def send(t: Topics, messages: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=t.bootstrap, linger_ms=5)
    for key, value, headers in messages:
        p.send(t.input, key=key, value=value, headers=headers)
    p.flush()
    p.close()


def only(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in KEYS}


def test_a_crawl_through_the_worker(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    warc = archive(tmp_path)
    sent = run("produce", str(warc), "--bootstrap-servers", t.bootstrap, "--topic", t.input)
    assert sent.returncode == 1, sent.stderr.decode()  # (a page left out: named, counted)
    assert (
        b"sent 4 HTML pages" in sent.stderr and b"1 not sent (too_large_to_send 1)" in sent.stderr
    )
    assert b"not sent: https://nodejs.org/all.html: " in sent.stderr
    send(
        t,
        [
            (b"https://e/img", gzip.compress(page("valgrind-faq")), []),  # binary as HTML
            (None, page("valgrind-faq"), []),  # no key: no id
            (b"https://e/empty", b"<html><body><script>x()</script></body></html>", []),
        ],
    )
    r = t.run_worker(tmp_path / "idx", "--input-format", "html")
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=5)]
    assert [v["id"] for v in verdicts] == [ORIGINAL, ITEM1, COPY, ITEM2, "https://e/empty"]
    assert verdicts[-1]["verdict"] == "unique" and verdicts[-1]["reason"] == "empty"
    # the verdicts of `dedup` on the same archive
    file_out = tmp_path / "file.jsonl"
    done = run("dedup", str(warc), "--index", str(tmp_path / "f"), "--output", str(file_out))
    assert done.returncode == 0, done.stderr.decode()
    assert [only(v) for v in verdicts[:4]] == [only(v) for v in lines(file_out)[:4]]
    assert verdicts[2]["duplicate_of"] == ORIGINAL and verdicts[3]["verdict"] == "unique"
    dead = t.read(t.dlq, expect=2)
    reasons = [dict(m.headers)["streamdedup.reason"] for m in dead]
    assert reasons == [b"binary_content", b"missing_id"]
    assert b"binary" in dict(dead[0].headers)["streamdedup.message"]

    # replay of the same topic, to a file: the same verdicts
    out = tmp_path / "replay.jsonl"
    rep = subprocess.run(
        t.replay_args(tmp_path / "replay-idx", "--input-format", "html", "--output", str(out)),
        capture_output=True,
        timeout=600,
    )
    # the two rejected messages are error records in the file, and the status says so (1)
    assert rep.returncode == 1, rep.stderr.decode()[-3000:]
    assert b"2 rejected" in rep.stderr
    replayed = [v for v in lines(out) if v["verdict"] != "error"]
    assert [only(v) for v in replayed] == [only(v) for v in verdicts]


def test_ids_from_a_header_and_extract_all(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    item1, item2 = short_items()
    send(
        t,
        [
            (b"nodejs.org", item1, [("url", ITEM1.encode())]),
            (b"nodejs.org", item2, [("url", ITEM2.encode())]),
            (b"nodejs.org", item2, []),  # the header is missing
        ],
    )
    r = t.run_worker(
        tmp_path / "idx", "--input-format", "html", "--id-header", "url", "--extract", "all"
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=2)]
    assert [v["id"] for v in verdicts] == [ITEM1, ITEM2]
    assert verdicts[1]["duplicate_of"] == ITEM1  # all text: the template matches
    dead = t.read(t.dlq, expect=1)
    assert dict(dead[0].headers)["streamdedup.reason"] == b"missing_id"
    assert b"header 'url'" in dict(dead[0].headers)["streamdedup.message"]
