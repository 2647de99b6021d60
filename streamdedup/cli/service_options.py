"""The option groups of the commands that talk to Kafka or Spark or keep an index
for long: Kafka clients, logging and metrics, the time window, sealed segments,
the changelog, replay, verdicts, segment servers and backfill.  Part of the option
table (table.py)."""

from __future__ import annotations

from streamdedup.cli.engine_options import CRAWL_FILES, TUNING
from streamdedup.cli.options import Opt, OptionGroup
from streamdedup.worker_config import CONNECTION_OPTIONS

KAFKA = OptionGroup(
    "kafka",
    (
        Opt(
            "bootstrap-servers",
            "Kafka bootstrap servers, host:port[,host:port]",
            str,
            metavar="HOSTS",
        ),
        Opt("input-topic", "topic the documents arrive on", str, "documents", metavar="TOPIC"),
        Opt("output-topic", "topic the verdicts go to", str, "verdicts", metavar="TOPIC"),
        Opt(
            "dead-letter-topic",
            "topic for messages that cannot be processed",
            str,
            "documents-dlq",
            metavar="TOPIC",
        ),
        Opt(
            "keep-topic",
            "also publish each unique document's message here, as it came (key, value, "
            "headers), in the transaction of its verdict: the de-duplicated stream",
            str,
            metavar="TOPIC",
        ),
        Opt("group-id", "consumer group", str, "streamdedup", metavar="GROUP"),
        Opt(
            "input-format",
            "message format (html: the value is a fetched page, the key its id)",
            str,
            "json",
            choices=("json", "msgpack", "raw", "html"),
        ),
        Opt("output-format", "verdict format", str, "json", choices=("json", "msgpack")),
        Opt("max-poll-records", "messages per batch at most", int, 5000, metavar="N"),
        Opt(
            "transactional-id",
            "producer transactional id (default: derived from group, host and index)",
            str,
            metavar="ID",
        ),
        Opt("client-id", "Kafka client id", str, "streamdedup", metavar="ID"),
        Opt(
            "security-protocol",
            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            str,
            "PLAINTEXT",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        ),
        Opt(
            "sasl-mechanism",
            "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
            str,
            choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        ),
        Opt("sasl-username", "SASL user name", str, metavar="USER"),
        Opt(
            "sasl-password",
            "SASL password (prefer the environment variable)",
            str,
            metavar="PASSWORD",
        ),
        Opt("ssl-cafile", "CA certificate file", str, metavar="FILE"),
        Opt("ssl-certfile", "client certificate file", str, metavar="FILE"),
        Opt("ssl-keyfile", "client key file", str, metavar="FILE"),
        Opt(
            "consumer-option",
            "any other kafka-python consumer setting, KEY=VALUE",
            str,
            repeat=True,
            metavar="KEY=VALUE",
        ),
        Opt(
            "producer-option",
            "any other kafka-python producer setting, KEY=VALUE",
            str,
            repeat=True,
            metavar="KEY=VALUE",
        ),
        Opt("create-topics", "create the topics if they do not exist", flag=True),
        Opt("partitions", "partitions of topics created with --create-topics", int, 1, metavar="N"),
        Opt(
            "connect-timeout",
            "seconds to keep retrying an unreachable broker at start",
            float,
            60.0,
            metavar="S",
        ),
        Opt(
            "transaction-timeout",
            "seconds to wait for a Kafka transaction call before giving it up, replacing "
            "the producer and resuming from the committed offsets",
            float,
            60.0,
            metavar="S",
        ),
        Opt(
            "idle-exit",
            "stop after this many seconds without messages (default: never)",
            float,
            metavar="S",
        ),
    ),
)

