"""The option table: every option of every command, declared once.

The `OptionGroup`s (ENGINE, TUNING, INPUT, KAFKA, ...), the `COMMANDS` table naming
each command's help line and option groups in the order `--help` and
docs/configuration.md show them, and `ARGUMENTS`, each command's positional
arguments.  The parser (`main.build_parser`), the environment and TOML lookups
(`options.resolve`) and the configuration reference (`reference.py`) are all built
from this table; the `Opt`/`OptionGroup` machinery itself is in `options.py`.
"""

from __future__ import annotations

from streamdedup.cli.options import Opt, OptionGroup
from streamdedup.config import CONNECTION_OPTIONS, MAX_DOC_BYTES, EngineOptions

ENGINE = OptionGroup(
    "detection (stored in the index; an existing index keeps its own)",
    (
        Opt(
            "threshold",
            "Jaccard similarity at or above which a document is a duplicate (default 0.8)",
            float,
            metavar="T",
        ),
        Opt("num-perm", "MinHash signature length K (default 128)", int, metavar="K"),
        Opt("shingle", "shingling: word:K or char:K (default word:5)", str, metavar="SPEC"),
        Opt(
            "bands",
            "LSH bands b (with --rows; default: tuned from threshold and K)",
            int,
            metavar="B",
        ),
        Opt("rows", "LSH rows per band r (with --bands)", int, metavar="R"),
        Opt(
            "verify",
            "how candidates are confirmed (default exact)",
            str,
            choices=("exact", "signature"),
        ),
        Opt("seed", "hash seed (default 1)", int),
        Opt("fp-weight", "weight of false-positive area when tuning bands/rows", float, 0.02),
        Opt("fn-weight", "weight of false-negative area when tuning bands/rows", float, 0.98),
    ),
)
TUNING = OptionGroup(
    "engine",
    (
        Opt(
            "max-bucket-candidates",
            "candidates read from one LSH bucket, its newest (a bound on pathological "
            "'hot' buckets; boilerplate-heavy sites stay well under it)",
            int,
            EngineOptions.max_bucket_candidates,
            metavar="N",
        ),
        Opt(
            "max-exact-checks",
            "exact comparisons per document at most (a bound on pathological input)",
            int,
            EngineOptions.max_exact_checks,
            metavar="N",
        ),
        Opt(
            "batch-size", "documents per batch (one index transaction each)", int, 8000, metavar="N"
        ),
        Opt(
            "durability",
            "process: a committed batch survives the process being killed, the OS "
            "writes it to disk shortly after; full: fsync every commit (survives power "
            "loss, slower)",
            str,
            "process",
            choices=("process", "full"),
        ),
        Opt(
            "workers",
            "extra processes that decode and compute signatures (WARC input: extract "
            "pages) while the main process updates the index (0: all in the main "
            "process; 1 suits 2 cores)",
            int,
            0,
            metavar="N",
        ),
    ),
)
# the engine options that apply to the Kafka commands (batches come from the polls)
STREAM_ENGINE = OptionGroup(
    "engine",
    tuple(
        o
        for o in TUNING.options
        if o.name in ("max-bucket-candidates", "max-exact-checks", "durability")
    ),
)
INPUT = OptionGroup(
    "input",
    (
        Opt("id-field", "field holding the document id", str, "id", metavar="NAME"),
        Opt("text-field", "field holding the document text", str, "text", metavar="NAME"),
        Opt("max-doc-bytes", "larger input records are rejected", int, MAX_DOC_BYTES, metavar="N"),
    ),
)
# Crawler input (`inputs.html`, `inputs.warc`): what the text of an HTML page is.
EXTRACT = Opt(
    "extract",
    "text of an HTML page that is shingled: main (the main content: navigation, "
    "headers, footers, cookie banners dropped) or all (every visible text)",
    str,
    "main",
    choices=("main", "all"),
)
CRAWL_FILES = OptionGroup(
    "crawler input",
    (
        Opt(
            "text-format",
            "what the JSON text field holds: text, or html (its text is extracted)",
            str,
            "text",
            choices=("text", "html"),
        ),
        EXTRACT,
        Opt(
            "warc-id",
            "id of a page read from a WARC archive (.warc, .warc.gz): its "
            "WARC-Target-URI or its WARC-Record-ID",
            str,
            "uri",
            choices=("uri", "record-id"),
        ),
        Opt(
            "warc-status",
            "which HTTP responses of a WARC archive are pages to check: 2xx (successful "
            "ones; the others are skipped, counted as not_2xx) or any",
            str,
            "2xx",
            choices=("2xx", "any"),
        ),
        Opt(
            "report-skipped",
            "list on stderr every WARC record skipped (not a response, not HTML, not 2xx)",
            flag=True,
        ),
    ),
)
CRAWL_STREAM = OptionGroup(
    "crawler input (--input-format html)",
    (
        EXTRACT,
        Opt(
            "id-header",
            "take an HTML message's id from this header instead of its key",
            str,
            metavar="NAME",
        ),
    ),
)
INDEX = OptionGroup("index", (Opt("index", "index directory", str, metavar="DIR"),))
OUTPUT = OptionGroup(
    "output",
    (
        Opt("output", "verdicts, JSON Lines ('-' for stdout)", str, "-", metavar="OUT"),
        Opt("progress", "progress bar on stderr", str, "auto", choices=("auto", "always", "never")),
    ),
)
TUNE = OptionGroup(
    "tune",
    (
        Opt("threshold", "target Jaccard threshold", float, 0.8, metavar="T"),
        Opt("num-perm", "signature length K", int, 128, metavar="K"),
        Opt("bands", "evaluate this b instead of tuning (with --rows)", int, metavar="B"),
        Opt("rows", "evaluate this r instead of tuning (with --bands)", int, metavar="R"),
        Opt("fp-weight", "weight of the false-positive area", float, 0.02),
        Opt("fn-weight", "weight of the false-negative area", float, 0.98),
    ),
)
FORMAT = OptionGroup("format", (Opt("json", "print JSON instead of text", flag=True),))
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

