"""`streamdedup stats`, `inspect` and `clusters`: read-only reports on an index (a
summary, optionally with a structure check; what it knows about one document; every
cluster's members, also from verdict files), as text or JSON.  The reports themselves
are computed in `ops.report` and `ops.clusters`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import orjson

from streamdedup.cli.settings import require_index
from streamdedup.errors import EXIT_OK, EXIT_REJECTED, ConfigError


def cmd_stats(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.report import index_stats, render_stats

    stats = index_stats(require_index(values), check=values["check"])
    print(orjson.dumps(stats).decode() if values["json"] else render_stats(stats))
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.inspect import inspect_document, missing_text, render_inspect

    info = inspect_document(require_index(values), args.doc_id)
    if not info["found"]:
        print(missing_text(info), file=sys.stderr)
        return EXIT_REJECTED
    print(orjson.dumps(info).decode() if values["json"] else render_inspect(info))
    return EXIT_OK


def cmd_clusters(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.cli.verdicts import open_output
    from streamdedup.ops.clusters import from_index, from_verdicts

    files: list[str] = args.verdicts  # (named here, they win over an --index of the
    if not files and not values.get("index"):  # environment or a config file)
        raise ConfigError("give the clusters' source: --index DIR or verdict files (JSON Lines)")
    if values["min_size"] < 1:
        raise ConfigError("--min-size must be at least 1", params=("min_size",))
    clusters = (
        from_verdicts(_lines(files), values["min_size"])
        if files
        else from_index(values["index"], values["min_size"])
    )
    out, close = open_output(values["output"], "the clusters")
    try:
        for c in clusters:
            out.write(orjson.dumps(c) + b"\n")
    finally:
        if close:
            out.close()
        else:
            out.flush()
    return EXIT_OK


def _lines(files: list[str]) -> Iterator[bytes]:
    """The lines of the verdict files in turn ('-': standard input), opened and read
    as `dedup` opens and reads its inputs."""
    from streamdedup.filemode.streams import read_error, stdin_or_file

    for path in files:
        src = stdin_or_file(path)
        try:
            yield from src
        except OSError as exc:
            raise read_error(src, exc) from exc
        finally:
            if path != "-":
                src.close()
