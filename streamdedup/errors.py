"""The few exception classes callers are expected to catch."""

from __future__ import annotations


class StreamDedupError(Exception):
    """Base class: anything streamdedup raises on purpose."""


class ConfigError(StreamDedupError):
    """Invalid options or configuration file."""


class ParameterMismatchError(StreamDedupError):
    """An index was opened with parameters other than those it was built with."""


class IndexOpenError(StreamDedupError):
    """The index directory cannot be opened or is damaged."""
