"""Inputs: bytes as they arrive (a Kafka message, a line of a file) become a `Document`
or a `Rejected` with a reason code.  The decoders know the wire formats (JSON, msgpack,
raw text) and nothing about sketches, indexes or Kafka; new formats live here.

`is_warc` is here rather than in `warc`: a command asks it of every input, and a run
of JSON Lines need not load the WARC reader to hear no."""

WARC_SUFFIXES = (".warc", ".warc.gz")


def is_warc(path: str) -> bool:
    """An input is read as a WARC archive when its name says so."""
    return path.lower().endswith(WARC_SUFFIXES)