LOGGING = OptionGroup(
    "logging",
    (
        Opt("log-level", "log level", str, "info", choices=("debug", "info", "warning", "error")),
        Opt(
            "log-format",
            "text, or json: one JSON object per line for log shippers",
            str,
            "text",
            choices=("text", "json"),
        ),
    ),
)
OBSERVE = OptionGroup(
    "metrics and health",
    (
        Opt(
            "metrics-port",
            "serve /metrics (Prometheus), /healthz and /readyz on this port (default: off)",
            int,
            metavar="PORT",
        ),
        Opt(
            "metrics-host",
            "address the metrics server binds (0.0.0.0 in a container)",
            str,
            "127.0.0.1",
            metavar="HOST",
        ),
        Opt(
            "health-stall",
            "/healthz fails when the processing loop has not turned for this many seconds",
            float,
            120.0,
            metavar="S",
        ),
        Opt(
            "ready-max-lag",
            "/readyz fails while the summed consumer lag is above this",
            int,
            10_000,
            metavar="N",
        ),
    ),
)
WINDOW = OptionGroup(
    "time window",
    (
        Opt(
            "ttl",
            "forget documents older than this (by message timestamp), e.g. 7d, 12h; "
            "default: keep everything",
            str,
            metavar="DURATION",
        ),
        Opt(
            "max-expire-per-batch",
            "documents forgotten per batch at most (the rest follow in later batches)",
            int,
            20_000,
            metavar="N",
        ),
        Opt(
            "max-clock-skew",
            "a message timestamped further than this ahead of the wall clock does not "
            "move stream time and is stored as of it (counted and logged); 'off': no bound",
            str,
            "1h",
            metavar="DURATION",
        ),
        Opt(
            "clock-window",
            "stream time is the newest time a majority of the last N message timestamps "
            "have reached (a few messages ahead of the rest move nothing; it trails an "
            "ordered stream by N/2 messages); 1: the newest timestamp",
            int,
            31,
            metavar="N",
        ),
    ),
)
SEGMENTS = OptionGroup(
    "segments",
    (
        Opt(
            "seal-every",
            "seal the open segment into a new sealed segment once it holds this many "
            "documents (default: only `streamdedup seal` seals)",
            int,
            metavar="N",
        ),
        Opt(
            "segments-dir",
            "where --seal-every puts new sealed segments (default: INDEX/segments)",
            str,
            metavar="DIR",
        ),
        Opt(
            "base-segment",
            "start a NEW index from this sealed segment (`backfill --segment` writes one): "
            "the index takes its parameters and continues after its documents; given "
            "again for that index, nothing changes",
            str,
            metavar="SEGMENT_DIR",
        ),
    ),
)
CHANGELOG = OptionGroup(
    "recovery",
    (
        Opt(
            "changelog-topic",
            "log-compacted topic mirroring every index change; an empty index is "
            "restored from it at start (default: off)",
            str,
            metavar="TOPIC",
        ),
    ),
)

REPLAY_KAFKA = tuple(
    o
    for o in KAFKA.options
    if o.name
    not in (
        "output-topic",
        "dead-letter-topic",
        "keep-topic",
        "group-id",
        "idle-exit",
        "partitions",
    )
    and o.name != "create-topics"
)
REPLAY = OptionGroup(
    "replay",
    (
        Opt(
            "mode",
            "rebuild: fill a fresh index; reverdict: check against an existing one",
            str,
            "rebuild",
            choices=("rebuild", "reverdict"),
        ),
        Opt("from-beginning", "start at the oldest retained message (the default)", flag=True),
        Opt(
            "from-timestamp",
            "start at the first message at or after this time (ISO 8601)",
            str,
            metavar="TIME",
        ),
        Opt(
            "from-offsets",
            "replay these partitions from these offsets, e.g. 0:1500,1:0",
            str,
            metavar="P:O,...",
        ),
        Opt("follow", "keep going past the end offsets present at the start", flag=True),
        Opt("output-topic", "publish verdicts to this topic", str, metavar="TOPIC"),
        Opt("output", "write verdicts to this JSON Lines file", str, metavar="FILE"),
        Opt(
            "dead-letter-topic",
            "send undecodable messages here (default: only count them)",
            str,
            metavar="TOPIC",
        ),
        Opt(
            "keep-topic",
            "with --output-topic: also publish each unique document's message here, as it "
            "came, in the transaction of its verdict (a de-duplicated copy of the history)",
            str,
            metavar="TOPIC",
        ),
        Opt(
            "group-id",
            "the replay's own consumer group: its progress is resumed by name",
            str,
            "streamdedup-replay",
            metavar="GROUP",
        ),
        Opt("restart", "forget this replay's earlier progress and start over", flag=True),
        Opt("progress", "progress bar on stderr", str, "auto", choices=("auto", "always", "never")),
    ),
)

