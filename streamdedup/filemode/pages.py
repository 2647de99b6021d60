"""HTML extraction in other processes, for `dedup --workers N` on WARC archives.

Extracting a page's main content is about half of a WARC run's time (see the
README's benchmarks) and holds the GIL throughout, so threads do not help: pages go
to `workers` spawned processes, in groups, while this process reads the archive
ahead and applies the previous batch to the index.  This process extracts one group
in `workers + 1` itself, as it reads them: within a batch it would otherwise only
wait.  Results come back in archive order.  At most `MAX_AHEAD_BYTES` of page bodies
are in flight: a batch of 8,000 crawled pages would be a quarter of a gigabyte.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from streamdedup.errors import StreamDedupError
from streamdedup.inputs.html import Extract
from streamdedup.inputs.warc import Item, Page, PageItem, page_document
from streamdedup.models import Document, Rejected

GROUP_PAGES = 32  # pages per task: amortises the task's round trip (~0.1 ms)
MAX_AHEAD_BYTES = 64 << 20


def _extract(pages: list[Page], extract: Extract) -> list[Document | Rejected]:
    """A worker's task (a module-level function: it is pickled by name)."""
    return [page_document(p, extract) for p in pages]


Group = tuple[list[PageItem], "Future[list[Document | Rejected]] | None", int]


def extracted(items: Iterator[PageItem], workers: int, extract: Extract) -> Iterator[Item]:
    """`items` with each page replaced by its document (or reject), in order."""
    ctx = multiprocessing.get_context("spawn")  # never fork: the index is open here
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    pending: deque[Group] = deque()
    ahead = groups = 0
    group: list[PageItem] = []
    try:
        for entry in items:
            group.append(entry)
            if sum(isinstance(i, Page) for i, _ in group) >= GROUP_PAGES:
                groups += 1
                local = groups % (workers + 1) == 0
                ahead += _submit(None if local else pool, pending, group, extract)
                group = []
            while pending and (ahead > MAX_AHEAD_BYTES or _done(pending[0])):
                ahead -= pending[0][2]
                yield from _finish(pending.popleft())
        if group:
            _submit(pool, pending, group, extract)
        while pending:
            yield from _finish(pending.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _submit(
    pool: ProcessPoolExecutor | None,
    pending: deque[Group],
    group: list[PageItem],
    extract: Extract,
) -> int:
    """Queue a group: to the pool, or (`pool` None) extracted here and now."""
    pages = [i for i, _ in group if isinstance(i, Page)]
    future: Future[list[Document | Rejected]] | None = None
    if pages and pool is not None:
        future = pool.submit(_extract, pages, extract)
    elif pages:
        future = Future()
        future.set_result(_extract(pages, extract))
    size = sum(len(p.payload) for p in pages) if pool is not None else 0
    pending.append((group, future, size))
    return size


def _done(group: Group) -> bool:
    return group[1] is None or group[1].done()


def _finish(group: Group) -> Iterator[Item]:
    entries, future, _ = group
    try:
        documents = iter(future.result() if future is not None else ())
    except BrokenProcessPool as exc:
        raise StreamDedupError("an extraction process died (out of memory?)") from exc
    for item, ref in entries:
        yield (next(documents) if isinstance(item, Page) else item), ref
