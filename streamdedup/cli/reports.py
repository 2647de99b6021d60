"""`streamdedup stats` and `streamdedup inspect`: read-only reports on an index (a
summary, optionally with a structure check; what it knows about one document), as
text or JSON on stdout.  The reports themselves are computed in `ops.report`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from streamdedup.cli.settings import require_index
from streamdedup.errors import EXIT_OK, EXIT_REJECTED


def cmd_stats(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.report import index_stats, render_stats

    stats = index_stats(require_index(values), check=values["check"])
    print(orjson.dumps(stats).decode() if values["json"] else render_stats(stats))
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.ops.report import inspect_document, missing_text, render_inspect

    info = inspect_document(require_index(values), args.doc_id)
    if not info["found"]:
        print(missing_text(info), file=sys.stderr)
        return EXIT_REJECTED
    print(orjson.dumps(info).decode() if values["json"] else render_inspect(info))
    return EXIT_OK
