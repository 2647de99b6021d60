"""The engine's sealed segments (`Sealing`): opening the segments the index registers
(again, when another process sealed), sealing the documents indexed so far, asking
the segments a batch's questions ahead and receiving their answers, recording their
round trips, and the segments a batch dropped (every document in them expired or
replaced).  The segment machinery itself -- files, readers, the overlay store -- is
store/segments.py, engine/segments.py and engine/sealed.py; this is the
Deduplicator's glue to it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streamdedup.config import EngineOptions, IndexParams
from streamdedup.engine.params import resolve_params
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.sealed.asking import Sealed, Sent
from streamdedup.engine.sealed.probes import LocalReader, SegmentReader
from streamdedup.errors import ConfigError, ParameterMismatchError
from streamdedup.sketch.family import LshFamily, Scale
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.manifest import Manifest
from streamdedup.store.segment.registry import (
    SegmentEntry,
    attach,
    drop_segment,
    located_segments,
    next_number,
    remove_dropped,
    segments,
)
from streamdedup.store.segment.sealing import recover, seal
from streamdedup.store.tables import Tables

RemoteSegments = Callable[[SegmentEntry], SegmentReader]


class SegmentsChanged(Exception):
    """The index's sealed segments changed since they were opened (another process
    sealed): the batch is asked again of the new set."""


def start_from(index: Index, segment: str | os.PathLike[str], **asked: Any) -> None:
    """Attach `segment` as the base of this (new) index, after checking the explicit
    detection options against its parameters."""
    manifest = Manifest.read(segment)
    try:
        resolve_params(IndexParams.from_record(manifest.params), **asked)
    except ParameterMismatchError as exc:
        raise ParameterMismatchError(
            f"the base segment {segment}: {exc}", params=exc.params
        ) from exc
    attach(index, segment)


def probe_cut(lsh: LshFamily[Any, Any], params: IndexParams, margin: float) -> tuple[float, float]:
    """The threshold and margin a probe carries: a segment returns the stored items of
    the candidates whose MinHash estimate (`estimate_jaccard`) is at least threshold
    - margin.  Jaccard's own; for another family, its cut (the bar's score less its
    margin) read on MinHash's scale (`Scale.cut`), so a segment sends exactly the
    items the writer may check."""
    scale = Scale.of_family(lsh)
    if scale.identity:
        return params.threshold, margin
    return scale.cut(lsh.bar(params.bar_value).floor - margin), 0.0


class Sealing:
    """An engine's sealed segments, open (`sealed`; None: the index has none)."""

    def __init__(
        self,
        index: Index,
        params: IndexParams,
        options: EngineOptions,
        cut: tuple[float, float],
        remote: RemoteSegments | None,
    ) -> None:
        self.index = index
        self.params = params
        self.options = options
        self._cut = cut  # (what a probe asks for: `probe_cut`)
        self._remote = remote
        self._seen: list[int] = []
        self._ahead: list[tuple[list[int], Sent]] = []  # batches asked ahead
        self.sealed: Sealed | None = None

    def open(self) -> None:
        """Open (again) the sealed segments the index registers; those open already
        stay open (a local segment's checksum is verified once per process)."""
        recover(self.index)  # a seal that committed and did not rename (yet) is finished
        entries = located_segments(self.index)  # inside the index: wherever it is now
        old = {} if self.sealed is None else dict(self.sealed.readers)
        self.sealed = None
        self._seen = [e.number for e in entries]
        keep = {e.number for e in entries if e.number in old and old[e.number].entry == e}
        for n, r in old.items():
            if n not in keep:
                r.close()
        if not entries:
            return
        readers: list[SegmentReader] = []
        try:
            for e in entries:
                if e.number in keep:
                    readers.append(old.pop(e.number))
                elif not e.remote:
                    readers.append(LocalReader(e, self.params))
                elif self._remote is None:
                    raise ConfigError(
                        f"the index at {self.index.path} has remote sealed segments (segment "
                        f"{e.number}: {e.id}); give --bootstrap-servers so that their "
                        "segment servers can be asked"
                    )
                else:
                    readers.append(self._remote(e))
        except BaseException:
            for r in readers:
                r.close()
            raise
        self.sealed = Sealed(readers, self.params)
        self.index.read(self.sealed.load_masks)

    def close(self) -> None:
        if self.sealed is not None:
            self.sealed.close()
            self.sealed = None

    def seal(self, dest: str | os.PathLike[str] | None, *, remote: bool) -> Manifest:
        """Move every document indexed so far into a new sealed segment (`dest`, by
        default the next number under `EngineOptions.segments_dir`, else
        INDEX/segments)."""
        if dest is None:
            number = self.index.read(next_number)
            base = self.options.segments_dir or os.path.join(self.index.path, "segments")
            dest = os.path.join(base, f"{number:06d}")
        manifest = seal(self.index, Path(dest), remote=remote)
        self.open()
        return manifest

    def maybe_seal(self) -> None:
        every = self.options.seal_every
        if every and self.index.read(lambda t: t.count("docs")) >= every:
            self.seal(None, remote=False)

    def ask_ahead(self, parts: list[Prepared]) -> None:
        """Send the sealed segments the questions of the batch `apply` gets next."""
        if self.sealed is None:
            return
        self._ahead = [*self._ahead[-1:], ([id(p) for p in parts], self._send(parts))]

    def _send(self, parts: Sequence[Prepared]) -> Sent:
        assert self.sealed is not None
        return self.sealed.send(
            parts,
            self.options.max_bucket_candidates,
            *self._cut,
            self.options.max_expire_per_batch if self.options.ttl_ms else 0,
        )

    def asked(self, parts: list[Prepared]) -> Sent | None:
        """The questions of `parts` sent ahead (`ask_ahead`), if they were; forgotten
        here."""
        mine = [id(p) for p in parts]
        sent = next((s for ids, s in self._ahead if ids == mine), None)
        self._ahead = [(ids, s) for ids, s in self._ahead if ids != mine]
        return sent

    def receive(self, parts: list[Prepared], sent: Sent | None) -> None:
        """Before a run of the batch's transaction: the segments' answers to its
        questions (sent now if not sent ahead, or if the segments changed since)."""
        if self.sealed is None:
            return
        if sent is None or sent.segments is not self.sealed:  # not sent, or sealed since
            sent = self._send(parts)
        self.sealed.receive(sent)

    def check_unchanged(self, t: Tables) -> None:
        """Raise SegmentsChanged if another process sealed since they were opened."""
        if [e.number for e in segments(t)] != self._seen:
            raise SegmentsChanged

    def end_run(self, t: Tables) -> list[int]:
        """In a run's transaction, after the batch: the segments' answers recorded,
        and the segments every document of which is now masked dropped (returned)."""
        if self.sealed is None:
            return []
        self._record_answers(t, self.sealed)
        dropped = self.sealed.fully_masked()
        for n in dropped:  # every document expired or replaced
            drop_segment(t, n)
        return dropped

    @staticmethod
    def _record_answers(t: Tables, sealed: Sealed) -> None:
        """Keep the last answer of each sealed segment in the index, for `stats`."""
        now = time.time_ns() // 1_000_000
        seen = dict(t.meta(MetaKey.SEGMENT_ANSWERS) or {})
        for n, rtt in sealed.round_trips.items():
            seen[str(n)] = {
                "at_ms": now,
                "round_trip_ms": round(rtt * 1000, 3),
                "waited_ms": round(sealed.waited.get(n, 0.0) * 1000, 3),
            }
        sealed.waited = {}
        t.set_meta(MetaKey.SEGMENT_ANSWERS, seen)

    def commit(self, dropped: list[int]) -> None:
        """After the batch committed: the segments' state kept, those it dropped
        closed and discarded."""
        if self.sealed is None:
            return
        self.sealed.commit()
        if dropped:
            entries = [self.sealed.readers[n].entry for n in dropped]
            self.open()  # (closes their readers)
            self._discard(entries)

    def _discard(self, dropped: list[SegmentEntry]) -> None:
        """The directories of sealed segments the index just dropped (every document
        in them expired or was replaced): one inside the index directory
        (`--seal-every`'s) is removed -- the index made it, nothing else registers it;
        it stayed on disk for ever before.  Another (a `seal` to another disk, a
        remote segment's servers) is the operator's: a warning says it can go."""
        import logging  # (rare: not loaded with the engine)

        # (the engine's logger, as before the split: operators filter on it)
        log = logging.getLogger("streamdedup.engine.deduplicator")
        for entry in dropped:
            if remove_dropped(self.index, entry):
                log.info(
                    "sealed segment %d dropped: every document in it expired or was "
                    "replaced; its directory %s (inside the index) was removed",
                    entry.number,
                    entry.path,
                )
            else:
                log.warning(
                    "sealed segment %d dropped: every document in it expired or was "
                    "replaced; nothing reads %s any more: delete it%s",
                    entry.number,
                    entry.path,
                    " once its segment servers are stopped" if entry.remote else "",
                )


__all__ = ["RemoteSegments", "Sealing", "SegmentsChanged", "start_from"]
