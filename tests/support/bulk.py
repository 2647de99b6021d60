"""The differential run every family's tests make: the same documents checked in
batches (the bulk path, a batch searched at once) and one at a time (the loop)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streamdedup.engine.deduplicator import Deduplicator


def batch_and_one_by_one(
    new_dir: Callable[[str], Path], docs: Sequence[Any], batch: int, **engine: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The verdicts of `docs` ((id, item) pairs) checked in batches of `batch`, and one
    by one with the bulk path off, each run in a new index (`new_dir`, e.g.
    `tmp_path_factory.mktemp`) with the Deduplicator options `engine`."""
    runs = []
    for bulk in (True, False):
        with Deduplicator(new_dir("idx"), **engine) as dd:
            dd.bulk = dd.bulk_search = bulk
            step = batch if bulk else 1
            runs.append(
                [
                    v.to_dict()
                    for k in range(0, len(docs), step)
                    for v in dd.check_batch(docs[k : k + step])
                ]
            )
    return runs[0], runs[1]
