"""The crash points moved to `streamdedup.failpoints` (the store's `seal` uses them,
and the store may not import ops); the kafka layer still imports them from here."""

from __future__ import annotations

from streamdedup.failpoints import POINTS, reach

__all__ = ["POINTS", "reach"]
