"""Sealed segments served over Kafka: `wire` (topic and group names, client
settings and headers both ends agree on), `client` (the writer's `RemoteSegments`)
and `server` (`SegmentServer`, run by `segment-server`).  The probes and answers
they carry are opaque bytes here: `engine.sealed.probes` packs them."""
