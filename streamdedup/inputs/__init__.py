"""Inputs: bytes as they arrive (a Kafka message, a line of a file) become a `Document`
or a `Rejected` with a reason code.  The decoders know the wire formats (JSON, msgpack,
raw text) and nothing about sketches, indexes or Kafka; new formats live here."""
