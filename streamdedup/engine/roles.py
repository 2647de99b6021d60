"""What the engine reads and writes inside its write transaction, as small role
protocols (`MetaRole`, `DocumentsRole`, `ExpiryRole`, `BucketsRole`, `WritesRole`)
and their union `Store`, which the engine's rooms type against.  Two stores fill
them: `Tables` (one index: store/tables/, whose parts match the roles) and the
sealed-segment overlay `View` (engine/sealed.py).  The bulk path asks the store for
the tables it stores whole lists in (`Store.bulk_writes`), so no caller needs to
ask which store it holds."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streamdedup.models import Record
from streamdedup.store.tables import Tables


class MetaRole(Protocol):
    """The index's named values (`meta`)."""

    def meta(self, name: str) -> Any: ...
    def set_meta(self, name: str, value: Any) -> None: ...


class DocumentsRole(Protocol):
    """The stored documents, read: records, signatures, texts, ids and contents."""

    def record(self, docno: int) -> Record | None: ...
    def signature(self, docno: int) -> bytes | None: ...
    def signatures(
        self, docnos: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint16]]: ...
    def text(self, docno: int) -> bytes: ...
    def docno_for_id(self, key: bytes) -> int | None: ...
    def docno_for_content(self, content_hash: bytes) -> int | None: ...
    def first_copy(self, content_hash: bytes) -> int | None: ...
    def prefetch(self, keys: list[bytes], contents: list[bytes]) -> None: ...


class ExpiryRole(Protocol):
    """The documents in time order, for the time window."""

    def oldest(self) -> tuple[int, int] | None: ...
    def newest_timestamp(self, at_most: int) -> int: ...
    def delete_expiry(self, timestamp_ms: int, docno: int) -> None: ...


class BucketsRole(Protocol):
    """The LSH buckets: a batch's read ahead and buffered postings, and candidates."""

    def is_unshared(self, row: bytes) -> bool: ...
    def batch_postings(self, band_keys: list[bytes], cap: int) -> None: ...
    def flush_postings(self) -> None: ...
    def candidates(self, band_keys: list[bytes], cap: int) -> npt.NDArray[np.int64]: ...

    # whether the last `candidates` call left postings out of a bucket (the cap)
    capped: bool


class WritesRole(Protocol):
    """Documents stored and forgotten one by one, and content passed to a copy."""

    def put_document(
        self,
        docno: int,
        key: bytes,
        record: Record,
        signature: bytes | None,
        bucket_keys: list[bytes],
        register_content: bool,
        text: bytes | None = None,
        row: bytes | None = None,
    ) -> bool: ...
    def remove_document(self, docno: int, key: bytes, bucket_keys: list[bytes]) -> None: ...
    def adopt(
        self,
        docno: int,
        content_hash: bytes,
        signature: bytes | None,
        bucket_keys: list[bytes],
        text: bytes | None,
    ) -> None: ...


class Store(MetaRole, DocumentsRole, ExpiryRole, BucketsRole, WritesRole, Protocol):
    """What the engine reads and writes in its write transaction, its roles together:
    `Tables` (one index) or `View` (an index with sealed segments).

    `bulk_writes`: the store the bulk path (engine/bulk.py) reads ahead from and
    stores whole lists in -- the one index's tables; None where the bulk path does
    not apply (an index with sealed segments decides every document one by one)."""

    def bulk_writes(self) -> Tables | None: ...


__all__ = [
    "BucketsRole",
    "DocumentsRole",
    "ExpiryRole",
    "MetaRole",
    "Store",
    "WritesRole",
]
