"""Configuration as frozen dataclasses; the CLI, env vars and TOML all end up here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from streamdedup.errors import ConfigError, IndexOpenError

Verify = Literal["exact", "signature"]
# The similarity families (DESIGN.md "Items and similarity families") and the kinds of
# item they read.  Jaccard on texts is the default; the others are opt-in per index.
Metric = Literal["jaccard", "hamming", "cosine", "euclidean", "containment"]
ItemKind = Literal["text", "bits", "vector", "set"]
METRICS: tuple[Metric, ...] = ("jaccard", "hamming", "cosine", "euclidean", "containment")
ITEMS_OF: dict[str, tuple[ItemKind, ...]] = {
    "jaccard": ("text", "set"),
    "hamming": ("bits",),
    "cosine": ("vector", "text"),
    "euclidean": ("vector",),
    "containment": ("text", "set"),
}
ITEMS: tuple[ItemKind, ...] = ("text", "bits", "vector", "set")
DISTANCE_METRICS = frozenset({"hamming", "euclidean"})


@dataclass(frozen=True)
class ShingleSpec:
    kind: Literal["word", "char"] = "word"
    k: int = 5

    @classmethod
    def parse(cls, text: str) -> ShingleSpec:
        kind, sep, k = text.strip().partition(":")
        if kind not in ("word", "char") or not sep or not k.isdigit() or int(k) < 1:
            raise ConfigError(
                f"invalid shingle spec {text!r}: expected word:K or char:K with K >= 1"
            )
        return cls("word" if kind == "word" else "char", int(k))

    def __str__(self) -> str:
        return f"{self.kind}:{self.k}"


MAX_DOC_BYTES = 16 << 20  # the default size limit of one input record or page


@dataclass(frozen=True)
class Fields:
    """How an input record becomes a document: where its id and text are, the size
    limit, and for crawler input what the text is (`text_format` "html": the text
    field holds HTML; `extract`: main content or all text; `id_header`: the Kafka
    header holding the id of an HTML message, instead of its key).  Picklable: the
    preparing processes of `dedup --workers` decode with it."""

    id_field: str = "id"
    text_field: str = "text"
    max_bytes: int = MAX_DOC_BYTES
    text_format: Literal["text", "html"] = "text"
    extract: Literal["main", "all"] = "main"
    id_header: str | None = None
    # The item a record carries besides its id, when it is not a text (`IndexParams`
    # `item`): its field (`item_field`, default the item's name), its length N for
    # `bits`, its dimension D for `vector` (`nonzero`: a zero vector is refused, it
    # has no direction).  Set from the index's stored parameters (`for_params`), so
    # that a run on an existing index reads its items without being told again.
    item: ItemKind = "text"
    item_field: str | None = None
    bits: int = 0
    dim: int = 0
    nonzero: bool = False

    @classmethod
    def from_options(cls, values: dict[str, Any]) -> Fields:
        fmt = values.get("text_format") or "text"
        extract = values.get("extract") or "main"
        return cls(
            values["id_field"],
            values["text_field"],
            values["max_doc_bytes"],
            text_format="html" if fmt == "html" else "text",
            extract="all" if extract == "all" else "main",
            id_header=values.get("id_header"),
            item_field=values.get("item_field"),
        )

    def for_params(self, params: IndexParams) -> Fields:
        """These fields reading the items of an index with `params` (refused: HTML
        pages for an index whose items are not texts)."""
        nonzero = params.metric == "cosine"
        wanted = (params.item, params.bits, params.dim, nonzero)
        if wanted == (self.item, self.bits, self.dim, self.nonzero):
            return self
        if params.item != "text" and self.text_format == "html":
            raise ConfigError(
                f"--text-format html reads pages as texts; this index compares "
                f"{params.item} items (`metric` {params.metric})"
            )
        return replace(self, item=params.item, bits=params.bits, dim=params.dim, nonzero=nonzero)

    @property
    def item_name(self) -> str:
        """The field an item is read from: `item_field`, or the item's own name."""
        return self.item_field or self.item


# What an index's tables mean (hashing, fingerprints, signatures, layout).  Bumped
# whenever a change would make an older index answer wrongly; such an index is
# refused rather than misread.  1: fingerprints unseeded, signatures by bin minima
# of separately mixed hashes (before 2026-11-23).  2: signatures from fingerprint sets.
# 3: word tokens hashed over their UTF-8 bytes (2026-11-23).  4: postings kept as
# sorted runs.  5: content hashes by SHA-256 (not BLAKE2b), which CPUs with SHA
# extensions compute in half the time (2.8 against 5.3 us for a 3 KB page).  6: exact
# verification made exact: stored sets lead with their count of distinct 64-bit
# shingle hashes, the compressed normalised texts are stored (`texts`), and exact
# copies are listed (`copies`) so one takes over when its content's owner goes.
# 7: no fingerprint sets (`sets`): exact verification reads only the stored texts
# (3,455 -> 2,337 bytes a page of the crawl-like benchmark; format 6 would find no
# sets in a format-7 index and reject every candidate, hence the bump).
# 8: shingle hashes keyed by a random per-index key (`hash_key`), over the field of
# 2**61 - 1: an unkeyed polynomial mod 2**64 let anyone build colliding shingles.
INDEX_FORMAT = 8
HASH_KEY_BYTES = 16  # 128 random bits, from which sketch/hashing.py derives the hash