_REPLAY_KAFKA = tuple(
    o
    for o in KAFKA.options
    if o.name not in ("output-topic", "dead-letter-topic", "group-id", "idle-exit", "partitions")
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
_SEGMENT_SERVER_KAFKA = tuple(
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

COMMANDS: dict[str, tuple[str, tuple[OptionGroup, ...]]] = {
    "dedup": (
        "check JSON Lines documents or WARC archives against the index, one verdict per document",
        (INDEX, ENGINE, TUNING, SEGMENTS, INPUT, CRAWL_FILES, OUTPUT, DEDUP_SEGMENTS),
    ),
    "backfill": (
        "check JSON Lines files on Spark, in parallel, with the verdicts `dedup` would give",
        (BACKFILL, ENGINE, BACKFILL_ENGINE, INPUT, BACKFILL_INPUT),
    ),
    "worker": (
        "consume documents from Kafka, publish verdicts exactly once",
        (
            KAFKA,
            INDEX,
            ENGINE,
            STREAM_ENGINE,
            WINDOW,
            SEGMENTS,
            INPUT,
            CRAWL_STREAM,
            CHANGELOG,
            SEGMENT_LINK,
            OBSERVE,
            LOGGING,
        ),
    ),
    "backup": (
        "copy an index consistently, also while a worker writes to it",
        (INDEX, FORMAT),
    ),
    "restore": (
        "put a backup in place as the index of a worker (which then resumes from the "
        "offsets recorded in it)",
        (INDEX, FORMAT),
    ),
    "seal": (
        "move everything the index holds so far into a new sealed segment, atomically "
        "(also while a worker or dedup writes to it)",
        (
            INDEX,
            OptionGroup(
                "segment",
                (
                    Opt(
                        "remote",
                        "the index asks segment servers (`streamdedup segment-server`) "
                        "for this segment instead of opening SEGMENT_DIR itself; the "
                        "directory may then move to another host",
                        flag=True,
                    ),
                ),
            ),
            FORMAT,
        ),
    ),
    "repoint": (
        "register sealed segments at the place they were moved to (each SEGMENT_DIR's "
        "manifest says which segment it is; segments inside the index directory move with "
        "it and need no repoint)",
        (INDEX, FORMAT),
    ),
    "replay": (
        "run a topic's history through an index (rebuild or re-verdict), to a topic or file",
        (
            REPLAY,
            OptionGroup("kafka", _REPLAY_KAFKA),
            INDEX,
            ENGINE,
            STREAM_ENGINE,
            WINDOW,
            INPUT,
            CRAWL_STREAM,
            SEGMENT_LINK,
            LOGGING,
        ),
    ),
    "verdicts": (
        "print a verdict topic's committed verdicts as JSON lines (aborted batches left out)",
        (VERDICTS, VERDICTS_KAFKA),
    ),
    "broker": (
        "run a Kafka-protocol broker on loopback for trying things out (Tansu, in memory)",
        (OptionGroup("broker", (Opt("port", "port to listen on", int, 9092, metavar="PORT"),)),),
    ),
    "produce": (
        "send JSON Lines documents to a topic (one message per line, keyed by id)",
        (
            OptionGroup(
                "produce",
                (
                    Opt(
                        "bootstrap-servers",
                        "Kafka bootstrap servers, host:port[,host:port]",
                        str,
                        metavar="HOSTS",
                    ),
                    Opt("topic", "topic to send to", str, "documents", metavar="TOPIC"),
                    Opt(
                        "partitions",
                        "partitions of the topic when produce creates it (an existing "
                        "topic keeps its own); one keeps the processing order, hence the "
                        "verdicts, the same on every run",
                        int,
                        1,
                        metavar="N",
                    ),
                    Opt(
                        "timestamp-field",
                        "use this field (epoch milliseconds) as the message timestamp",
                        str,
                        metavar="NAME",
                    ),
                ),
            ),
            OptionGroup("kafka", CONNECTION),
            OptionGroup(
                "input",
                (
                    INPUT.options[0],
                    Opt(
                        "max-doc-bytes",
                        "WARC pages larger than this, as stored or once decoded, are not sent",
                        int,
                        MAX_DOC_BYTES,
                        metavar="N",
                    ),
                    *(o for o in CRAWL_FILES.options if o.name == "warc-status"),
                ),
            ),
        ),
    ),
    "segment-server": (
        "answer the writer's probes for one sealed segment over Kafka (servers of one "
        "segment share a consumer group: run two for failover)",
        (
            SEGMENT_SERVER,
            OptionGroup("kafka", _SEGMENT_SERVER_KAFKA),
            OptionGroup(
                "metrics and health",
                tuple(
                    o
                    for o in OBSERVE.options
                    if o.name in ("metrics-port", "metrics-host", "health-stall")
                ),
            ),
            LOGGING,
        ),
    ),
    "tune": ("choose LSH bands x rows for a threshold and print the S-curve", (TUNE, FORMAT)),
    "stats": (
        "summarise an index",
        (
            INDEX,
            FORMAT,
            OptionGroup(
                "check",
                (
                    Opt(
                        "check",
                        "also read every table through and verify the file's structure "
                        "(exit 5 if damaged; some seconds per million documents)",
                        flag=True,
                    ),
                ),
            ),
        ),
    ),
    "inspect": ("show what the index knows about one document", (INDEX, FORMAT)),
    "demo": (
        "run the main job on a bundled sample stream and print a summary",
        (
            OptionGroup(
                "demo",
                (
                    Opt(
                        "input",
                        "JSON Lines to use instead of the bundled sample",
                        str,
                        metavar="FILE",
                    ),
                    Opt(
                        "index",
                        "index directory (default: a temporary one, removed after)",
                        str,
                        metavar="DIR",
                    ),
                    Opt("output", "also keep the verdicts in this file", str, metavar="OUT"),
                    Opt(
                        "file-mode",
                        "run the stream through `dedup` instead of the Kafka "
                        "worker on an embedded broker",
                        flag=True,
                    ),
                    Opt(
                        "progress",
                        "progress bar on stderr",
                        str,
                        "auto",
                        choices=("auto", "always", "never"),
                    ),
                ),
            ),
            INPUT,
        ),
    ),
}


# Keys of a config file that a command refuses although other commands take them: a
# user who wrote them expects them to apply, and this command cannot honour them
# (`options.resolve`).  Left to the other commands, they were silently ignored.
_NO_WINDOW = (
    "documents read from files carry no timestamps, so nothing would ever expire and "
    "the time window would be silently ignored. A time window needs message timestamps: "
    "send the documents to Kafka (`streamdedup produce FILE --timestamp-field NAME`) "
    "and check them with `worker` or `replay --ttl`; or move the key into the [worker] "
    "and [replay] tables of the config file."
)
INAPPLICABLE: dict[str, dict[str, str]] = {
    "dedup": {"ttl": _NO_WINDOW},
    "backfill": {"ttl": _NO_WINDOW},
}


# Each command's positional arguments (dest, metavar, help), added before its options;
# a metavar ending in "..." takes one or more values (a list).
ARGUMENTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "dedup": (
        (
            "input",
            "INPUT...",
            "JSON Lines files ('-' for stdin) or WARC archives (.warc, .warc.gz, or told "
            "by their first bytes), read in order",
        ),
    ),
    "backfill": (
        (
            "input",
            "INPUT...",
            "JSON Lines files, read in order (on a cluster: paths every executor can read)",
        ),
    ),
    "produce": (
        (
            "input",
            "INPUT",
            "JSON Lines file ('-' for stdin), or a WARC archive (.warc, .warc.gz, or "
            "told by its first bytes): its HTML pages are sent as HTML messages keyed by URI",
        ),
    ),
    "backup": (("dest", "DEST", "new or empty directory for the copy"),),
    "restore": (("source", "BACKUP", "directory made by `backup`"),),
    "seal": (("segment_dir", "SEGMENT_DIR", "new or empty directory for the sealed segment"),),
    "repoint": (
        (
            "segment_dir",
            "SEGMENT_DIR...",
            "sealed segment directories of this index, at their new place",
        ),
    ),
    "inspect": (("doc_id", "ID", "document id (digits: tried as integer too)"),),
    "segment-server": (
        ("segment_dir", "SEGMENT_DIR", "a sealed segment directory (made by `streamdedup seal`)"),
    ),
}


# One example per command, shown at the end of its --help (and in docs/configuration.md).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "dedup": ("streamdedup dedup pages.jsonl --index ./index --output verdicts.jsonl",),
    "backfill": (
        "streamdedup backfill crawl-1.jsonl crawl-2.jsonl --output verdicts.jsonl "
        "--spark-master local[2]",
    ),
    "worker": (
        "streamdedup worker --bootstrap-servers localhost:9092 --index ./index "
        "--input-topic documents --output-topic verdicts",
    ),
    "backup": ("streamdedup backup --index ./index ./index-backup",),
    "restore": ("streamdedup restore --index ./index ./index-backup",),
    "seal": ("streamdedup seal --index ./index /disk2/segments/0001",),
    "repoint": ("streamdedup repoint --index ./index /disk3/segments/0001",),
    "replay": (
        "streamdedup replay --bootstrap-servers localhost:9092 --input-topic documents "
        "--index ./rebuilt --output verdicts.jsonl",
    ),
    "verdicts": (
        "streamdedup verdicts --bootstrap-servers localhost:9092 --topic verdicts "
        "--only duplicate --follow",
    ),
    "broker": ("streamdedup broker --port 9092",),
    "produce": (
        "streamdedup produce pages.jsonl --bootstrap-servers localhost:9092 --topic documents",
    ),
    "segment-server": (
        "streamdedup segment-server ./segments/0003 --bootstrap-servers localhost:9092 "
        "--metrics-port 9101",
    ),
    "tune": ("streamdedup tune --threshold 0.8 --num-perm 128",),
    "stats": ("streamdedup stats --index ./index --check",),
    "inspect": ("streamdedup inspect --index ./index page-42",),
    "demo": ("streamdedup demo",),
}
