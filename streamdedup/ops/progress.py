"""Progress bars on stderr for long work (dedup, replay, demo): shown on a terminal,
or always or never as `--progress` says, so piped output and logs stay clean."""

from __future__ import annotations

import sys
from typing import Any


def make_progress(mode: str, desc: str, total: int | None = None) -> Any:
    """A tqdm bar, or None when `mode` ("auto", "always", "never") says not to show one."""
    if sys.stderr is None or mode == "never" or (mode == "auto" and not sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=" docs",
        unit_scale=True,
        file=sys.stderr,
        smoothing=0.1,
        mininterval=0.5,
    )
