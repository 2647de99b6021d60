"""The parameters of an index of another family than Jaccard on texts (`--metric`,
DESIGN.md "Items and similarity families"): each family's item, its defaults and its
bar, checked before anything is stored.  Apart from `params.py`, which settles
Jaccard's and compares any index's stored parameters, because every family brings
its own rules (Hamming: the length of the bit strings, the distance in bits)."""

from __future__ import annotations

import math

from streamdedup.config import (
    ITEMS_OF,
    METRICS,
    IndexParams,
    ItemKind,
    Metric,
    ShingleSpec,
    Verify,
)
from streamdedup.errors import ConfigError
from streamdedup.sketch.containment import plan
from streamdedup.sketch.lsh import Banding, banding, check_num_perm, tune_for_recall
from streamdedup.sketch.projections import hyperplane_probability, pstable_probability

# Hamming: bit strings of 8 to 4,096 bits, in whole bytes (as faiss's binary indexes
# take them; the signature is the string, 2 bytes a bit); a duplicate by default
# within 5% of the bits (SimHash's 3 of 64).
MIN_BITS, MAX_BITS = 8, 1 << 12
HAMMING_DEFAULT_SHARE = 0.05
# The bits sampled into bands, b x r at most: at 64-bit SimHash's bar (d = 3) the
# tuned 11 x 22 reaches 99% of the pairs at the bar; within 128, at most 94.5% with
# as few candidates.
HAMMING_SAMPLES = 256


# Vectors: 1 to 16,384 dimensions (embeddings have 64 to 4,096), K = 256 projections
# by default (the signature: 2 bytes each; b x r from the tuner within them).
MIN_DIM, MAX_DIM = 1, 1 << 14
VECTOR_NUM_PERM = 256
# Cosine: a duplicate by default at 0.9 (semantic de-duplication keeps 0.9 to 0.95).
COSINE_DEFAULT = 0.9
# Containment: K = 128 MinHash positions (the Jaccard default): at T = 0.8 the plan
# promises an earlier item up to 8 times the new one's size, with 391 bucket keys an
# item; K = 256 reaches 16 times with 989 (sketch/containment.py).
CONTAINMENT_NUM_PERM = 128
CONTAINMENT_DEFAULT = 0.8
# Euclidean: buckets four times the bar wide by default (Datar et al.'s w = 4 in units
# of the distance that must collide: a row probability of 0.80 at the bar).
BUCKET_WIDTHS = 4.0


def family_params(
    metric: str,
    *,
    item: str | None,
    bits: int | None,
    dim: int | None,
    max_distance: float | None,
    bucket_width: float | None,
    threshold: float | None,
    num_perm: int | None,
    bands: int | None,
    rows: int | None,
    verify: Verify | None,
    seed: int,
    shingle: ShingleSpec | None = None,
) -> IndexParams:
    """The parameters of a new index of family `metric` (not Jaccard)."""
    if metric not in METRICS:
        raise ConfigError(
            f"unknown `metric` {metric!r}: one of {', '.join(METRICS)}", params=("metric",)
        )
    kind = _item(metric, item)
    _refuse_others(metric, bits=bits, dim=dim, bucket_width=bucket_width)
    if metric == "containment":
        _refuse_others(metric, max_distance=max_distance)
        return _containment(
            kind, threshold, num_perm, bands, rows, verify, seed, shingle or ShingleSpec()
        )
    if metric == "hamming":
        return _hamming(kind, bits, max_distance, threshold, num_perm, bands, rows, verify, seed)
    k = VECTOR_NUM_PERM if num_perm is None else num_perm
    check_num_perm(k)
    if kind == "text":  # (cosine of shingle counts: SimHash's signs come 64 at a time)
        _no_dim(dim)
        if k % 64:
            raise ConfigError(
                f"`num_perm` of a cosine index on texts is a multiple of 64, got {k}",
                params=("num_perm",),
            )
    if metric == "cosine":
        c = _cosine(threshold, max_distance)
        bar_share, distance, width = float(hyperplane_probability(c)), None, None
    else:
        distance = _euclidean_bar(max_distance, threshold)
        width = _bucket_width(distance, bucket_width)
        c = bar_share = float(pstable_probability(distance, width))
    band = _banding(bar_share, k, bands, rows, sampled=False)
    return IndexParams(
        threshold=c,
        num_perm=k,
        bands=band.bands,
        rows=band.rows,
        verify=verify or "exact",
        seed=seed,
        metric="cosine" if metric == "cosine" else "euclidean",
        item=kind,
        dim=0 if kind == "text" else _dim(dim),
        max_distance=distance,
        bucket_width=width,
        shingle=shingle or ShingleSpec(),
    )