def public_params(rec: Mapping[str, object]) -> dict[str, object]:
    """A stored parameter record fit to print or log: the secret shingle hash key
    left out (whoever reads it could aim at hash collisions)."""
    return {k: v for k, v in rec.items() if k != "hash_key"}


def new_hash_key() -> bytes:
    """A fresh secret key for a new index's shingle hash (from the OS's CSPRNG)."""
    return os.urandom(HASH_KEY_BYTES)


# The rules an index's parameters obey, each checked in one place (the CLI checks them
# early, the engine and `tune` again for API callers).


def check_bands_rows(bands: int | None, rows: int | None) -> None:
    """`bands` and `rows` come as a pair or not at all."""
    if (bands is None) != (rows is None):
        raise ConfigError(
            "`bands` and `rows` go together: give both or neither", params=("bands", "rows")
        )


def check_threshold(threshold: float | None) -> None:
    """A given `threshold` is strictly between 0 and 1."""
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise ConfigError(
            f"`threshold` must be strictly between 0 and 1, got {threshold}",
            params=("threshold",),
        )


@dataclass(frozen=True)
class IndexParams:
    """What an index is built with.  Stored in the index; a reopen must agree.

    `hash_key` keys the shingle hash (sketch/hashing.py): random for every new index
    (so every `IndexParams()` gets its own), then carried wherever the index's hashes
    go -- its sealed segments' manifests, its changelog, a backfill's segment -- and
    never printed (`public_record`)."""

    threshold: float = 0.8
    num_perm: int = 128
    shingle: ShingleSpec = field(default_factory=ShingleSpec)
    bands: int = 18
    rows: int = 7
    verify: Verify = "exact"
    seed: int = 1
    hash_key: bytes = field(default_factory=new_hash_key, repr=False)
    # The family (`metric`) and its item: Jaccard on text shingles unless set.
    # `bits`: N, the length of a `bits` item; `dim`: D, a `vector` item's;
    # `max_distance`: a distance family's bar (Hamming: bits; Euclidean: L2), whose
    # `threshold` is then the row probability at the bar (Hamming: 1 - d/N);
    # `bucket_width`: Euclidean's a, the width of a projection's buckets.
    metric: Metric = "jaccard"
    item: ItemKind = "text"
    bits: int = 0
    max_distance: float | None = None
    dim: int = 0
    bucket_width: float | None = None

    @property
    def bar_value(self) -> float:
        """What the family's threshold rule compares with: the similarity threshold,
        or a distance family's largest distance that is a duplicate."""
        if self.metric in DISTANCE_METRICS:
            assert self.max_distance is not None
            return self.max_distance
        return self.threshold

    def reported(self, measure: float) -> float:
        """A verdict's measure as reported and stored: Jaccard to 4 decimals (more
        digits are noise; Hamming's distances are whole), a cosine or an L2 distance in
        full, as computed in double precision (from the stored float32 or counts)."""
        return measure if self.metric in ("cosine", "euclidean") else round(measure, 4)

    def to_record(self) -> dict[str, object]:
        rec: dict[str, object] = {
            "threshold": self.threshold,
            "num_perm": self.num_perm,
            "shingle": str(self.shingle),
            "bands": self.bands,
            "rows": self.rows,
            "verify": self.verify,
            "seed": self.seed,
            "hash_key": self.hash_key.hex(),
            "format": INDEX_FORMAT,
        }
        if (self.metric, self.item) != ("jaccard", "text"):  # (as it always was on texts)
            rec.update(
                metric=self.metric,
                item=self.item,
                bits=self.bits,
                max_distance=self.max_distance,
                dim=self.dim,
                bucket_width=self.bucket_width,
            )
        return rec

    def public_record(self) -> dict[str, object]:
        """`to_record` without the secret key: what `stats` and logs may show."""
        return public_params(self.to_record())

    @classmethod
    def from_record(cls, rec: dict[str, object]) -> IndexParams:
        found = rec.get("format", 1)
        if found != INDEX_FORMAT:
            raise IndexOpenError(
                f"this index has format {found}; this streamdedup reads format "
                f"{INDEX_FORMAT} only. Rebuild it into a new directory (`streamdedup "
                "replay --mode rebuild`, or `streamdedup dedup` over the same input)."
            )
        verify = str(rec["verify"])
        if verify not in ("exact", "signature"):
            raise ConfigError(f"unknown verify mode {verify!r} stored in index")
        try:
            key = bytes.fromhex(str(rec["hash_key"]))
        except (KeyError, ValueError):
            key = b""
        if len(key) != HASH_KEY_BYTES:
            raise IndexOpenError(
                f"the stored parameters lack a valid shingle hash key ({HASH_KEY_BYTES} "
                "bytes as hex): the index's parameter record is damaged"
            )
        return cls(
            threshold=float(rec["threshold"]),  # type: ignore[arg-type]
            num_perm=int(rec["num_perm"]),  # type: ignore[call-overload]
            shingle=ShingleSpec.parse(str(rec["shingle"])),
            bands=int(rec["bands"]),  # type: ignore[call-overload]
            rows=int(rec["rows"]),  # type: ignore[call-overload]
            verify="exact" if verify == "exact" else "signature",
            seed=int(rec["seed"]),  # type: ignore[call-overload]
            hash_key=key,
            **_family_fields(rec),
        )


