"""The option table: every option of every command, declared once.

The `OptionGroup`s (ENGINE, TUNING, INPUT, ... in engine_options.py; KAFKA, WINDOW,
SEGMENTS, ... in service_options.py), the `COMMANDS` table naming
each command's help line and option groups in the order `--help` and
docs/configuration.md show them, and `ARGUMENTS`, each command's positional
arguments.  The parser (`main.build_parser`), the environment and TOML lookups
(`options.resolve`) and the configuration reference (`reference.py`) are all built
from this table; the `Opt`/`OptionGroup` machinery itself is in `options.py`.
"""

from __future__ import annotations

from streamdedup.cli.engine_options import (
    CRAWL_FILES,
    CRAWL_STREAM,
    ENGINE,
    FORMAT,
    INDEX,
    INPUT,
    OUTPUT,
    STREAM_ENGINE,
    TUNE,
    TUNING,
)
from streamdedup.cli.options import Opt, OptionGroup
from streamdedup.cli.service_options import (
    BACKFILL,
    BACKFILL_ENGINE,
    BACKFILL_INPUT,
    CHANGELOG,
    CONNECTION,
    DEDUP_SEGMENTS,
    KAFKA,
    LOGGING,
    OBSERVE,
    REPLAY,
    REPLAY_KAFKA,
    SEGMENT_LINK,
    SEGMENT_SERVER,
    SEGMENT_SERVER_KAFKA,
    SEGMENTS,
    VERDICTS,
    VERDICTS_KAFKA,
    WINDOW,
)
from streamdedup.config import MAX_DOC_BYTES

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
            OptionGroup("kafka", REPLAY_KAFKA),
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
        "send JSON Lines documents or a WARC archive's pages to a topic (a message a "
        "document, keyed by id or URI)",
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
                    Opt(
                        "message-key",
                        "key each message by the document's id, its URI or its URI's host "
                        "(near copies of one site then share a partition); default: id for "
                        "JSON Lines (uri and host read the field `url`), uri for WARC",
                        str,
                        choices=("id", "uri", "host"),
                    ),
                    Opt(
                        "max-message-bytes",
                        "the largest message sent (the producer's max_request_size; keep it "
                        "within the broker's message.max.bytes): a larger one is named on "
                        "stderr and not sent, and the exit status is 1",
                        int,
                        1 << 20,
                        metavar="N",
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
            OptionGroup("kafka", SEGMENT_SERVER_KAFKA),
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
    "clusters": (
        "list every cluster and its members, one JSON line each, from an index or from "
        "verdict files",
        (
            INDEX,
            OptionGroup(
                "clusters",
                (
                    Opt("output", "clusters, JSON Lines ('-' for stdout)", str, "-", metavar="OUT"),
                    Opt(
                        "min-size",
                        "only clusters of at least N documents (2: those with duplicates)",
                        int,
                        1,
                        metavar="N",
                    ),
                ),
            ),
        ),
    ),
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
    "clusters": (
        (
            "verdicts",
            "[VERDICTS...]",
            "verdict files (JSON Lines, '-' for stdin) to read instead of --index",
        ),
    ),
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
    "clusters": ("streamdedup clusters --index ./index --min-size 2 --output clusters.jsonl",),
    "demo": ("streamdedup demo",),
}
