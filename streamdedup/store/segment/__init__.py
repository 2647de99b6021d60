"""Sealed segments on the store's side, one module per concern: `manifest` (the
files of a segment: layout, checksum, `manifest.json`), `claim` (the scratch
directories a seal or a build marks as its own), `reading` (`SealedSegment`: a
segment opened and verified), `registry` (the open index's list of its segments,
and `attach`), `sealing` (`seal` and `recover`) and `building` (`SegmentBuilder`: a
segment written from sorted rows).  Kept apart so that a reader of one (a segment
server opening a segment) need not read the others (how an index is emptied into
one)."""
