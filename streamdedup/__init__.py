"""streamdedup: streaming, incremental near-duplicate detection.

Embedding without Kafka::

    from streamdedup import Deduplicator

    with Deduplicator("index-dir", threshold=0.8, num_perm=128) as dd:
        verdict = dd.check("doc-1", "some text")
        verdicts = dd.check_batch([("doc-2", "more text"), ("doc-3", "and more")])

Crawled pages: `page_text(html_bytes)` is the text a page is checked by (or a
`Rejected` saying why there is none), `read_warc(archive)` an archive's records as
documents, skips and rejects, each with its URI and record id.

`Deduplicator` (and the HTML and WARC helpers) are imported on first use, not with
the package: the command line (`streamdedup.cli`) must set up its process before
numpy loads (see there), and a user of the engine alone needs no HTML parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamdedup.errors import (
    ConfigError,
    IndexOpenError,
    ParameterMismatchError,
    StreamDedupError,
)
from streamdedup.models import Document, Rejected, Verdict

if TYPE_CHECKING:
    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.inputs.html import page_text
    from streamdedup.inputs.warc import read_warc

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Deduplicator":
        from streamdedup.engine.deduplicator import Deduplicator

        return Deduplicator
    if name == "page_text":
        from streamdedup.inputs.html import page_text

        return page_text
    if name == "read_warc":
        from streamdedup.inputs.warc import read_warc

        return read_warc
    raise AttributeError(f"module 'streamdedup' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "Deduplicator",
    "Document",
    "IndexOpenError",
    "ParameterMismatchError",
    "Rejected",
    "StreamDedupError",
    "Verdict",
    "__version__",
    "page_text",
    "read_warc",
]
