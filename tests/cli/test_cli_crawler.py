"""`streamdedup dedup` on crawler input, through the real command: WARC archives of
real pages (plain and gzipped, several in order), JSON Lines holding HTML, the
`--extract` modes on syndicated copies and on one template with different articles,
skipped records, and damaged archives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.errors import EXIT_OK, EXIT_REJECTED, EXIT_USAGE
from tests.support.cli import lines, run
from tests.support.pages import Rec, page, short_items, syndicated, write_warc

ORIGINAL = "https://nodejs.org/api/punycode.html"
COPY = "https://mirror.example/valgrind-style/punycode.html"
ITEM1 = "https://nodejs.org/news/1"
ITEM2 = "https://nodejs.org/news/2"


def crawl(tmp: Path, name: str = "crawl.warc.gz") -> Path:
    """Four pages, a PDF and a request record: the syndicated copy of an article and
    two short items in one template."""
    original, copy = syndicated("punycode")
    item1, item2 = short_items()
    return write_warc(
        tmp / name,
        [
            Rec(ORIGINAL, original),
            Rec(ORIGINAL, b"", kind="request"),
            Rec(ITEM1, item1),
            Rec("https://nodejs.org/doc.pdf", b"%PDF-1.7 not html", "application/pdf"),
            Rec(COPY, copy),
            Rec(ITEM2, item2),
        ],
    )


def dedup(
    tmp: Path, *inputs: Path | str, index: str = "index", **opts: Any
) -> tuple[Any, list[dict[str, Any]]]:
    out = tmp / f"{index}.jsonl"
    flags = [
        f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
        for k, v in opts.items()
    ]
    proc = run(
        "dedup", *map(str, inputs), "--index", str(tmp / index), "--output", str(out), *flags
    )
    return proc, lines(out) if out.exists() else []


def by_id(records: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {r["id"]: r for r in records}


def test_warc_main_content_finds_the_syndicated_copy_not_the_template(tmp_path: Path) -> None:
    proc, out = dedup(tmp_path, crawl(tmp_path))
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert [r["id"] for r in out] == [ORIGINAL, ITEM1, COPY, ITEM2]  # input order
    v = by_id(out)
    assert v[COPY]["verdict"] == "duplicate" and v[COPY]["duplicate_of"] == ORIGINAL
    assert v[ITEM2]["verdict"] == "unique"  # same template, another article
    for r in out:
        assert r["url"] == r["id"] and r["warc_record_id"].startswith("<urn:uuid:")
    err = proc.stderr.decode()
    assert "4 records" in err and "skipped 3 (not_html 1, not_response 2)" in err


def test_warc_all_text_matches_the_template_instead(tmp_path: Path) -> None:
    proc, out = dedup(tmp_path, crawl(tmp_path), extract="all")
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    v = by_id(out)
    assert v[COPY]["verdict"] == "unique"  # the templates differ more than the article
    assert v[ITEM2]["verdict"] == "duplicate" and v[ITEM2]["duplicate_of"] == ITEM1


def test_record_ids_as_ids_and_the_skipped_records_listed(tmp_path: Path) -> None:
    proc, out = dedup(tmp_path, crawl(tmp_path, "c.warc"), warc_id="record-id", report_skipped=True)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert all(r["id"] == r["warc_record_id"] for r in out)
    assert [r["url"] for r in out] == [ORIGINAL, ITEM1, COPY, ITEM2]
    err = proc.stderr.decode().splitlines()
    skipped = [line for line in err if line.startswith("skipped ")]
    assert len(skipped) == 3
    assert any("record 1:" in s and "warcinfo" in s and "[not_response]" in s for s in skipped)
    assert any("https://nodejs.org/doc.pdf" in s and "application/pdf" in s for s in skipped)


def test_json_lines_holding_html_give_the_verdicts_of_the_warc(tmp_path: Path) -> None:
    original, copy = syndicated("punycode")
    item1, item2 = short_items()
    src = tmp_path / "pages.jsonl"
    src.write_bytes(
        b"".join(
            orjson.dumps({"id": i, "html": h.decode()}) + b"\n"
            for i, h in ((ORIGINAL, original), (ITEM1, item1), (COPY, copy), (ITEM2, item2))
        )
    )
    proc, out = dedup(tmp_path, src, text_format="html", text_field="html", index="j")
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    _, warc = dedup(tmp_path, crawl(tmp_path), index="w")
    keys = ("id", "verdict", "duplicate_of", "cluster", "similarity", "exact")
    assert [{k: r[k] for k in keys} for r in out] == [{k: r[k] for k in keys} for r in warc]
    # the same with a preparing process (the HTML is extracted there)
    proc, pooled = dedup(tmp_path, src, text_format="html", text_field="html", workers=1, index="p")
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert pooled == out
    # the same file as text: HTML shingled with its markup, and no "url" fields
    proc, raw = dedup(tmp_path, src, text_field="html", index="t")
    assert proc.returncode == EXIT_OK and "url" not in raw[0]


def test_several_inputs_are_read_in_order_into_one_index(tmp_path: Path) -> None:
    original, copy = syndicated("synopsis")
    first = write_warc(tmp_path / "1.warc", [Rec("https://a/synopsis", original)])
    jsonl = tmp_path / "2.jsonl"
    jsonl.write_bytes(orjson.dumps({"id": "j", "text": "plain text " * 20}) + b"\n" + b"not json\n")
    second = write_warc(tmp_path / "3.warc.gz", [Rec("https://b/synopsis", copy)])
    proc, out = dedup(tmp_path, first, jsonl, second)
    assert proc.returncode == EXIT_REJECTED  # the bad JSON line
    assert [r["id"] for r in out] == ["https://a/synopsis", "j", None, "https://b/synopsis"]
    assert out[2]["error"] == "malformed_json" and out[2]["line"] == 2
    assert out[2]["input"] == str(jsonl)
    assert out[3]["duplicate_of"] == "https://a/synopsis"
    assert "4 records" in proc.stderr.decode()


def test_a_damaged_archive_keeps_the_verdicts_before_it_and_the_next_input_runs(
    tmp_path: Path,
) -> None:
    pages = ["valgrind-faq", "nodejs-synopsis", "nodejs-string_decoder", "nodejs-querystring"]
    data = write_warc(
        tmp_path / "full.warc.gz", [Rec(f"https://e/{p}", page(p)) for p in pages]
    ).read_bytes()
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: len(data) - 500])  # inside the last record's gzip member
    after = write_warc(tmp_path / "after.warc", [Rec("https://e/after", page("valgrind-faq"))])
    proc, out = dedup(tmp_path, cut, after)
    assert proc.returncode == EXIT_REJECTED, proc.stderr.decode()
    assert [r["id"] for r in out[:3]] == [f"https://e/{p}" for p in pages[:3]]
    assert all(r["verdict"] == "unique" for r in out[:3])
    error = out[3]
    assert error["verdict"] == "error" and error["error"] == "corrupt_warc"
    assert error["id"] == "https://e/nodejs-querystring" and "not checked" in error["message"]
    assert out[4]["id"] == "https://e/after" and out[4]["duplicate_of"] == "https://e/valgrind-faq"
    assert "corrupt_warc 1" in proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    # pages extracted in another process: the same output
    proc, pooled = dedup(tmp_path, cut, after, workers=1, index="pooled")
    assert proc.returncode == EXIT_REJECTED and pooled == out


def test_a_50_mb_page_is_an_error_record(tmp_path: Path) -> None:
    big = page("nodejs-punycode") * (50_000_000 // len(page("nodejs-punycode")) + 1)
    path = write_warc(
        tmp_path / "big.warc",
        [Rec("https://e/big", big), Rec("https://e/small", page("valgrind-faq"))],
    )
    proc, out = dedup(tmp_path, path)
    assert proc.returncode == EXIT_REJECTED
    assert out[0]["error"] == "too_large" and out[0]["id"] == "https://e/big"
    assert out[0]["url"] == "https://e/big" and out[0]["record"] == 2
    assert out[1]["verdict"] == "unique"


def test_binary_pages_are_error_records(tmp_path: Path) -> None:
    import gzip

    path = write_warc(
        tmp_path / "b.warc",
        [
            Rec("https://e/gz", gzip.compress(page("valgrind-faq"))),
            Rec("https://e/ok", page("valgrind-faq")),
        ],
    )
    proc, out = dedup(tmp_path, path)
    assert proc.returncode == EXIT_REJECTED
    assert out[0]["error"] == "binary_content" and "binary" in out[0]["message"]
    assert out[1]["verdict"] == "unique"


@pytest.mark.parametrize("args", [("-", "-"), ()])
def test_usage_errors(tmp_path: Path, args: tuple[str, ...]) -> None:
    proc = run("dedup", *args, "--index", str(tmp_path / "i"))
    assert proc.returncode == EXIT_USAGE
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("name", ["crawl.warc", "crawl.warc.gz"])
def test_a_warc_archive_on_stdin_is_told_by_its_first_bytes(tmp_path: Path, name: str) -> None:
    """stdin has no name: `WARC/1.x` or a gzip member starts an archive, as no JSON
    line can; it was parsed as JSON Lines (one malformed_json error a line)."""
    data = crawl(tmp_path, name).read_bytes()
    out = tmp_path / "v.jsonl"
    proc = run("dedup", "-", "--index", str(tmp_path / "i"), "--output", str(out), stdin=data)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    _, from_file = dedup(tmp_path, tmp_path / name, index="f")
    assert lines(out) == from_file
    assert "4 records" in proc.stderr.decode()


def test_non_2xx_responses_are_skipped_and_counted_unless_asked(tmp_path: Path) -> None:
    path = write_warc(
        tmp_path / "a.warc",
        [
            Rec("https://e/ok", page("valgrind-faq")),
            Rec("https://e/missing", page("nodejs-synopsis"), status="404 Not Found"),
            Rec("https://e/error", page("nodejs-synopsis"), status="500 Internal Server Error"),
        ],
    )
    proc, out = dedup(tmp_path, path)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert [r["id"] for r in out] == ["https://e/ok"]
    assert "skipped 3 (not_2xx 2, not_response 1)" in proc.stderr.decode()
    proc, out = dedup(tmp_path, path, warc_status="any", index="any")
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert [r["verdict"] for r in out] == ["unique", "unique", "duplicate"]


def test_a_record_id_repeated_in_a_run_is_an_error_record(tmp_path: Path) -> None:
    """Under --warc-id record-id, a repeat of a record id read earlier in the run
    (the same archive given twice, here) is an error record, not a replacement of
    the earlier page; a later run gets the stored verdicts back, as ever."""
    path = crawl(tmp_path, "c.warc")
    proc, out = dedup(tmp_path, path, path, warc_id="record-id")
    assert proc.returncode == EXIT_REJECTED, proc.stderr.decode()
    assert [r["verdict"] for r in out[:4]] == ["unique", "unique", "duplicate", "unique"]
    repeats = out[4:]
    assert [r.get("error") for r in repeats] == ["duplicate_record_id"] * 4
    assert [r["id"] for r in repeats] == [r["id"] for r in out[:4]]
    proc, again = dedup(tmp_path, path, warc_id="record-id")
    assert proc.returncode == EXIT_OK and again == out[:4]
