"""Which implementation of the inner loops runs: the compiled `_kernels` module, or
the numpy code it mirrors.

A layer of its own, below sketch, store, engine and kafka, which all call it (the
shingles and signatures, the postings runs, the candidate search, the verdict
partitions); it imports nothing of the package.  Its C sources sit beside this file,
one per part they serve (module.c names them).  The module is built when the package
is installed, if a C compiler is there (it is optional, so an install never fails for
want of one).  The numpy functions stay
the definition and the fallback, and the tests hold the two to the same results.
`STREAMDEDUP_KERNELS=numpy` runs the numpy code even where the module was built.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

# Arrays cross into C through the buffer protocol: numpy arrays or bytes.
Buffer = Any


class Kernels(Protocol):
    """The functions of `_kernels` (each one's docstring names what it mirrors)."""

    def sketch(
        self,
        hashes: Buffer,
        offsets: Buffer,
        num_perm: int,
        key: int,
        probes: Buffer,
        ranks: Buffer,
        bases: Buffer,
        rows: int,
    ) -> tuple[bytes, bytes]: ...

    def word_shingles(
        self,
        data: bytes,
        is_word: Buffer,
        doc_ends: Buffer,
        k: int,
        keys: tuple[int, ...],
    ) -> tuple[bytes, ...] | int: ...

    def window_hashes(
        self, values: Buffer, lengths: Buffer, k: int, base: int, start: int
    ) -> bytes: ...

    def signatures(
        self, values: Buffer, offsets: Buffer, num_perm: int, probes: Buffer, ranks: Buffer
    ) -> bytes: ...

    def jaccard(self, a: Buffer, b: Buffer) -> float: ...

    def kafka_partitions(self, keys: list[bytes], n: int) -> list[int]: ...

    # candidate search
    def summarise(self, hashes: Buffer) -> bytes: ...

    def choose_packed(
        self,
        mine: bytes,
        sets: tuple[dict[int, bytes], ...],
        ranked: list[int],
        est: Buffer,
        threshold: float,
        margin: float,
        max_checks: int,
        start: int,
        best: int,
        best_sim: float,
        rows: Buffer | None = None,
        counts: Buffer | None = None,
        sizes: Buffer | None = None,
        contain: bool = False,
    ) -> tuple[int, float, int, bool]: ...

    def summarise_many(self, hashes: Buffer, offsets: Buffer, picks: Buffer) -> list[bytes]: ...

    def choose_batch(
        self,
        mines: list[bytes],
        sets: tuple[dict[int, bytes], ...],
        ranked: Buffer,
        est: Buffer,
        at: Buffer,
        threshold: float,
        margin: float,
        max_checks: int,
        best: Buffer,
        best_sim: Buffer,
        checks: Buffer,
        first: int,
        rows: Buffer | None = None,
        counts: Buffer | None = None,
        sizes: Buffer | None = None,
        contain: bool = False,
    ) -> int: ...

    def gather(
        self,
        band_keys: list[bytes],
        read_ahead: Mapping[bytes, Sequence[int]],
        added: Mapping[bytes, Sequence[int]],
        hot: set[bytes],
        cap: int,
    ) -> tuple[bytes, bool]: ...

    def rank(
        self,
        sig: Buffer,
        matrix: Buffer,
        slot: Buffer,
        docnos: Buffer,
        bar: float,
        limit: int,
        fill: bool,
    ) -> tuple[bytes | None, int, list[int], bytes]: ...

    # postings
    def sort_pairs(self, keys: Buffer, values: Buffer) -> tuple[bytes, bytes]: ...

    def merge_runs(
        self, older_keys: Buffer, older_docnos: Buffer, newer_keys: Buffer, newer_docnos: Buffer
    ) -> bytes | None: ...

    def probe_runs(
        self, keys: Buffer, runs: list[tuple[int, Buffer]], cap: int
    ) -> tuple[bytes, bytes, bytes]: ...

    # the search of a whole batch (engine/search.py)
    def gather_batch(
        self,
        rows: list[list[bytes]],
        docnos: Buffer,
        read_ahead: Mapping[bytes, Sequence[int]],
        added: Mapping[bytes, list[int]],
        hot: set[bytes],
        cap: int,
    ) -> tuple[bytes, bytes, bytes]: ...

    def rank_batch(
        self,
        sigs: Buffer,
        matrix: Buffer,
        slot: Buffer,
        flat: Buffer,
        offsets: Buffer,
        bar: float,
        limit: int,
    ) -> tuple[bytes, bytes, bytes, bytes]: ...


def load(choice: str | None = None) -> Kernels | None:
    """The compiled kernels, or None for the numpy code (`choice` "numpy", or the
    module not built)."""
    if choice is None:
        choice = os.environ.get("STREAMDEDUP_KERNELS", "")
    if choice.strip().lower() == "numpy":
        return None
    try:
        return cast(Kernels, importlib.import_module("streamdedup.kernels._kernels"))
    except ImportError:
        return None


native = load()


def describe() -> str:
    if native is not None:
        return "compiled kernels"
    if load("native") is not None:
        return "numpy kernels: STREAMDEDUP_KERNELS=numpy"
    return "numpy kernels: the compiled ones were not built, no C compiler at install"