def _hamming(
    kind: ItemKind,
    bits: int | None,
    max_distance: float | None,
    threshold: float | None,
    num_perm: int | None,
    bands: int | None,
    rows: int | None,
    verify: Verify | None,
    seed: int,
) -> IndexParams:
    """A Hamming index: N bits, the bar in bits, bit sampling's b x r."""
    n = _bits(bits)
    d = _max_distance(n, max_distance, threshold)
    if num_perm is not None and num_perm != n:
        raise ConfigError(
            f"`num_perm` is the signature's length; a Hamming index's signature is the "
            f"bit string itself ({n} positions). Choose how many bits are sampled into "
            "buckets with `bands` x `rows`",
            params=("num_perm",),
        )
    share = 1.0 - d / n  # the row probability at the bar (seeds: 1 - d/N)
    band = _banding(share, HAMMING_SAMPLES, bands, rows, sampled=True)
    return IndexParams(
        threshold=share,
        num_perm=n,
        bands=band.bands,
        rows=band.rows,
        verify=verify or "exact",
        seed=seed,
        metric="hamming",
        item=kind,
        bits=n,
        max_distance=float(d),
    )


def _containment(
    kind: ItemKind,
    threshold: float | None,
    num_perm: int | None,
    bands: int | None,
    rows: int | None,
    verify: Verify | None,
    seed: int,
    shingle: ShingleSpec,
) -> IndexParams:
    """A containment index: T, K, and the bands of every class offset from the plan
    (`IndexParams.bands`: the bucket keys an item carries; `rows` 1)."""
    if bands is not None or rows is not None:
        raise ConfigError(
            "`metric` containment bands each pair of size classes its own way, from "
            "`threshold` and `num_perm`; leave `bands` and `rows` out",
            params=("bands", "rows"),
        )
    if verify == "signature":
        raise ConfigError(
            "`metric` containment decides by the exact check only: a signature "
            "estimates a Jaccard, which says little of a containment without the sizes",
            params=("verify", "metric"),
        )
    t = CONTAINMENT_DEFAULT if threshold is None else threshold
    if not 0.0 < t <= 1.0 or not math.isfinite(t):
        raise ConfigError(
            f"a containment `threshold` must be in (0, 1], got {t}", params=("threshold",)
        )
    k = CONTAINMENT_NUM_PERM if num_perm is None else num_perm
    check_num_perm(k)
    pairings = plan(t, k)
    if not any(p.offset == 0 for p in pairings):
        raise ConfigError(
            f"`num_perm` {k} is too few positions for containment at `threshold` {t}: "
            "no banding reaches 99% recall even for items of one size class",
            params=("num_perm",),
        )
    return IndexParams(
        threshold=t,
        num_perm=k,
        bands=sum(p.keys for p in pairings),
        rows=1,
        verify="exact",
        seed=seed,
        metric="containment",
        item=kind,
        shingle=shingle,
    )


def _banding(share: float, k: int, bands: int | None, rows: int | None, sampled: bool) -> Banding:
    """b x r given (checked against K; bit sampling draws with replacement, so any b
    x r), or the tuner's for 99% recall at the bar's row probability `share`."""
    if bands is not None and rows is not None:
        check_num_perm(bands * rows)
        return banding(min(max(share, 1e-9), 1.0), bands * rows if sampled else k, bands, rows)
    return tune_for_recall(share, k)


_FAMILY_OPTIONS = {
    "bits": ("hamming",),
    "dim": ("cosine", "euclidean"),
    "bucket_width": ("euclidean",),
    "max_distance": ("hamming", "euclidean"),
}


def _refuse_others(metric: str, **given: float | None) -> None:
    """Options of another family than `metric`: a mistake, said as one."""
    for name, value in given.items():
        if value is not None and metric not in _FAMILY_OPTIONS[name]:
            raise ConfigError(
                f"`{name}` applies to `metric` {' or '.join(_FAMILY_OPTIONS[name])}, "
                f"not to {metric}",
                params=(name, "metric"),
            )


