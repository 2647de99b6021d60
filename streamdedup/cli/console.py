"""What the commands say on stderr besides their output: `say`, one line that is
never written anywhere else (with stderr closed, nothing), so that a summary or an
error message cannot end up in the verdicts on stdout."""

from __future__ import annotations

import contextlib
import sys


def say(text: str) -> None:
    """A line on stderr; nothing when stderr is closed (`print(file=None)` would write
    it to stdout, into the verdicts)."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            print(text, file=sys.stderr)
