"""The README and the user guide run as written.

Every fenced ```bash / ```sh / ```console / ```python block of the pages in `GUIDE` is
executed, page by page, in order, in a fresh directory with the repository's venv first on
PATH; a page that starts a broker (`streamdedup broker --port 9092 &`) gets a real
embedded Tansu broker that way. So a renamed flag, a changed message or a snippet that no
longer imports fails here instead of in a reader's terminal.

- `bash`/`sh`: run with `bash -euo pipefail`; must exit 0.
- `console`: each `$ COMMAND` line is run (exit status not checked: these blocks show
  failures on purpose); its output (stdout and stderr together) must match the lines
  shown below it, where `...` stands for any text (timestamps, timings).
- `python`: run with the venv's interpreter; must exit 0.
- A block right after `<!-- not-run: REASON -->` is not run; `NOT_RUN` below lists every
  such block, so a new one shows up in review.

The one substitution: the docs say port 9092; the test uses a free port instead, since
other test runs may share the machine. Background processes a block starts (the broker)
are stopped when the page is done.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (
    "README.md",
    "docs/guide/getting-started.md",
    "docs/guide/first-afternoon.md",
    "docs/guide/files.md",
    "docs/guide/worker.md",
    "docs/guide/reading-verdicts.md",
    "docs/guide/families.md",
    "docs/guide/vectors.md",
    "docs/guide/sets.md",
    "docs/guide/containment.md",
    "docs/api.md",
    "docs/parameters.md",
    "docs/guide/troubleshooting.md",
    "docs/crawler.md",
    "docs/segments.md",
    "docs/backfill.md",
)
RUN = ("bash", "sh", "console", "python")
# Every block that is not run: its page and the reason its marker gives.
NOT_RUN = [
    ("README.md", "installs into a fresh venv (the tests run in one)"),
    ("README.md", "the test suite itself"),
    ("README.md", "kcat needs a real Apache Kafka broker"),
    ("README.md", "needs the Apache Kafka distribution and a cluster"),
    ("docs/guide/getting-started.md", "installs into a fresh venv (the tests run in one)"),
    ("docs/guide/reading-verdicts.md", "kcat needs a real Apache Kafka broker"),
    ("docs/guide/reading-verdicts.md", "needs the Apache Kafka distribution and a cluster"),
    ("docs/segments.md", "needs a Kubernetes cluster"),
    ("docs/backfill.md", "installs PySpark into the environment (the tests have it)"),
    ("docs/backfill.md", "needs a Spark cluster"),
    ("docs/backfill.md", "needs a Spark cluster"),
]
BLOCK_TIMEOUT = 240  # seconds; the slowest block runs a worker

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*not-run:\s*(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    not_run: str | None  # the reason given by the marker


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page in order, with their not-run marker if any."""
    text = (ROOT / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        line = text.count("\n", 0, m.start()) + 1
        out.append(Block(page, line, m.group(1), m.group(2), marker and marker.group(1)))
    return out


def runnable(page: str) -> list[Block]:
    return [b for b in blocks(page) if b.lang in RUN and b.not_run is None]


def console_steps(body: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError(f"console block output before any `$ ` command: {line!r}")
    return steps


def matches(expected: list[str], got: str) -> bool:
    """`got` equals the expected lines, `...` standing for any text (also across lines);
    trailing spaces and trailing empty lines do not count."""
    pattern = ".*?".join(re.escape(part) for part in "\n".join(expected).strip().split("..."))
    text = "\n".join(line.rstrip() for line in got.strip().splitlines())
    return re.fullmatch(pattern, text, re.S) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Page:
    """Runs one page's blocks in one directory; stops what they left running."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.groups: list[int] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMDEDUP_")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env
        self.count = 0

    def localise(self, body: str) -> str:
        return body.replace("127.0.0.1:9092", f"127.0.0.1:{self.port}").replace(
            "--port 9092", f"--port {self.port}"
        )

    def run(self, argv: list[str]) -> tuple[int, str]:
        """Runs in its own session, output to a file (a background process a block
        leaves running keeps its output open: a pipe would never reach its end)."""
        self.count += 1
        log = self.dir / f".block-{self.count}.out"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.groups.append(proc.pid)
            try:
                status = proc.wait(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                status = -1
        return status, log.read_text(errors="replace")

    def execute(self, block: Block) -> str | None:
        """None if the block did what the page says, else what went wrong."""
        body = self.localise(block.body)
        where = f"{block.page}:{block.line} ({block.lang})"
        if block.lang == "console":
            for command, expected in console_steps(body):
                _, got = self.run(["bash", "-c", command])
                if not matches(expected, got):
                    return f"{where}: `{command}` printed\n{got}\nthe page shows\n" + "\n".join(
                        expected
                    )
            return None
        if block.lang == "python":
            script = self.dir / f".block-{block.line}.py"
            script.write_text(body)
            status, got = self.run([sys.executable, str(script)])
        else:
            status, got = self.run(["bash", "-euo", "pipefail", "-c", body])
        if status != 0:
            return f"{where}: exit status {status}\n{body}\n--- output ---\n{got[-3000:]}"
        return None

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = False
            for group in self.groups:
                try:
                    os.killpg(group, sig)
                    alive = True
                except ProcessLookupError:
                    pass
            if not alive:
                return
            time.sleep(0.5)


def marks(page: str) -> list[pytest.MarkDecorator]:
    text = " ".join(b.body for b in runnable(page))
    out = []
    if "streamdedup broker" in text or "streamdedup demo" in text:
        out.append(pytest.mark.integration)
    if "streamdedup worker" in text:
        out.append(pytest.mark.slow)
    return out


@pytest.mark.parametrize("page", [pytest.param(p, marks=marks(p), id=p) for p in GUIDE])
def test_page_runs_as_written(page: str, tmp_path: Path) -> None:
    runner = Page(tmp_path)
    try:
        for block in runnable(page):
            problem = runner.execute(block)
            assert problem is None, problem  # later blocks build on this one
    finally:
        runner.stop()


def test_blocks_that_are_not_run_are_listed() -> None:
    """A `not-run` marker is visible in the page and here: review sees every block the
    test does not run."""
    found = [(b.page, b.not_run) for p in GUIDE for b in blocks(p) if b.not_run]
    assert found == NOT_RUN


def test_every_command_block_is_recognised() -> None:
    """A shell block under another name (`shell`, `bash session`) would silently not run."""
    for page in GUIDE:
        for b in blocks(page):
            assert b.lang in (*RUN, "", "json", "text", "toml"), (page, b.line, b.lang)


def test_console_output_matching() -> None:
    """The matcher behind console blocks: `...` is a wildcard, everything else literal."""
    assert matches(["a ... c"], "a b c\n")
    assert matches(["...", "x"], "one\ntwo\nx")
    assert not matches(["a b c"], "a b d")
    assert not matches(["a.c"], "abc")  # a literal dot, not a regex
    assert console_steps("$ echo hi\nhi\n$ true\n") == [("echo hi", ["hi"]), ("true", [])]


def test_readme_links_point_at_files() -> None:
    """The README is read on the repository host, outside the site: its relative links
    must name files that exist (mkdocs --strict checks the pages of the site)."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "no relative links found: the pattern is wrong"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing


def test_readme_stays_short() -> None:
    """One screenful per topic: the details live in docs/ (issue 26 aimed at ~250 lines)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_parameters_table_is_the_tuners() -> None:
    """docs/parameters.md quotes the bandings `tune` picks; they must still be its picks."""
    from streamdedup.sketch.lsh import tune

    text = (ROOT / "docs/parameters.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| (\d+) \| (\d+) \|", text, re.M)
    assert len(rows) == 12
    for k, t, b, r in rows:
        chosen = tune(float(t), int(k))
        assert (chosen.bands, chosen.rows) == (int(b), int(r)), (k, t)


def test_scurve_script_draws_what_the_page_shows(tmp_path: Path) -> None:
    """docs/scripts/scurves.py (the `docs` extra's matplotlib) writes the four pictures
    the page shows and prints the page's table."""
    pytest.importorskip("matplotlib")
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs/scripts/scurves.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    page = (ROOT / "docs/parameters.md").read_text()
    assert r.stdout.strip() in page
    for name in sorted(p.name for p in tmp_path.iterdir()):
        assert f"img/{name}" in page
        assert (ROOT / "docs/img" / name).exists()
    assert len(list(tmp_path.iterdir())) == 4
    for png in tmp_path.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paths_named_in_the_docs_exist() -> None:
    """A file of the repository named in the README or any page (`streamdedup/...`,
    `tests/...`, `bench/...`, `deploy/...`, `docs/...`) exists: a moved module or test
    shows up here."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pattern = re.compile(r"`((?:streamdedup|tests|bench|deploy|docs)/[\w./-]*\w)/?[`:]")
    named = {m.group(1) for page in pages for m in pattern.finditer(page.read_text())}
    assert len(named) > 10, "the pattern finds too little: is it still right?"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing


def test_readme_troubleshooting_quotes_the_tested_page() -> None:
    """The README's table quotes the messages that docs/guide/troubleshooting.md shows,
    and that page's console blocks are compared with what the commands print: so the
    README's quotes are checked too, through the page."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Troubleshooting\n", 1)[1].split("\n## ", 1)[0]
    page = (ROOT / "docs/guide/troubleshooting.md").read_text()
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    assert len(rows) == 5, "the five mistakes"
    for row in rows:
        quote = re.search(r"`([^`]+)`", row.split(" | ")[1])
        assert quote, row
        for part in quote.group(1).split("..."):
            assert part.strip() in page, (row, part)
