"""The `streamdedup` command: argument parsing and dispatch to the subcommands.

Exit statuses: see `errors.py` (0 success; 1 finished, but some input lines were
rejected; 2 usage; 3 broker; 4 input/output file; 5 index; 6 disk full; 7 worker
stopped for safety; 130 interrupted); `main` maps each exception to its status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from streamdedup import __version__
from streamdedup.cli.options import Opt, OptionGroup, add_options, load_toml, resolve
from streamdedup.config import EngineOptions, Fields, parse_duration_ms
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    EXIT_BROKER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REJECTED,
    StreamDedupError,
)
from streamdedup.ops.progress import make_progress
from streamdedup.sketch import kernels
from streamdedup.sketch.lsh import banding, s_curve_table, tune

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
            "candidates read from one LSH bucket (bounds the cost "
            "of boilerplate-heavy 'hot' buckets)",
            int,
            100,
            metavar="N",
        ),
        Opt("max-exact-checks", "exact comparisons per document at most", int, 32, metavar="N"),
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
            "extra processes that decode and compute signatures while the main process "
            "updates the index (0: all in the main process; 1 suits 2 cores)",
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
        Opt("max-doc-bytes", "larger input records are rejected", int, 16 << 20, metavar="N"),
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
        Opt("input-format", "message format", str, "json", choices=("json", "msgpack", "raw")),
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

COMMANDS: dict[str, tuple[str, tuple[OptionGroup, ...]]] = {
    "dedup": (
        "check JSON Lines documents against the index, one verdict per line",
        (INDEX, ENGINE, TUNING, INPUT, OUTPUT),
    ),
    "worker": (
        "consume documents from Kafka, publish verdicts exactly once",
        (
            KAFKA,
            INDEX,
            ENGINE,
            STREAM_ENGINE,
            WINDOW,
            INPUT,
            CHANGELOG,
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
            LOGGING,
        ),
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
                        "timestamp-field",
                        "use this field (epoch milliseconds) as the message timestamp",
                        str,
                        metavar="NAME",
                    ),
                ),
            ),
            OptionGroup("input", (INPUT.options[0],)),
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamdedup",
        description="Streaming near-duplicate detection (MinHash + LSH over LMDB).",
        epilog="Every option can also come from STREAMDEDUP_<OPTION> or a TOML --config file.",
    )
    parser.add_argument(
        "--version", action="version", version=f"streamdedup {__version__} ({kernels.describe()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, groups) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == "dedup":
            p.add_argument("input", metavar="INPUT", help="JSON Lines file, '-' for stdin")
        if name == "produce":
            p.add_argument("input", metavar="INPUT", help="JSON Lines file, '-' for stdin")
        if name == "backup":
            p.add_argument("dest", metavar="DEST", help="new or empty directory for the copy")
        if name == "restore":
            p.add_argument("source", metavar="BACKUP", help="directory made by `backup`")
        if name == "inspect":
            p.add_argument(
                "doc_id", metavar="ID", help="document id (digits: tried as integer too)"
            )
        p.add_argument(
            "--config",
            metavar="FILE",
            help="TOML file with option values [env: STREAMDEDUP_CONFIG]",
        )
        add_options(p, groups)
    return parser


def parse(argv: Sequence[str] | None) -> tuple[str, argparse.Namespace, dict[str, Any]]:
    import os

    args = build_parser().parse_args(argv)
    config_path = args.config or os.environ.get("STREAMDEDUP_CONFIG")
    config = load_toml(config_path) if config_path else None
    values = resolve(
        args,
        COMMANDS[args.command][1],
        args.command,
        config,
        commands={name: groups for name, (_, groups) in COMMANDS.items()},
    )
    return args.command, args, values


def open_engine(values: dict[str, Any], *, adds_documents: bool = True) -> Deduplicator:
    """`adds_documents`: refuse at once an index whose changelog this run would not
    write (`dedup`, `worker`); `replay` is refused only by a batch adding documents."""
    from streamdedup.errors import ConfigError

    index = _require_index(values)
    for name in ("max_bucket_candidates", "max_exact_checks", "batch_size"):
        if values.get(name, 1) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    dd = Deduplicator(
        index,
        threshold=values["threshold"],
        num_perm=values["num_perm"],
        shingle=values["shingle"],
        bands=values["bands"],
        rows=values["rows"],
        verify=values["verify"],
        seed=values["seed"],
        options=EngineOptions(
            max_bucket_candidates=values["max_bucket_candidates"],
            max_exact_checks=values["max_exact_checks"],
            batch_size=values.get("batch_size", EngineOptions.batch_size),
            durability=values["durability"],
            ttl_ms=parse_duration_ms(values["ttl"]) if values.get("ttl") else None,
            max_expire_per_batch=values.get("max_expire_per_batch", 20_000),
            max_clock_skew_ms=_clock_skew_ms(values.get("max_clock_skew")),
        ),
        false_positive_weight=values["fp_weight"],
        false_negative_weight=values["fn_weight"],
        changelog=values.get("changelog_topic"),
    )
    try:
        if adds_documents:
            dd.require_writable()  # before any input is read or output written
    except BaseException:
        dd.close()
        raise
    return dd


def _clock_skew_ms(text: str | None) -> int | None:
    if text is None:  # a command without the time-window options
        return EngineOptions.max_clock_skew_ms
    return None if text.strip().lower() == "off" else parse_duration_ms(text)


def cmd_dedup(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.engine.files import (
        refuse_same_file,
        run_dedup,
        stdin_or_file,
        stdout_or_file,
        truncate_output,
    )

    fields = Fields.from_options(values)
    output = values["output"]
    _require_index(values)
    _check_engine_options(values)  # usage errors come before file errors
    # Input and output are checked and opened before the index: a run that cannot read
    # or write its files must not create (or change) an index.
    refuse_same_file(args.input, output)
    source = stdin_or_file(args.input)
    sink = None
    try:
        existed = output == "-" or os.path.lexists(output)
        sink = stdout_or_file(output)
        try:
            dd = _open_new_or_existing(values)
        except BaseException:
            if not existed:
                with contextlib.suppress(OSError):
                    os.unlink(output)
            raise
        with dd:
            if output != "-":
                truncate_output(sink)
            progress = make_progress(values["progress"], "dedup")
            try:
                summary = run_dedup(
                    dd,
                    source,
                    sink,
                    fields,
                    batch_size=values["batch_size"],
                    workers=max(0, values["workers"]),
                    progress=progress,
                )
            except KeyboardInterrupt:
                _say("\ninterrupted: the index holds every document whose verdict was written")
                return EXIT_INTERRUPTED
            finally:
                if progress is not None:
                    progress.close()
    finally:
        if args.input != "-":
            source.close()
        if sink is not None and output != "-":
            with contextlib.suppress(OSError):  # a write error was reported already
                sink.close()
    _say(summary.text())
    return EXIT_REJECTED if summary.rejected else EXIT_OK


def _check_engine_options(values: dict[str, Any]) -> None:
    """The detection options' cheap checks (as `resolve_params` makes them with the
    index open), so that a usage error is reported before a missing file."""
    from streamdedup.config import ShingleSpec
    from streamdedup.errors import ConfigError

    if values["shingle"] is not None:
        ShingleSpec.parse(values["shingle"])
    if (values["bands"] is None) != (values["rows"] is None):
        raise ConfigError("--bands and --rows go together: give both or neither")
    t = values["threshold"]
    if t is not None and not 0.0 < t < 1.0:
        raise ConfigError(f"--threshold must be strictly between 0 and 1, got {t}")


def _open_new_or_existing(values: dict[str, Any]) -> Deduplicator:
    """`open_engine`, removing the index directory again if this call created it and
    then failed (a failed start leaves no empty index behind)."""
    index = _require_index(values)
    existed = os.path.lexists(index)
    try:
        return open_engine(values)
    except BaseException:
        if not existed and os.path.isdir(index):
            import shutil

            # only what opening an index creates: never anything a user put there
            if set(os.listdir(index)) <= {"data.mdb", "lock.mdb"}:
                shutil.rmtree(index, ignore_errors=True)
        raise


def _say(text: str) -> None:
    """A line on stderr; nothing when stderr is closed (`print(file=None)` would write
    it to stdout, into the verdicts)."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            print(text, file=sys.stderr)


