"""Operations: what a person running the worker looks at.  Prometheus metrics and the
health endpoints, structured logging, the `stats` and `inspect` reports on an index,
progress lines and the closing summary of a run."""
