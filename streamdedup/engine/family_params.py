"""The parameters of an index of another family than Jaccard on texts (`--metric`,
DESIGN.md "Items and similarity families"): each family's item, its defaults and its
bar, checked before anything is stored.  Apart from `params.py`, which settles
Jaccard's and compares any index's stored parameters, because every family brings
its own rules (Hamming: the length of the bit strings, the distance in bits)."""

from __future__ import annotations

import math

from streamdedup.config import ITEMS_OF, METRICS, IndexParams, ItemKind, Metric, Verify
from streamdedup.errors import ConfigError
from streamdedup.sketch.lsh import banding, check_num_perm, tune_for_recall

# Hamming: bit strings of 8 to 4,096 bits, in whole bytes (as faiss's binary indexes
# take them; the signature is the string, 2 bytes a bit); a duplicate by default
# within 5% of the bits (SimHash's 3 of 64).
MIN_BITS, MAX_BITS = 8, 1 << 12
HAMMING_DEFAULT_SHARE = 0.05
# The bits sampled into bands, b x r at most: at 64-bit SimHash's bar (d = 3) the
# tuned 11 x 22 reaches 99% of the pairs at the bar; within 128, at most 94.5% with
# as few candidates.
HAMMING_SAMPLES = 256


def family_params(
    metric: str,
    item: str | None,
    bits: int | None,
    max_distance: float | None,
    threshold: float | None,
    num_perm: int | None,
    bands: int | None,
    rows: int | None,
    verify: Verify | None,
    seed: int,
) -> IndexParams:
    """The parameters of a new index of family `metric` (not Jaccard)."""
    if metric not in METRICS:
        raise ConfigError(
            f"unknown `metric` {metric!r}: one of {', '.join(METRICS)}", params=("metric",)
        )
    kind = _item(metric, item)
    n = _bits(bits)
    d = _max_distance(n, max_distance, threshold)
    if num_perm is not None and num_perm != n:
        raise ConfigError(
            f"`num_perm` is the signature's length; a Hamming index's signature is the "
            f"bit string itself ({n} positions). Choose how many bits are sampled into "
            "buckets with `bands` x `rows`",
            params=("num_perm",),
        )
    similarity = 1.0 - d / n  # the row probability at the bar (seeds: 1 - d/N)
    if bands is not None and rows is not None:  # (sampled with replacement: any b x r)
        check_num_perm(bands * rows)
        band = banding(min(max(similarity, 1e-9), 1.0), bands * rows, bands, rows)
    else:
        band = tune_for_recall(similarity, HAMMING_SAMPLES)
    return IndexParams(
        threshold=similarity,
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


def refuse_family_options(item: str | None, bits: int | None, max_distance: float | None) -> None:
    """A Jaccard index: the other families' options are a mistake, said as one."""
    if item not in (None, "text"):
        raise ConfigError(
            f"`item` {item} needs another `metric`: jaccard compares texts "
            "(for bit strings: `metric` hamming)",
            params=("item", "metric"),
        )
    for name, value in (("bits", bits), ("max_distance", max_distance)):
        if value is not None:
            raise ConfigError(
                f"`{name}` applies to `metric` hamming, not to jaccard", params=(name, "metric")
            )


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
