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
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from streamdedup.cli.console import say
from streamdedup.cli.settings import EngineSettings, engine_settings, open_new_or_existing
from streamdedup.config import Fields
from streamdedup.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, ConfigError
from streamdedup.inputs import is_warc, sniff_warc
from streamdedup.ops.progress import InputProgress
from streamdedup.worker_config import check_connection_used

if TYPE_CHECKING:
    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.inputs.warc import Skipped
    from streamdedup.kafka.segment_service.client import RemoteSegments
    from streamdedup.ops.summary import Summary


def cmd_dedup(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.filemode.streams import refuse_same_file, stdin_or_file
    from streamdedup.ops.summary import Summary

    fields = Fields.from_options(values)
    output, keep = values["output"], values.get("keep")
    inputs: list[str] = [args.input] if isinstance(args.input, str) else list(args.input)
    settings = engine_settings(values)  # usage errors come before file errors
    _check_usage(values, inputs, settings.index)
    # Inputs and outputs are checked and opened before the index: a run that cannot
    # read or write its files must not create (or change) an index.
    for path in inputs:
        refuse_same_file(path, output)
        if keep is not None:
            refuse_same_file(path, keep)
    sources: list[IO[bytes]] = []
    outputs = Outputs(output, keep)
    remote = _remote(values)  # remote sealed segments: connects on the first one
    try:
        for path in inputs:
            sources.append(stdin_or_file(path))
        sink, kept = outputs.open()
        try:
            dd = open_new_or_existing(settings, None if remote is None else remote.reader)
        except BaseException:
            outputs.remove_made()
            raise
        fields = fields.for_params(dd.params)  # (an index of bits items reads bits)
        with dd:
            outputs.truncate()
            progress = InputProgress(values["progress"], "dedup", sources)
            summary = Summary(unit="records" if any(map(is_warc, inputs)) else "lines")
            summary.keeping = kept is not None
            record_ids: set[bytes] = set()  # --warc-id record-id: one run's ids
            clusters: set[bytes] | None = set() if values["keep_per_cluster"] else None
            try:
                for k, (path, source) in enumerate(zip(inputs, sources, strict=True)):
                    progress.reading(k, source)
                    run = Run(
                        dd,
                        sink,
                        kept,
                        clusters,
                        fields,
                        values,
                        settings,
                        progress,
                        summary,
                        record_ids,
                    )
                    run.one_input(path, source, several=len(inputs) > 1)
            except KeyboardInterrupt:
                say("\ninterrupted: the index holds every document whose verdict was written")
                return EXIT_INTERRUPTED
            finally:
                progress.close()
    finally:
        if remote is not None:
            remote.close()
        for path, source in zip(inputs, sources, strict=False):
            if path != "-":
                source.close()
        outputs.close()
    say(summary.text())
    c = dd.counters
    if c.bucket_capped or c.exact_capped:
        say(
            f"caps: {c.bucket_capped:,} documents read a bucket cut at "
            f"--max-bucket-candidates {settings.options.max_bucket_candidates}, "
            f"{c.exact_capped:,} stopped at --max-exact-checks "
            f"{settings.options.max_exact_checks} with candidates left near the threshold "
            "(near duplicates may have been missed: raise them if recall matters more)"
        )
    return EXIT_REJECTED if summary.rejected else EXIT_OK


class Outputs:
    """The verdicts' stream and `--keep`'s: opened before the index (a run that cannot
    write them must not touch an index), those it created removed if the index then
    fails to open, truncated only once it is open (a failed start leaves an existing
    file as it was), closed at the end."""

    def __init__(self, output: str, keep: str | None) -> None:
        self.paths = [p for p in (output, keep) if p is not None]
        self.made = [p for p in self.paths if p != "-" and not os.path.lexists(p)]
        self.streams: list[IO[bytes]] = []

    def open(self) -> tuple[IO[bytes], IO[bytes] | None]:
        from streamdedup.filemode.streams import stdout_or_file

        for path in self.paths:
            self.streams.append(stdout_or_file(path))
        return self.streams[0], self.streams[1] if len(self.streams) > 1 else None

    def remove_made(self) -> None:
        for path in self.made:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def truncate(self) -> None:
        from streamdedup.filemode.streams import truncate_output

        for path, stream in zip(self.paths, self.streams, strict=False):
            if path != "-":
                truncate_output(stream)

    def close(self) -> None:
        for path, stream in zip(self.paths, self.streams, strict=False):
            if path != "-":
                with contextlib.suppress(OSError):  # a write error was reported already
                    stream.close()


@dataclass(frozen=True)
class Run:
    """What every input of one `dedup` run shares: the index, the output, the
    settings, the progress bar and the running summary."""

    dd: Deduplicator
    sink: IO[bytes]
    kept: IO[bytes] | None  # `--keep`: the input lines of the unique documents
    kept_clusters: set[bytes] | None  # `--keep-per-cluster`: the clusters kept so far
    fields: Fields
    values: dict[str, Any]
    settings: EngineSettings
    progress: Any
    summary: Summary
    record_ids: set[bytes]

    def one_input(self, path: str, source: IO[bytes], *, several: bool) -> None:
        """One INPUT through the index: a WARC archive (by its name, else by its first
        bytes: stdin has no name) or JSON Lines.  With several inputs an error record
        names its input (`"input"`) besides its line."""
        from streamdedup.filemode.run import run_dedup, run_warc

        batch_size = self.settings.options.batch_size
        warc = is_warc(path)
        if not warc:
            warc, source = sniff_warc(source)
        if warc and self.fields.item != "text":
            raise ConfigError(
                f"{path} is a WARC archive, whose records are pages; this index compares "
                f"{self.fields.item} items (give JSON Lines records with a "
                f"{self.fields.item_name!r} field)"
            )
        if warc and self.kept is not None:
            raise ConfigError(
                f"{path} is a WARC archive: --keep copies JSON Lines input lines only"
            )
        if warc:
            self.summary.unit = "records"
            report = self.values["report_skipped"]
            run_warc(
                self.dd,
                source,
                self.sink,
                self.fields,
                warc_id="record-id" if self.values["warc_id"] == "record-id" else "uri",
                statuses="any" if self.values["warc_status"] == "any" else "2xx",
                record_ids=self.record_ids,
                batch_size=batch_size,
                dry=self.values["dry_run"],
                workers=max(0, self.values["workers"]),
                progress=self.progress,
                summary=self.summary,
                on_skip=(lambda item, n: _report_skip(path, item, n)) if report else None,
            )
            return
        run_dedup(
            self.dd,
            source,
            self.sink,
            self.fields,
            batch_size=batch_size,
            workers=max(0, self.values["workers"]),
            progress=self.progress,
            summary=self.summary,
            where={"input": path} if several else None,
            keep=self.kept,
            dry=self.values["dry_run"],
            kept_clusters=self.kept_clusters,
        )


def _check_usage(values: dict[str, Any], inputs: list[str], index: str) -> None:
    """The usage errors of a run's options and inputs, before any file is opened."""
    check_connection_used(
        values,
        bool(values.get("bootstrap_servers")),
        "dedup connects only with --bootstrap-servers, to an index's remote segments",
    )
    if inputs.count("-") > 1:
        raise ConfigError("stdin ('-') can be given as INPUT only once")
    keep = values.get("keep")
    _check_keep(keep, values["output"], inputs)
    if values["keep_per_cluster"] and keep is None:
        raise ConfigError("--keep-per-cluster chooses what --keep FILE gets: give --keep")
    if values["dry_run"] and not os.path.exists(os.path.join(index, "data.mdb")):
        raise ConfigError(
            f"--dry-run checks documents against an existing index; there is none at "
            f"{index} (a dry run creates nothing)"
        )


def _check_keep(keep: str | None, output: str, inputs: list[str]) -> None:
    """`--keep` goes elsewhere than the verdicts, and reads JSON Lines."""
    if keep is None:
        return
    if keep == output:
        where = "stdout" if keep == "-" else keep
        raise ConfigError(
            f"--keep and --output both go to {where}: give the verdicts or the kept "
            "lines a file of their own"
        )
    warc = [p for p in inputs if is_warc(p)]
    if warc:
        raise ConfigError(f"{warc[0]} is a WARC archive: --keep copies JSON Lines input lines only")


def _remote(values: dict[str, Any]) -> RemoteSegments | None:
    """`remote_for`, whose Kafka and metrics modules are imported only when
    `--bootstrap-servers` asks for them (a tenth of a short run's second otherwise)."""
    if not values.get("bootstrap_servers"):
        return None
    from streamdedup.cli.segment_server import remote_for  # connection settings checked there

    return remote_for(values)


def _report_skip(path: str, item: Skipped, number: int) -> None:
    """`--report-skipped`: one line per skipped record, on stderr."""
    name = item.ref.url or item.ref.record_id or "(no URI)"
    say(f"skipped {path} record {number}: {name}: {item.message} [{item.reason}]")
