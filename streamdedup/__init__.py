"""streamdedup: streaming, incremental near-duplicate detection.

Embedding without Kafka::

    from streamdedup import Deduplicator

    with Deduplicator("index-dir", threshold=0.8, num_perm=128) as dd:
        verdict = dd.check("doc-1", "some text")
        verdicts = dd.check_batch([("doc-2", "more text"), ("doc-3", "and more")])
"""

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    ConfigError,
    IndexOpenError,
    ParameterMismatchError,
    StreamDedupError,
)
from streamdedup.models import Document, Verdict

__version__ = "0.1.0"

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
