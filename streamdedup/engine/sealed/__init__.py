"""Sealed segments on the engine's side: `probes` (what the writer asks a segment
and how a segment answers, the same for a local directory and a remote server),
`asking` (`Sealed`: the writer's segments, their tombstones and the answers of the
batch in progress) and `view` (`View`: the open
index merged with those answers, read by the engine as if it were one index)."""