def _family_fields(rec: Mapping[str, object]) -> dict[str, Any]:
    """The family part of a stored parameter record (absent: Jaccard on texts)."""
    metric = rec.get("metric", "jaccard")
    if metric == "jaccard" and "item" not in rec:  # (on texts: the record as it always was)
        return {}
    item = rec.get("item")
    if metric not in METRICS or item not in ITEMS_OF[str(metric)]:
        raise IndexOpenError(
            f"the index was built with `metric` {metric!r} on `item` {item!r}, which this "
            f"streamdedup does not know (it knows {', '.join(METRICS)})"
        )
    distance, width = rec.get("max_distance"), rec.get("bucket_width")
    return {
        "metric": metric,
        "item": item,
        "bits": int(rec.get("bits", 0)),  # type: ignore[call-overload]
        "max_distance": None if distance is None else float(distance),  # type: ignore[arg-type]
        "dim": int(rec.get("dim", 0)),  # type: ignore[call-overload]
        "bucket_width": None if width is None else float(width),  # type: ignore[arg-type]
    }


@dataclass(frozen=True)
class EngineOptions:
    """Run-time knobs that do not change what the index contains."""

    # Bounds on pathological input only: on the template-heavy benchmark (20,000 pages,
    # buckets of up to 1,100 template siblings) neither binds, and every near duplicate
    # LSH finds is checked (docs/benchmarks.md).  They were 100 and 32, which lost true
    # near duplicates behind template siblings before the search was compiled.
    max_bucket_candidates: int = 2000
    max_exact_checks: int = 2000
    batch_size: int = 8000
    map_size: int = 1 << 30
    # "process": a commit survives the process (kill -9, OOM) at once; the OS writes
    # it to disk soon after.  "full": fsync on every commit, survives power loss too.
    durability: Literal["process", "full"] = "process"
    # Time window: documents whose timestamp is older than the stream time minus ttl_ms
    # are forgotten (None: keep everything).  Documents without a
    # timestamp never expire.
    ttl_ms: int | None = None
    max_expire_per_batch: int = 20_000
    # Stream time (see clock_window) moves only with timestamps at most this
    # far ahead of the wall clock (None: no bound).  A message further ahead is an
    # outlier: it is stored as of the current stream time and moves nothing, so one
    # bad producer clock cannot expire the whole window.  Timestamps of 0 or below
    # count as none (Kafka's "no timestamp" is -1).
    max_clock_skew_ms: int | None = 3_600_000
    # Stream time is the newest time a majority of the last `clock_window` trusted
    # timestamps have reached, so a few messages ahead of the rest (inside the skew
    # bound) move nothing (engine/clock.py); 1: the newest timestamp.
    clock_window: int = 31
    # Sealed segments: after a batch leaves at least this many documents in the open
    # segment, they are sealed into a new segment (None: only `streamdedup seal`),
    # under `segments_dir` (None: INDEX/segments).
    seal_every: int | None = None
    segments_dir: str | None = None


def parse_duration_ms(text: str) -> int:
    """'7d', '12h', '30m', '45s', '250ms' or plain seconds -> milliseconds."""
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
    t = text.strip().lower()
    for suffix in ("ms", "s", "m", "h", "d", "w"):
        if t.endswith(suffix) and t[: -len(suffix)].replace(".", "", 1).isdigit():
            value = float(t[: -len(suffix)]) * units[suffix]
            break
    else:
        if not t.replace(".", "", 1).isdigit():
            raise ConfigError(f"not a duration: {text!r} (examples: 7d, 12h, 30m, 90s)")
        value = float(t) * 1000
    if value <= 0:
        raise ConfigError(f"a duration must be positive, got {text!r}")
    return int(value)