def _cosine(threshold: float | None, max_distance: float | None) -> float:
    if max_distance is not None:
        raise ConfigError(
            "`metric` cosine compares by `threshold` (the cosine, -1 < C <= 1), not `max_distance`",
            params=("max_distance", "metric"),
        )
    c = COSINE_DEFAULT if threshold is None else threshold
    if not -1.0 < c <= 1.0 or not math.isfinite(c):
        raise ConfigError(
            f"a cosine `threshold` must be in (-1, 1], got {c}", params=("threshold",)
        )
    return c


def _euclidean_bar(max_distance: float | None, threshold: float | None) -> float:
    if threshold is not None:
        raise ConfigError(
            "`metric` euclidean compares by `max_distance` (the largest L2 distance that "
            "is a duplicate), not `threshold`",
            params=("threshold", "metric"),
        )
    if max_distance is None:
        raise ConfigError(
            "`metric` euclidean needs `max_distance`, the largest L2 distance between "
            "two vectors that makes them duplicates (in the vectors' own units)",
            params=("max_distance",),
        )
    if not 0.0 < max_distance < math.inf:
        raise ConfigError(
            f"`max_distance` must be a positive, finite distance, got {max_distance}",
            params=("max_distance",),
        )
    return float(max_distance)


def _bucket_width(distance: float, width: float | None) -> float:
    if width is None:
        return BUCKET_WIDTHS * distance
    if not 0.0 < width < math.inf:
        raise ConfigError(
            f"`bucket_width` must be a positive, finite width, got {width}",
            params=("bucket_width",),
        )
    return float(width)


def _no_dim(dim: int | None) -> None:
    if dim is not None:
        raise ConfigError(
            "`dim` is a vector's length; a text's vector is its shingle counts",
            params=("dim", "item"),
        )


def _dim(dim: int | None) -> int:
    if dim is None:
        raise ConfigError(
            "a `vector` item needs `dim`, the number of values in each vector "
            "(384 for all-MiniLM-L6-v2, 768 for BERT-base)",
            params=("dim",),
        )
    if not MIN_DIM <= dim <= MAX_DIM:
        raise ConfigError(
            f"`dim` must be between {MIN_DIM} and {MAX_DIM}, got {dim}", params=("dim",)
        )
    return dim


def jaccard_item(item: str | None, **given: float | None) -> ItemKind:
    """A Jaccard index's item (texts or sets); the other families' options are a
    mistake, said as one."""
    if item not in (None, "text", "set"):
        raise ConfigError(
            f"`item` {item} needs another `metric`: jaccard compares texts or sets "
            "(bit strings: `metric` hamming; vectors: cosine or euclidean)",
            params=("item", "metric"),
        )
    _refuse_others("jaccard", **given)
    return "set" if item == "set" else "text"


def _item(metric: Metric | str, item: str | None) -> ItemKind:
    kinds = ITEMS_OF[metric]
    if item is None:
        return kinds[0]
    if item not in kinds:
        raise ConfigError(
            f"`metric` {metric} compares items of kind {' or '.join(kinds)}, not {item}",
            params=("item", "metric"),
        )
    return kinds[kinds.index(item)]


def _bits(bits: int | None) -> int:
    if bits is None:
        raise ConfigError(
            "`metric` hamming needs `bits`, the length N of the bit strings "
            "(64 for a SimHash or a 64-bit image hash)",
            params=("bits",),
        )
    if not MIN_BITS <= bits <= MAX_BITS or bits % 8:
        raise ConfigError(
            f"`bits` must be a multiple of 8 between {MIN_BITS} and {MAX_BITS}, got {bits}",
            params=("bits",),
        )
    return bits


def _max_distance(n: int, max_distance: float | None, threshold: float | None) -> int:
    """The bar in bits: `max_distance`, or from `threshold` as 1 - d/N (the largest
    d whose similarity is at least the threshold), or 5% of the bits."""
    if max_distance is not None and threshold is not None:
        raise ConfigError(
            "give `max_distance` (bits) or `threshold` (1 - d/N), not both",
            params=("max_distance", "threshold"),
        )
    if threshold is not None:
        if not 0.0 < threshold <= 1.0:
            raise ConfigError(
                f"`threshold` must be in (0, 1], got {threshold}", params=("threshold",)
            )
        return math.floor(n * (1.0 - threshold) + 1e-9)
    if max_distance is None:
        return math.floor(n * HAMMING_DEFAULT_SHARE + 1e-9)
    if max_distance != int(max_distance) or not 0 <= max_distance < n:
        raise ConfigError(
            f"`max_distance` is a whole number of bits from 0 to {n - 1} for {n}-bit "
            f"strings, got {max_distance}",
            params=("max_distance",),
        )
    return int(max_distance)