def cmd_tune(args: argparse.Namespace, values: dict[str, Any]) -> int:
    t, k = values["threshold"], values["num_perm"]
    if values["bands"] is not None or values["rows"] is not None:
        if values["bands"] is None or values["rows"] is None:
            from streamdedup.errors import ConfigError

            raise ConfigError("--bands and --rows go together")
        b = banding(t, k, values["bands"], values["rows"])
    else:
        b = tune(t, k, values["fp_weight"], values["fn_weight"])
    table = s_curve_table(b)
    if values["json"]:
        print(
            orjson.dumps(
                {
                    "threshold": t,
                    "num_perm": k,
                    "bands": b.bands,
                    "rows": b.rows,
                    "approx_threshold": b.approx_threshold,
                    "false_positive_area": b.false_positive_area,
                    "false_negative_area": b.false_negative_area,
                    "s_curve": [{"similarity": s, "p_candidate": p} for s, p in table],
                }
            ).decode()
        )
        return EXIT_OK
    print(
        f"threshold {t}, K = {k}: b = {b.bands} bands x r = {b.rows} rows "
        f"({b.bands * b.rows} of {k} hash values)"
    )
    print(f"approximate threshold (1/b)^(1/r) = {b.approx_threshold:.4f}")
    print(
        f"false-positive area {b.false_positive_area:.5f}   "
        f"false-negative area {b.false_negative_area:.5f}"
    )
    print()
    print("   s   P(candidate) = 1-(1-s^r)^b")
    for s, p in table:
        marker = "  <- threshold" if abs(s - t) < 1e-9 else ""
        print(f"  {s:.1f}  {p:.6f}{marker}")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.report import index_stats, render_stats

    stats = index_stats(_require_index(values), check=values["check"])
    print(orjson.dumps(stats).decode() if values["json"] else render_stats(stats))
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.report import inspect_document, render_inspect

    info = inspect_document(_require_index(values), args.doc_id)
    if info is None:
        print(f"no document with id {args.doc_id!r} in the index", file=sys.stderr)
        return EXIT_REJECTED
    print(orjson.dumps(info).decode() if values["json"] else render_inspect(info))
    return EXIT_OK


