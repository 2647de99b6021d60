"""Progress bars on stderr for long work (dedup, replay, demo): shown on a terminal,
or always or never as `--progress` says, so piped output and logs stay clean.

`dedup` over files measures its progress in bytes of input (`InputProgress`): the
total is known from the files' sizes before anything is read, so the bar gives an
end and a time left, where a count of documents could not (a file's documents are
not counted before they are read); the documents a second go beside it."""

from __future__ import annotations

import os
import stat
import sys
import time
from typing import IO, Any


def make_progress(mode: str, desc: str, total: int | None = None) -> Any:
    """A tqdm bar, or None when `mode` ("auto", "always", "never") says not to show one."""
    if not _shown(mode):
        return None
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=" docs",
        unit_scale=True,
        file=sys.stderr,
        smoothing=0.1,
        mininterval=0.5,
    )


def _shown(mode: str) -> bool:
    return not (
        sys.stderr is None or mode == "never" or (mode == "auto" and not sys.stderr.isatty())
    )


def file_size(source: IO[bytes]) -> int | None:
    """The size of a regular file read from its start (None: a pipe, stdin)."""
    try:
        st = os.fstat(source.fileno())
        return st.st_size if stat.S_ISREG(st.st_mode) and source.tell() == 0 else None
    except (OSError, ValueError, AttributeError):
        return None


class InputProgress:
    """A bar over the inputs' bytes, with a time left, and the documents a second
    beside it; where an input's size is unknown (stdin), a count of documents.  It
    takes the tqdm calls `run_dedup` makes (`update` with documents, `set_postfix`);
    how far an input is comes from the bytes of the lines decided (`read`), or, for
    an archive read record by record, from the file's position."""

    def __init__(self, mode: str, desc: str, sources: list[IO[bytes]]) -> None:
        sizes = [file_size(s) for s in sources]
        self.bytes = all(n is not None for n in sizes) and bool(sources)
        self.sizes = [n or 0 for n in sizes]
        self.bar: Any = None
        if _shown(mode):
            from tqdm import tqdm

            options: dict[str, Any] = (
                {"total": sum(self.sizes), "unit": "B", "unit_scale": True, "unit_divisor": 1024}
                if self.bytes
                else {"unit": " docs", "unit_scale": True}
            )
            self.bar = tqdm(desc=desc, file=sys.stderr, smoothing=0.1, mininterval=0.5, **options)
        self.done = 0  # the bytes of the inputs read through
        self.current: IO[bytes] | None = None
        self.decided = 0  # the bytes of the current input's lines decided (None: not told)
        self.by_lines = False
        self.docs = 0
        self.started = time.perf_counter()
        self.postfix: dict[str, Any] = {}

    def reading(self, k: int, source: IO[bytes]) -> None:
        """Input `k` (of those given) is read next, from `source`."""
        self.done = sum(self.sizes[:k])
        self.current = source
        self.decided, self.by_lines = 0, False

    def read(self, nbytes: int) -> None:
        """`nbytes` more of the current input decided (JSON Lines)."""
        self.decided += nbytes
        self.by_lines = True

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        """The counts to show beside the bar from the next `update` on."""
        self.postfix = values

    def update(self, docs: int) -> None:
        """`docs` more documents decided: the bar moved on, its counts with it."""
        self.docs += docs
        if self.bar is None:
            return
        values = dict(self.postfix)
        if not self.bytes:
            self.bar.set_postfix(refresh=False, **values)
            self.bar.update(docs)
            return
        rate = self.docs / max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix(refresh=False, docs=f"{self.docs:,}", rate=f"{rate:,.0f}/s", **values)
        try:
            if self.by_lines:
                at = self.done + self.decided
            else:  # (the file's position: ahead of what is decided by what is buffered)
                at = self.done + (self.current.tell() if self.current is not None else 0)
        except (OSError, ValueError):
            return
        self.bar.update(max(0, min(at, self.bar.total) - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
