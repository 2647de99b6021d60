"""streamdedup: streaming, incremental near-duplicate detection.

Embedding without Kafka::

    from streamdedup import Deduplicator

    with Deduplicator("index-dir", threshold=0.8, num_perm=128) as dd:
        verdict = dd.check("doc-1", "some text")
        verdicts = dd.check_batch([("doc-2", "more text"), ("doc-3", "and more")])

`Deduplicator` is imported on first use, not with the package: the command line
(`streamdedup.cli`) must set up its process before numpy loads (see there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamdedup.errors import (
    ConfigError,
    IndexOpenError,
    ParameterMismatchError,
    StreamDedupError,
)
from streamdedup.models import Document, Verdict

if TYPE_CHECKING:
    from streamdedup.engine.deduplicator import Deduplicator

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Deduplicator":
        from streamdedup.engine.deduplicator import Deduplicator

        return Deduplicator
    raise AttributeError(f"module 'streamdedup' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "Deduplicator",
    "Document",
    "IndexOpenError",
    "ParameterMismatchError",
    "StreamDedupError",
    "Verdict",
    "__version__",
]