def cmd_broker(args: argparse.Namespace, values: dict[str, Any]) -> int:
    import threading

    from streamdedup.kafka.broker import EmbeddedBroker

    broker = EmbeddedBroker(values["port"])
    bootstrap = broker.start()
    print(f"Kafka-protocol broker (Tansu, in memory) on {bootstrap}; Ctrl-C stops it", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                print(f"broker exited: {broker.log_tail()}", file=sys.stderr)
                return EXIT_REJECTED
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return EXIT_OK


def cmd_produce(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from kafka import KafkaProducer

    from streamdedup.engine.files import stdin_or_file
    from streamdedup.errors import BrokerUnavailableError
    from streamdedup.kafka.worker import require_bootstrap, wait_for_broker

    require_bootstrap(values)
    source = stdin_or_file(args.input)  # a missing input is reported before connecting
    try:
        wait_for_broker(values["bootstrap_servers"], 30.0)
    except BrokerUnavailableError as exc:
        print(f"streamdedup: error: {exc}", file=sys.stderr)
        return EXIT_BROKER
    producer = KafkaProducer(
        bootstrap_servers=values["bootstrap_servers"], linger_ms=20, batch_size=1 << 20
    )
    id_field, ts_field = values["id_field"], values["timestamp_field"]
    sent = unparsed = 0
    try:
        for line in source:
            if not line.strip():
                continue
            key, ts = None, None
            try:
                doc = orjson.loads(line)
                key = str(doc.get(id_field)).encode() if isinstance(doc, dict) else None
                if ts_field and isinstance(doc, dict) and doc.get(ts_field) is not None:
                    ts = int(doc[ts_field])
            except (orjson.JSONDecodeError, ValueError, TypeError):
                unparsed += 1  # sent as it is: the worker dead-letters it
            producer.send(values["topic"], value=line.rstrip(b"\r\n"), key=key, timestamp_ms=ts)
            sent += 1
        producer.flush()
    finally:
        producer.close()
        if args.input != "-":
            source.close()
    print(f"sent {sent:,} messages to {values['topic']} ({unparsed:,} not JSON)", file=sys.stderr)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.kafka.replay import run_replay

    return run_replay(values, lambda v: open_engine(v, adds_documents=False))


def cmd_backup(args: argparse.Namespace, values: dict[str, Any]) -> int:
    import time

    from streamdedup.store.index import Index

    started = time.monotonic()
    source = Index(_require_index(values), readonly=True)
    try:
        dest = source.copy_to(args.dest)
    finally:
        source.close()
    return _report_copy(values, "backup", dest, time.monotonic() - started)


def cmd_restore(args: argparse.Namespace, values: dict[str, Any]) -> int:
    import time

    from streamdedup.store.index import Index

    started = time.monotonic()
    target = _require_index(values)
    source = Index(args.source, readonly=True)
    try:
        dest = source.copy_to(target)
    finally:
        source.close()
    return _report_copy(values, "restore", dest, time.monotonic() - started)


def _report_copy(values: dict[str, Any], what: str, dest: Any, seconds: float) -> int:
    from streamdedup.ops.report import index_stats

    stats = index_stats(str(dest))
    if values["json"]:
        print(orjson.dumps({"path": str(dest), "seconds": seconds, **stats}).decode())
    else:
        print(
            f"{what}: {stats['documents']:,} documents, {stats['file_bytes']:,} bytes "
            f"in {dest} ({seconds:.1f}s)"
        )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.cli.demo import run_demo

    return run_demo(values)


def _require_index(values: dict[str, Any]) -> str:
    from streamdedup.errors import ConfigError

    if not values.get("index"):
        raise ConfigError("--index DIR is required (or STREAMDEDUP_INDEX, or index in --config)")
    return str(values["index"])


def cmd_worker(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.cli.worker import run_from_options

    return run_from_options(values, open_engine)


HANDLERS = {
    "worker": cmd_worker,
    "dedup": cmd_dedup,
    "tune": cmd_tune,
    "stats": cmd_stats,
    "inspect": cmd_inspect,
    "demo": cmd_demo,
    "backup": cmd_backup,
    "replay": cmd_replay,
    "broker": cmd_broker,
    "produce": cmd_produce,
    "restore": cmd_restore,
}


def _hold_std_fds() -> None:
    """Started with fd 0, 1 or 2 closed (`>&-`), Python sets sys.stdin/stdout/stderr to
    None; the next file opened (the index, the output) would get that descriptor and
    whatever writes to it (a C library's message, a fatal error) would land there.
    Hold such a descriptor with /dev/null; sys.std* stay None, so `-` still reports
    the stream as closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one


def main(argv: Sequence[str] | None = None) -> int:
    _hold_std_fds()
    try:
        command, args, values = parse(argv)
        return HANDLERS[command](args, values)
    except StreamDedupError as exc:
        _say(f"streamdedup: error: {exc}")
        return exc.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `stats | head` and the like: the reader had what it wanted (dedup reports a
        # closed output itself, exit 4, since verdicts went missing)
        from streamdedup.engine.files import silence_stdout

        silence_stdout()
        return EXIT_OK


def entry(argv: Sequence[str] | None = None) -> int:
    """The console script. Once the command has returned its status, a late SIGINT or
    SIGTERM (Ctrl-C, a pod stop) must not turn a finished run into a death by signal:
    Python restores the default handlers while it shuts down, and only an ignored
    signal stays ignored through that."""
    status = main(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    return status


if __name__ == "__main__":
    sys.exit(entry())
