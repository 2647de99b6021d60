"""docs/crawler.md's "Try it" commands run as written, in order (the page copy from
Debian's docs replaced by the vendored pages, which a clean CI machine has; the
throwaway broker replaced by the test's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.pages import DATA

DOC = Path(__file__).resolve().parents[2] / "docs" / "crawler.md"


def try_it_blocks() -> list[str]:
    text = DOC.read_text().split("## Try it\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in text.split("```bash\n")[1:]]


def shell(script: str, cwd: Path, env: dict[str, str]) -> None:
    r = subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, timeout=300
    )
    assert r.returncode == 0, (script, r.stderr.decode()[-2000:])


@pytest.mark.integration
def test_try_it_runs_as_written(kafka_bootstrap: str, tmp_path: Path) -> None:
    pages, make_warc, dedup, kafka = try_it_blocks()
    assert "cp /usr/share/doc/nodejs/api/*.html pages/" in pages
    shutil.copytree(DATA, tmp_path / "pages")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "STREAMDEDUP_CONSUMER_OPTION": (
            "max_poll_interval_ms=3000,session_timeout_ms=3000,heartbeat_interval_ms=500"
        ),
    }
    shell(make_warc, tmp_path, env)
    shell(dedup, tmp_path, env)
    n = len(list(DATA.glob("*.html")))
    main = [orjson.loads(x) for x in (tmp_path / "verdicts.jsonl").read_bytes().splitlines()]
    every = [orjson.loads(x) for x in (tmp_path / "verdicts-all.jsonl").read_bytes().splitlines()]
    assert len(main) == len(every) == n
    assert all(v["url"].startswith("https://example.org/") for v in main)

    lines = [
        line
        for line in kafka.splitlines()
        if not line.startswith(("streamdedup broker", "export STREAMDEDUP_BOOTSTRAP"))
    ]
    shell("\n".join(lines), tmp_path, {**env, "STREAMDEDUP_BOOTSTRAP_SERVERS": kafka_bootstrap})
    from tests.support.kafka import Topics

    topics = Topics.__new__(Topics)  # only its reader: the topics exist already
    topics.bootstrap = kafka_bootstrap
    verdicts = [orjson.loads(m.value) for m in topics.read("verdicts", expect=n)]
    # the pages are distinct, so their verdicts do not depend on the order the topic's
    # partitions were read in
    assert all(v["verdict"] == "unique" for v in main)
    assert sorted((v["id"], v["verdict"]) for v in verdicts) == sorted(
        (v["id"], v["verdict"]) for v in main
    )
