"""The `streamdedup` command: argument parsing, dispatch to the subcommands, and the
one place every error becomes an exit status.

`build_parser` and `parse` turn the option table (`table.py`) into argparse parsers
and resolve each option from the command line, the environment or a TOML file;
`HANDLERS` names the function that runs each command (their modules: `dedup`, `tune`,
`reports`, `kafka_tools`, `backup`, `seal`, `demo`; `worker` and `replay` hand their values to
the kafka package).  `main` maps each exception to its status -- see `errors.py`: 0
success; 1 finished, but some input lines were rejected; 2 usage; 3 broker; 4
input/output file; 5 index; 6 disk full; 7 worker stopped for safety; 130
interrupted -- and `entry`, the console script, keeps that status through shutdown.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from streamdedup import __version__, kernels
from streamdedup.cli.console import say
from streamdedup.cli.options import add_options, load_toml, resolve
from streamdedup.cli.table import ARGUMENTS, COMMANDS, EXAMPLES, INAPPLICABLE
from streamdedup.errors import EXIT_INTERRUPTED, EXIT_OK, StreamDedupError


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
        examples = EXAMPLES.get(name, ())
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog="example:\n" + "\n".join(f"  {e}" for e in examples) if examples else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for dest, metavar, arg_help in ARGUMENTS.get(name, ()):
            if metavar.startswith("["):  # "[NAME...]": none or more
                p.add_argument(dest, metavar=metavar[1:-4], nargs="*", help=arg_help)
            elif metavar.endswith("..."):
                p.add_argument(dest, metavar=metavar[:-3], nargs="+", help=arg_help)
            else:
                p.add_argument(dest, metavar=metavar, help=arg_help)
        p.add_argument(
            "--config",
            metavar="FILE",
            help="TOML file with option values [env: STREAMDEDUP_CONFIG]",
        )
        add_options(p, groups)
    return parser


def closest_option(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str | None:
    """The option of `parser` nearest to the first unknown flag (`--treshold`:
    `--threshold`), or None when none is close."""
    import difflib  # (only for a mistyped flag)

    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("--")]
    options = [o for action in parser._actions for o in action.option_strings]
    for flag in flags:
        near = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
        if near:
            return near[0]
    return None


def parse(argv: Sequence[str] | None) -> tuple[str, argparse.Namespace, dict[str, Any]]:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse would report them with the top-level usage: the subcommand's is the
        # one that helps, with the option that was probably meant
        sub = _subparser(parser, args.command)
        near = closest_option(sub, unknown)
        hint = f"; did you mean {near}?" if near else f"; see streamdedup {args.command} --help"
        sub.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    config_path = args.config or os.environ.get("STREAMDEDUP_CONFIG")
    config = load_toml(config_path) if config_path else None
    values = resolve(
        args,
        COMMANDS[args.command][1],
        args.command,
        config,
        commands={name: groups for name, (_, groups) in COMMANDS.items()},
        inapplicable=INAPPLICABLE.get(args.command),
    )
    return args.command, args, values


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise LookupError(command)  # pragma: no cover - build_parser always adds them


def cmd_replay(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.cli.segment_server import remote_for
    from streamdedup.cli.settings import open_engine, run_without_leaving_empty_index
    from streamdedup.kafka.replay import run_replay

    remote = remote_for(values)
    factory = None if remote is None else remote.reader
    try:
        return run_without_leaving_empty_index(
            values.get("index"),
            lambda: run_replay(
                values, lambda v: open_engine(v, adds_documents=False, remote=factory)
            ),
        )
    finally:
        if remote is not None:
            remote.close()


def cmd_worker(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.cli.settings import open_engine, run_without_leaving_empty_index
    from streamdedup.cli.worker import run_from_options

    return run_without_leaving_empty_index(
        values.get("index"), lambda: run_from_options(values, open_engine)
    )


Handler = Callable[[argparse.Namespace, dict[str, Any]], int]

# Each command's function, as "module:function": imported when that command runs, so
# that a run loads only its own command's modules (`dedup` on 50,000 one-line documents
# takes about a second; importing every command's Kafka, metrics and HTTP modules
# took a tenth of it).
HANDLERS: dict[str, str] = {
    "worker": "streamdedup.cli.main:cmd_worker",
    "dedup": "streamdedup.cli.dedup:cmd_dedup",
    "backfill": "streamdedup.cli.backfill:cmd_backfill",
    "tune": "streamdedup.cli.tune:cmd_tune",
    "stats": "streamdedup.cli.reports:cmd_stats",
    "inspect": "streamdedup.cli.reports:cmd_inspect",
    "clusters": "streamdedup.cli.reports:cmd_clusters",
    "demo": "streamdedup.cli.demo:cmd_demo",
    "backup": "streamdedup.cli.backup:cmd_backup",
    "replay": "streamdedup.cli.main:cmd_replay",
    "broker": "streamdedup.cli.kafka_tools:cmd_broker",
    "produce": "streamdedup.cli.kafka_tools:cmd_produce",
    "verdicts": "streamdedup.cli.verdicts:cmd_verdicts",
    "restore": "streamdedup.cli.backup:cmd_restore",
    "seal": "streamdedup.cli.seal:cmd_seal",
    "repoint": "streamdedup.cli.seal:cmd_repoint",
    "segment-server": "streamdedup.cli.segment_server:cmd_segment_server",
}


def handler(command: str) -> Handler:
    """The function that runs `command` (its module imported now)."""
    module, name = HANDLERS[command].split(":")
    found: Handler = getattr(importlib.import_module(module), name)
    return found


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
        return handler(command)(args, values)
    except StreamDedupError as exc:
        say(f"streamdedup: error: {exc.for_command_line()}")
        return exc.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `stats | head` and the like: the reader had what it wanted (dedup reports a
        # closed output itself, exit 4, since verdicts went missing)
        from streamdedup.filemode.streams import silence_stdout

        silence_stdout()
        return EXIT_OK


# Objects between cyclic collections of the youngest generation (Python's default: 700)
YOUNG_GC_THRESHOLD = 100_000


def settle_gc() -> None:
    """Collect cycles every 100,000 new objects instead of every 700.  The engine
    pauses the collector for each batch's transaction (`_collector_paused`), but
    not while a batch is decoded and prepared, nor while its verdicts are written:
    there too a batch makes several objects per document (decoded documents, keys,
    hashes, signature rows, texts, output records) that live until the batch is
    done, so with the default every collection walked thousands of them only to
    find no garbage: 12% of `dedup`'s time on one-line documents, 4-5% on pages.
    Our objects are freed by reference counting; cycles (rare: exceptions,
    closures) wait a little longer, a few MB at most.  Only the command line does
    this: the process is ours there, not a host application's."""
    gc.set_threshold(YOUNG_GC_THRESHOLD, 10, 10)


def entry(argv: Sequence[str] | None = None) -> int:
    """The console script. Once the command has returned its status, a late SIGINT or
    SIGTERM (Ctrl-C, a pod stop) must not turn a finished run into a death by signal:
    Python restores the default handlers while it shuts down, and only an ignored
    signal stays ignored through that."""
    settle_gc()
    status = main(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    return status


if __name__ == "__main__":
    sys.exit(entry())
