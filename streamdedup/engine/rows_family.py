"""The exact-check rule for the families without a compiled check (bit strings,
float32 vectors, texts' count vectors): all of an item's candidates that the
verifier holds are measured in one call (`Measure`: for rows of one width, one numpy
pass), then walked in rank order by the rule every family keeps
(`verify.choose_exact`).  Apart from the families so that Hamming, cosine and
Euclidean share one walk instead of a copy each."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from streamdedup.engine.similarity import Kept
from streamdedup.sketch.family import Bar
from streamdedup.sketch.jaccard import Choices, choose_each

# The measures of one kept representation against several, in one call.
Measure = Callable[[bytes, list[bytes]], list[float]]


class NoTable:
    """No pre-filter: a check is one vectorised measure of a few hundred bytes."""

    def put_many(self, docnos: list[int], kept: list[Kept]) -> None:
        pass

    def drop(self, docno: int) -> None:
        pass


def choose_ranked(
    measure: Measure,
    mine: Kept,
    sets: tuple[dict[int, Kept], ...],
    ranked: list[int],
    est: npt.NDArray[np.float64],
    bar: Bar,
    margin: float,
    max_checks: int,
    start: int = 0,
    best: int = -1,
    best_measure: float = 0.0,
) -> tuple[int, float, int, bool]:
    """`verify.choose_exact`'s rule over one item's ranked candidates (`ranked`, with
    estimates `est` in score units, descending), resumable, as
    `sketch.jaccard.choose_ranked` keeps it: (rank of the best or -1, its measure,
    checks made, `more`: the row of rank `checks` is in no dict).  The rows the
    dicts hold, up to the first missing one or the last the rule may reach, are
    measured at once; the rule then walks those measures."""
    reach = min(len(ranked), max_checks)
    got: list[bytes] = []
    for d in ranked[start:reach]:
        kept = next((s[d] for s in sets if d in s), None)
        if kept is None:
            break
        got.append(kept)
    measures = measure(mine, got) if got else []
    for checks in range(start, reach):
        floor = bar.floor if best < 0 else bar.score(best_measure)
        if est[checks] < floor - margin:
            return best, best_measure, checks, False
        if checks - start == len(measures):  # (the row of rank `checks`: in no dict)
            return best, best_measure, checks, True
        value = measures[checks - start]
        if bar.meets(value) and (best < 0 or bar.better(value, best_measure)):
            best, best_measure = checks, value
    return best, best_measure, max(start, reach), False


def choose_all(
    measure: Measure,
    mines: list[Kept],
    sets: tuple[dict[int, Kept], ...],
    ranked: npt.NDArray[np.int64],
    est: npt.NDArray[np.float64],
    at: npt.NDArray[np.int64],
    bar: Bar,
    margin: float,
    max_checks: int,
    state: Choices,
    first: int,
) -> int:
    """`choose_ranked` for items `first`, ... of a batch (`SimilarityFamily.choose_all`)."""
    return choose_each(
        lambda mine, r, e, start, best, best_sim: choose_ranked(
            measure, mine, sets, r, e, bar, margin, max_checks, start, best, best_sim
        ),
        mines,
        ranked,
        est,
        at,
        state,
        first,
    )
