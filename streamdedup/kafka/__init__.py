"""Kafka: the engine as a long-lived, exactly-once worker.  Client settings and topic
administration, the consume loop, the transactional publisher of verdicts, the
changelog that backs up an index, one index per consumer group, replay of old topics,
a topic's committed view read from its transaction markers (`txnlog`, for
`streamdedup verdicts`), and the embedded broker used by the demo and the tests."""
