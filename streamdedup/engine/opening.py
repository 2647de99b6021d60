"""Opening an engine's index: the explicit detection options (`Detection`, a frozen
record of what `Deduplicator(...)` takes as keywords), checked against a base
segment the new index starts from and against the parameters the index holds, then
settled (engine/params.py).  Apart from the facade so that `Deduplicator.open` and
the keyword constructor share one way in."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from streamdedup.config import EngineOptions, IndexParams, ShingleSpec, Verify
from streamdedup.engine.params import open_params
from streamdedup.engine.sealing import start_from
from streamdedup.errors import ConfigError
from streamdedup.store.index import Index


@dataclass(frozen=True)
class Detection:
    """The detection options asked for when opening an index (None: the index's own,
    or the defaults for a new one); see `Deduplicator`."""

    threshold: float | None = None
    num_perm: int | None = None
    shingle: str | ShingleSpec | None = None
    bands: int | None = None
    rows: int | None = None
    verify: Verify | None = None
    seed: int | None = None
    false_positive_weight: float = 0.02
    false_negative_weight: float = 0.98
    metric: str | None = None
    item: str | None = None
    bits: int | None = None
    max_distance: float | None = None
    dim: int | None = None
    bucket_width: float | None = None


def open_index(
    path: str | os.PathLike[str],
    detection: Detection,
    options: EngineOptions,
    base_segment: str | os.PathLike[str] | None,
) -> tuple[Index, IndexParams]:
    """The index at `path` opened (started from `base_segment` if given), and its
    parameters; the index is closed again if they are refused."""
    if options.clock_window < 1:
        raise ConfigError("`clock_window` must be at least 1", params=("clock_window",))
    index = Index(path, map_size=options.map_size, durability=options.durability)
    asked = {f.name: getattr(detection, f.name) for f in fields(detection)}
    weights = {k: asked.pop(k) for k in ("false_positive_weight", "false_negative_weight")}
    try:
        if base_segment is not None:
            start_from(index, base_segment, **asked)
        params = open_params(index, **asked, **weights)
    except BaseException:
        index.close()
        raise
    return index, params


__all__ = ["Detection", "open_index"]
