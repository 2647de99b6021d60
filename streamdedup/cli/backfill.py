"""`streamdedup backfill`: JSON Lines files checked on Spark (backfill/job.py), the
verdicts `dedup` would give over the same files, written whole at the end.

Usage errors come first (options, inputs, output directory), then Spark starts
(seconds: a JVM): a run that cannot read its inputs fails before that.  The master
is `--spark-master`, else the one `spark-submit` set, else `local[*]`; a local
master listens on loopback only (backfill/session.py).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from streamdedup.cli.console import say
from streamdedup.cli.settings import check_at_least_one, check_detection
from streamdedup.config import EngineOptions, Fields
from streamdedup.errors import EXIT_OK, EXIT_REJECTED, ConfigError, InputOutputError
from streamdedup.inputs import is_warc

if TYPE_CHECKING:
    from streamdedup.backfill.job import Backfill


def cmd_backfill(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.backfill.job import run_backfill
    from streamdedup.backfill.session import session

    job = backfill_job(args, values)
    spark = session(values.get("spark_master"))
    try:
        summary = run_backfill(spark, job, say)
    finally:
        spark.stop()
    say(summary.text())
    return EXIT_REJECTED if summary.rejected else EXIT_OK


def backfill_job(args: argparse.Namespace, values: dict[str, Any]) -> Backfill:
    """The job the options describe, after every check that needs no Spark."""
    from streamdedup.backfill.job import Backfill
    from streamdedup.engine.params import resolve_params

    inputs: list[str] = list(args.input)
    output = values.get("output")
    if not output or output == "-":
        raise ConfigError("--output FILE is required (backfill writes the verdicts whole)")
    segment = values.get("segment") or None
    if segment is not None:
        _check_segment(segment, output)
    if values["split_bytes"] < 1:
        raise ConfigError("--split-bytes must be at least 1")
    check_at_least_one(values)
    d = check_detection(values)
    if (d.metric or "jaccard") != "jaccard" or d.item not in (None, "text"):
        raise ConfigError(
            f"backfill compares texts by Jaccard only so far; for --metric {d.metric} "
            "run `streamdedup dedup` over the same inputs (same verdicts, one process)",
            params=("metric",),
        )
    params = resolve_params(
        None,
        threshold=d.threshold,
        num_perm=d.num_perm,
        shingle=d.shingle,
        bands=d.bands,
        rows=d.rows,
        verify=d.verify,
        seed=d.seed,
        false_positive_weight=d.false_positive_weight,
        false_negative_weight=d.false_negative_weight,
    )
    for path in inputs:
        _check_input(path, output)
    return Backfill(
        inputs=tuple(inputs),
        output=output,
        params=params,
        options=EngineOptions(
            max_bucket_candidates=values["max_bucket_candidates"],
            max_exact_checks=values["max_exact_checks"],
        ),
        fields=Fields.from_options(values),
        split_bytes=values["split_bytes"],
        segment=segment,
    )


def _check_segment(path: str, output: str) -> None:
    """--segment: a new or empty directory (as `seal`'s SEGMENT_DIR), not the
    output, checked before Spark starts."""
    if os.path.abspath(path) == os.path.abspath(output):
        raise ConfigError(f"--segment {path} is the --output file: give another directory")
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise ConfigError(
            f"--segment {path} exists and is not empty; give a new or empty directory"
        )
    from streamdedup.store.segment.building import SegmentBuilder

    SegmentBuilder.check(path)  # a SEGMENT_DIR.partial in the way that is not a dead build's


def _check_input(path: str, output: str) -> None:
    if path == "-":
        raise ConfigError("backfill reads files (its tasks open them by path), not stdin")
    if is_warc(path):
        raise ConfigError(
            f"{path}: backfill reads JSON Lines; WARC archives go through `streamdedup dedup`"
        )
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise InputOutputError(f"cannot read {path}: not a readable file")
    if os.path.exists(output) and os.path.samefile(path, output):
        raise ConfigError(
            f"the output ({output}) is the input file ({path}): choose another --output"
        )
