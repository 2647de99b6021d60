"""`streamdedup dedup`: JSON Lines documents from a file or stdin checked against the
index, one verdict per line to a file or stdout, a summary on stderr.

It owns the order a file run fails in: usage errors first (the settings are built and
checked before anything is opened), then the input and output files, and only then
the index, so that a run that cannot read or write its files neither creates nor
changes an index (and a failed start removes an index directory it created).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

from streamdedup.cli.console import say
from streamdedup.cli.settings import engine_settings, open_new_or_existing
from streamdedup.config import Fields
from streamdedup.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED
from streamdedup.ops.progress import make_progress


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
    settings = engine_settings(values)  # usage errors come before file errors
    # Input and output are checked and opened before the index: a run that cannot read
    # or write its files must not create (or change) an index.
    refuse_same_file(args.input, output)
    source = stdin_or_file(args.input)
    sink = None
    try:
        existed = output == "-" or os.path.lexists(output)
        sink = stdout_or_file(output)
        try:
            dd = open_new_or_existing(settings)
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
                    batch_size=settings.options.batch_size,
                    workers=max(0, values["workers"]),
                    progress=progress,
                )
            except KeyboardInterrupt:
                say("\ninterrupted: the index holds every document whose verdict was written")
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
    say(summary.text())
    return EXIT_REJECTED if summary.rejected else EXIT_OK
