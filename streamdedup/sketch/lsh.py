"""Choosing LSH bands x rows from the S-curve P(candidate | J=s) = 1 - (1 - s**r)**b.

Like datasketch, b and r minimise a weighted sum of the false-positive area (the
curve below the threshold) and the false-negative area (the gap above it).  Unlike
datasketch, the default weights lean hard on recall: every candidate is verified
afterwards, so a false-positive candidate costs one comparison while a false negative
is a duplicate lost for good.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from streamdedup.config import check_threshold
from streamdedup.errors import ConfigError

_GRID = np.linspace(0.0, 1.0, 2001)

# Signature length K: the densification probe table (signature.probe_table) holds
# 16 x K x K int64 values, 128 MiB at K = 1024 (and 2 GiB at 4096), built per process.
MIN_NUM_PERM, MAX_NUM_PERM = 2, 1024


def check_num_perm(num_perm: int) -> None:
    if not MIN_NUM_PERM <= num_perm <= MAX_NUM_PERM:
        raise ConfigError(
            f"`num_perm` must be between {MIN_NUM_PERM} and {MAX_NUM_PERM}, got {num_perm} "
            "(128 is the default; more than a few hundred rarely pays)",
            params=("num_perm",),
        )


def s_curve(s: float | np.ndarray, bands: int, rows: int) -> np.ndarray:
    return np.asarray(1.0 - (1.0 - np.asarray(s, dtype=np.float64) ** rows) ** bands)


@dataclass(frozen=True)
class Banding:
    bands: int
    rows: int
    false_positive_area: float
    false_negative_area: float

    @property
    def approx_threshold(self) -> float:
        """Where the S-curve crosses about 1/2: (1/b)**(1/r)."""
        return float((1.0 / self.bands) ** (1.0 / self.rows))


def error_areas(threshold: float, bands: int, rows: int) -> tuple[float, float]:
    p = s_curve(_GRID, bands, rows)
    below = threshold > _GRID
    fp = float(np.trapezoid(np.where(below, p, 0.0), _GRID))
    fn = float(np.trapezoid(np.where(below, 0.0, 1.0 - p), _GRID))
    return fp, fn


def banding(threshold: float, num_perm: int, bands: int, rows: int) -> Banding:
    """A given b x r, checked against K."""
    check_num_perm(num_perm)
    if bands < 1 or rows < 1 or bands * rows > num_perm:
        raise ConfigError(
            f"`bands` {bands} x `rows` {rows} needs {bands * rows} hash values; "
            f"`num_perm` is {num_perm}",
            params=("bands", "rows", "num_perm"),
        )
    return Banding(bands, rows, *error_areas(threshold, bands, rows))


@functools.cache  # a pure function of its numbers, ~8 ms a call: once per index opened
def tune(
    threshold: float,
    num_perm: int,
    false_positive_weight: float = 0.02,
    false_negative_weight: float = 0.98,
) -> Banding:
    """The b x r (b * r <= K) with the least weighted error area."""
    check_threshold(threshold)
    check_num_perm(num_perm)
    best: tuple[float, Banding] | None = None
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        fp, fn = error_areas(threshold, bands, rows)
        cost = false_positive_weight * fp + false_negative_weight * fn
        if best is None or cost < best[0]:
            best = (cost, Banding(bands, rows, fp, fn))
    assert best is not None
    return best[1]


def s_curve_table(banding: Banding, points: int = 10) -> list[tuple[float, float]]:
    """(s, P(candidate)) at s = 0.1 .. 1.0, the table the lecture notes print."""
    s = np.round(np.arange(1, points + 1) / points, 4)
    return list(zip(s.tolist(), s_curve(s, banding.bands, banding.rows).tolist(), strict=True))


# What `tune_for_recall` aims at: the share of pairs exactly at the threshold that
# become candidates (the issue's and the tests' "recall at the threshold").
RECALL_TARGET = 0.99


@functools.cache  # as `tune`
def tune_for_recall(threshold: float, num_perm: int, target: float = RECALL_TARGET) -> Banding:
    """The b x r (b * r <= K) whose S-curve reaches `target` at `threshold` with the
    least false-positive area below it; if none reaches it, the one that comes
    closest.  For the families whose row probability at the bar is high and whose
    unrelated pairs are many (bit strings: 1 - d/N is 0.95 at SimHash's d = 3 of 64,
    and unrelated strings agree in half their bits): the error-area weighting of
    `tune` picks bands there that miss one pair in twenty at the bar."""
    check_num_perm(num_perm)
    best: tuple[tuple[bool, float], Banding] | None = None
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        recall = float(s_curve(threshold, bands, rows))
        fp, fn = error_areas(threshold, bands, rows)
        key = (recall >= target, -fp if recall >= target else recall)
        if best is None or key > best[0]:
            best = (key, Banding(bands, rows, fp, fn))
    assert best is not None
    return best[1]
