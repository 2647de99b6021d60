"""Typed settings built once from the option values, with the command line's checks
on them, one function per rule.

`options.resolve` leaves each command an untyped `values` dict; `engine_settings`
turns the engine's share of it into frozen objects -- the index directory, the
detection parameters asked for (`Detection`; an existing index keeps its own), the
run-time `EngineOptions` and the changelog topic -- after the cheap checks
(`require_index`, `check_at_least_one`, `check_detection`), so that a usage error is
reported before any file or index is touched.  `open_engine` opens the
`Deduplicator` from such settings (or from `values`, as the Kafka commands call it),
and `open_new_or_existing` also removes an index directory that its failed start
created.  The rules whose index-time twins live in the engine (`resolve_params`)
report with the same words.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from streamdedup.config import (
    EngineOptions,
    ShingleSpec,
    check_bands_rows,
    check_threshold,
    parse_duration_ms,
)
from streamdedup.engine.deduplicator import Deduplicator, Detection
from streamdedup.engine.deduplicator import RemoteSegments as RemoteFactory
from streamdedup.errors import EXIT_OK, EXIT_REJECTED, ConfigError, StreamDedupError
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables

# the engine options that bound work per batch: 0 or less would stall or skip it
POSITIVE_OPTIONS = (
    "max_bucket_candidates",
    "max_exact_checks",
    "batch_size",
    "seal_every",
    "clock_window",
)


def require_index(values: dict[str, Any]) -> str:
    """The `--index` directory, which every command but `demo` needs."""
    if not values.get("index"):
        raise ConfigError("--index DIR is required (or STREAMDEDUP_INDEX, or index in --config)")
    return str(values["index"])


def check_at_least_one(values: dict[str, Any]) -> None:
    """`POSITIVE_OPTIONS` (those the command has) are at least 1."""
    for name in POSITIVE_OPTIONS:
        value = values.get(name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")


def check_detection(values: dict[str, Any]) -> Detection:
    """The detection options' cheap checks (as `resolve_params` makes them with the
    index open), and the `Detection` they describe."""
    shingle = ShingleSpec.parse(values["shingle"]) if values["shingle"] is not None else None
    check_bands_rows(values["bands"], values["rows"])
    if values.get("metric") in (None, "jaccard"):  # (the other families' bars differ)
        check_threshold(values["threshold"])
    verify = values["verify"]
    return Detection(
        threshold=values["threshold"],
        num_perm=values["num_perm"],
        shingle=shingle,
        bands=values["bands"],
        rows=values["rows"],
        verify=None if verify is None else "exact" if verify == "exact" else "signature",
        seed=values["seed"],
        false_positive_weight=values["fp_weight"],
        false_negative_weight=values["fn_weight"],
        metric=values.get("metric"),
        item=values.get("item"),
        bits=values.get("bits"),
        max_distance=values.get("max_distance"),
        dim=values.get("dim"),
        bucket_width=values.get("bucket_width"),
    )


@dataclass(frozen=True)
class EngineSettings:
    """Everything a command opens its `Deduplicator` with."""

    index: str
    detection: Detection
    options: EngineOptions
    changelog: str | None = None
    base_segment: str | None = None  # a sealed segment a new index starts from


def clock_skew_ms(text: str | None) -> int | None:
    """`--max-clock-skew`: a duration, or 'off' (no bound)."""
    if text is None:  # a command without the time-window options
        return EngineOptions.max_clock_skew_ms
    return None if text.strip().lower() == "off" else parse_duration_ms(text)


def engine_settings(values: dict[str, Any]) -> EngineSettings:
    """The engine's settings from the option values of `dedup`, `worker` or `replay`
    (options a command lacks take the engine's defaults)."""
    index = require_index(values)
    check_at_least_one(values)
    detection = check_detection(values)
    options = EngineOptions(
        max_bucket_candidates=values["max_bucket_candidates"],
        max_exact_checks=values["max_exact_checks"],
        batch_size=values.get("batch_size", EngineOptions.batch_size),
        durability=values["durability"],
        ttl_ms=parse_duration_ms(values["ttl"]) if values.get("ttl") else None,
        max_expire_per_batch=values.get("max_expire_per_batch", 20_000),
        max_clock_skew_ms=clock_skew_ms(values.get("max_clock_skew")),
        clock_window=values.get("clock_window") or EngineOptions.clock_window,
        seal_every=values.get("seal_every"),
        segments_dir=values.get("segments_dir"),
    )
    changelog, base = values.get("changelog_topic"), values.get("base_segment") or None
    if base is not None and changelog:
        raise ConfigError(
            "--base-segment and --changelog-topic together are not supported: an index "
            "mirrored to a changelog cannot hold sealed segments yet"
        )
    return EngineSettings(index, detection, options, changelog, base)


def open_engine(
    values: dict[str, Any] | EngineSettings,
    *,
    adds_documents: bool = True,
    remote: RemoteFactory | None = None,
) -> Deduplicator:
    """`adds_documents`: refuse at once an index whose changelog this run would not
    write (`dedup`, `worker`); `replay` is refused only by a batch adding documents.
    `remote`: how to reach the index's remote sealed segments (`segment_server.remote_for`)."""
    s = values if isinstance(values, EngineSettings) else engine_settings(values)
    dd = Deduplicator.open(
        s.index,
        s.detection,
        options=s.options,
        changelog=s.changelog,
        remote=remote,
        base_segment=s.base_segment,
    )
    try:
        if adds_documents:
            dd.require_writable()  # before any input is read or output written
    except BaseException:
        dd.close()
        raise
    return dd


def open_new_or_existing(
    settings: EngineSettings, remote: RemoteFactory | None = None
) -> Deduplicator:
    """`open_engine`, removing the index directory again if this call created it and
    then failed (a failed start leaves no empty index behind)."""
    with removed_if_failed(settings.index):
        return open_engine(settings, remote=remote)


@contextlib.contextmanager
def removed_if_failed(index: str | None) -> Iterator[None]:
    """Around a command that may create the index directory `index`: if the command
    fails (an exception, Ctrl-C) and the directory did not exist before and holds an
    index without a single document, remove it -- a failed start (broker unreachable,
    topic missing, output not writable) leaves no empty index behind that a later
    run, or a user, would take for a real one.  An index that took any document is
    kept, whatever happened after."""
    existed = index is None or os.path.lexists(index)
    try:
        yield
    except BaseException:
        if not existed and index is not None:
            _remove_if_empty(index)
        raise


def run_without_leaving_empty_index(index: str | None, command: Callable[[], int]) -> int:
    """`removed_if_failed` for the commands that also report a failure by their exit
    status (`worker`, `replay`): any status but 0 and 1 counts as failed."""
    existed = index is None or os.path.lexists(index)
    failed = True
    try:
        status = command()
        failed = status not in (EXIT_OK, EXIT_REJECTED)
        return status
    finally:
        if failed and not existed and index is not None:
            _remove_if_empty(index)


def _remove_if_empty(index: str) -> None:
    if _empty_index(index):
        shutil.rmtree(index, ignore_errors=True)


def _holds_nothing(t: Tables) -> bool:
    """No document, and no input offsets recorded (a batch of dead letters only)."""
    return (
        t.meta(MetaKey.NEXT_DOCNO) is None
        and t.count("ids") == 0
        and next(t.meta_entries(MetaKey.APPLIED.encode()), None) is None
    )


def _empty_index(path: str) -> bool:
    """Only what opening an index creates, and no document in it: never remove
    anything a user put there.  (The directory was created by the failed command
    itself: an index there that cannot even be read holds nothing worth keeping.)"""
    if not os.path.isdir(path) or not set(os.listdir(path)) <= {"data.mdb", "lock.mdb"}:
        return False
    if not os.path.exists(os.path.join(path, "data.mdb")):
        return True
    from streamdedup.store.index import Index

    try:
        index = Index(path, readonly=True)
    except StreamDedupError:
        return True
    try:
        return bool(index.read(_holds_nothing))
    except StreamDedupError:
        return True
    finally:
        index.close()
