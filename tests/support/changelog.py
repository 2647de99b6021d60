"""An index rebuilt from its change stream, next to the index itself (no Kafka: the
records a worker would publish to its changelog are applied directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamdedup.config import IndexParams
from streamdedup.engine.deduplicator import Counters, Deduplicator
from streamdedup.kafka.changelog import Restorer, encode_changes, params_record
from streamdedup.models import Document
from streamdedup.store.index import Index
from tests.support.store import dump


def restore_from_changes(
    tmp_path: Path, docs: list[Document], batch: int = 100, **engine: Any
) -> tuple[Counters, IndexParams, IndexParams | None]:
    """Check `docs` in batches of `batch` into TMP/orig (`engine`: the Deduplicator's
    options), as a worker mirroring to a changelog; restore the published records
    into TMP/copy and assert that every table of the two is the same.  Returns the
    engine's counters, its parameters and those the restore read."""
    records = []
    with Deduplicator(tmp_path / "orig", **engine) as dd:
        records.append(params_record(dd.params))
        for i in range(0, len(docs), batch):
            dd.check_batch(docs[i : i + batch])
            records += encode_changes(dd.changes)
        counters, params = dd.counters, dd.params
    restored = Index(tmp_path / "copy")
    r = Restorer(restored)
    r.add(records)
    r.finish({}, "g/t")
    restored.close()
    a, b = dump(tmp_path / "orig"), dump(tmp_path / "copy")
    for name in a:
        assert a[name] == b[name], name
    return counters, params, r.params
