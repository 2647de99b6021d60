"""Extraction in other processes (`filemode.pages`, `dedup --workers` on WARC input):
the same items, in the same order, as extracting in this process -- across group
boundaries, under back-pressure, with skips, rejects and a damaged end."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from streamdedup.filemode import pages as pages_module
from streamdedup.filemode.pages import extracted
from streamdedup.inputs.warc import read_pages, read_warc
from tests.support.pages import Rec, page, write_warc

NAMES = ["nodejs-punycode", "valgrind-faq", "nodejs-synopsis", "valgrind-quick-start"]


def archive(tmp: Path) -> bytes:
    records = []
    for i in range(40):
        name = NAMES[i % len(NAMES)]
        records.append(Rec(f"https://e/{i}", page(name)))
        if i % 7 == 0:
            records.append(Rec(f"https://e/{i}.pdf", b"%PDF", "application/pdf"))
        if i % 11 == 0:
            records.append(Rec(f"https://e/{i}.gz", gzip.compress(page(name))))
    return write_warc(tmp / "a.warc.gz", records).read_bytes()


@pytest.mark.parametrize(("group", "ahead"), [(32, 64 << 20), (3, 50_000)])
@pytest.mark.parametrize("workers", [1, 2])
def test_the_same_items_in_the_same_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, group: int, ahead: int
) -> None:
    monkeypatch.setattr(pages_module, "GROUP_PAGES", group)
    monkeypatch.setattr(pages_module, "MAX_AHEAD_BYTES", ahead)
    data = archive(tmp_path)
    cut = data[: len(data) - 700]  # and a damaged end
    for blob in (data, cut):
        here = list(read_warc(io.BytesIO(blob), extract="all"))
        there = list(extracted(read_pages(io.BytesIO(blob)), workers, "all"))
        assert there == here
        assert len(here) > 40