# The worker's connection settings (security, SASL, TLS files, how long to retry a
# broker at start): every command that talks to Kafka takes these same options.
CONNECTION = tuple(
    o for o in KAFKA.options if o.dest in CONNECTION_OPTIONS or o.name == "connect-timeout"
)
VERDICTS = OptionGroup(
    "verdicts",
    (
        KAFKA.options[0],  # --bootstrap-servers
        Opt("topic", "the verdict topic to read", str, "verdicts", metavar="TOPIC"),
        Opt(
            "only",
            "print only the verdicts of this kind",
            str,
            choices=("unique", "duplicate"),
        ),
        Opt(
            "follow",
            "keep printing new verdicts until Ctrl-C (default: stop at the end)",
            flag=True,
        ),
        Opt("output", "where the JSON lines go ('-' for stdout)", str, "-", metavar="FILE"),
        Opt(
            "partition",
            "read only this partition (default: all)",
            int,
            repeat=True,
            metavar="N",
        ),
    ),
)
VERDICTS_KAFKA = OptionGroup("kafka", CONNECTION)

# Remote sealed segments (issue 24): how the writer and the segment servers reach
# a segment's probe and answer topics.  The writer's commands add SEGMENT_LINK.
SEGMENT_PREFIX = Opt(
    "segment-prefix",
    "prefix of the segments' Kafka topics ({prefix}.{segment id}.probes, .answers) "
    "and consumer groups; the writer and its segment servers must agree",
    str,
    "streamdedup-segments",
    metavar="PREFIX",
)
SEGMENT_LINK = OptionGroup(
    "remote segments",
    (
        SEGMENT_PREFIX,
        Opt(
            "segment-timeout",
            "seconds without an answer from a remote sealed segment before the writer "
            "warns, reports not ready and sends the probe again (it keeps waiting: a "
            "segment is never skipped)",
            float,
            10.0,
            metavar="S",
        ),
    ),
)
# `dedup` reaches remote sealed segments through Kafka too (only then needs a cluster)
DEDUP_SEGMENTS = OptionGroup(
    "remote segments",
    (
        Opt(
            "bootstrap-servers",
            "Kafka bootstrap servers of the index's remote sealed segments' servers, "
            "host:port[,host:port] (only for an index that has remote segments)",
            str,
            metavar="HOSTS",
        ),
        *SEGMENT_LINK.options,
        *CONNECTION,
    ),
)
SEGMENT_SERVER_KAFKA = tuple(
    o
    for o in KAFKA.options
    if o.name in ("bootstrap-servers", "client-id", "consumer-option", "producer-option")
    or o in CONNECTION
)
SEGMENT_SERVER = OptionGroup(
    "segment server",
    (
        SEGMENT_PREFIX,
        Opt(
            "max-probe-age",
            "a probe is skipped as stale when its writer has sent probes this many seconds "
            "newer since (both timestamps on the writer's clock, never this host's): it "
            "sent it again, or stopped; each skip is logged and counted",
            float,
            300.0,
            metavar="S",
        ),
        Opt(
            "log-every",
            "a log line with rates every N probes answered",
            int,
            100,
            metavar="N",
        ),
    ),
)
# `backfill`: the engine options that apply to a Spark job (no batches, no index file)
BACKFILL_ENGINE = OptionGroup(
    "engine",
    tuple(o for o in TUNING.options if o.name in ("max-bucket-candidates", "max-exact-checks")),
)
BACKFILL = OptionGroup(
    "backfill",
    (
        Opt(
            "output",
            "verdicts, JSON Lines (written whole at the end, or not at all)",
            str,
            metavar="OUT",
        ),
        Opt(
            "segment",
            "also write the index a `dedup` run would leave as a sealed segment here (a new "
            "or empty directory), which `dedup`/`worker --base-segment` continue from",
            str,
            metavar="SEGMENT_DIR",
        ),
        Opt(
            "spark-master",
            "Spark master URL (default: spark-submit's, else local[*]); a local master "
            "listens on loopback only, a cluster master as the operator configures Spark",
            str,
            metavar="M",
        ),
        Opt(
            "split-bytes",
            "input bytes per Spark task",
            int,
            32 << 20,
            metavar="N",
        ),
    ),
)
BACKFILL_INPUT = OptionGroup(
    "crawler input",
    tuple(o for o in CRAWL_FILES.options if o.name in ("text-format", "extract")),
)
