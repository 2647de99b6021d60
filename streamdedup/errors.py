"""Every exception streamdedup raises on purpose, each carrying the exit status the
command line reports for it (`cli.main` maps them in one place: `exc.exit_status`).

Exit statuses (documented in the README, "Bad input and exit status"):

====  ==================================================================
0     finished; every line / message processed (also `worker` and
      `verdicts --follow` stopped by SIGINT or SIGTERM: stopping is their end)
1     finished, but some lines were rejected (error records / dead letters:
      `dedup`, `replay`; `verdicts`: records that are not verdicts; `produce`:
      WARC pages not sent, over --max-doc-bytes or cut off by damage)
2     usage, configuration or index-parameter error, or a topic that does not
      exist (nothing processed); `seal` refused (nothing to seal, the
      destination is not empty, a `.partial` in the way that is not a dead
      seal's of this index, the index is mirrored to a changelog)
3     Kafka: no broker answered, or it refused the connection (auth, TLS)
4     an input or output file cannot be read or written (missing, a
      directory, no permission, no space, closed pipe)
5     the index cannot be opened: not an index, another format, damaged; or
      one of its sealed segments: missing, damaged (checksum), other parameters
6     the index's disk is full (the index is left as it was before the batch)
7     the worker stopped rather than give wrong verdicts or drop input
      (input topic recreated, group shared with another index, transactions
      that keep failing); `backfill`: its Spark job failed (no verdicts
      written)
130   interrupted (SIGINT / SIGTERM before the command finished)
====  ==================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2
EXIT_BROKER = 3
EXIT_IO = 4
EXIT_INDEX = 5
EXIT_DISK_FULL = 6
EXIT_UNSAFE = 7
EXIT_INTERRUPTED = 130


class StreamDedupError(Exception):
    """Base class: anything streamdedup raises on purpose.

    A message that names a parameter of the Python API writes it in backticks
    (`num_perm`) and lists it in `params`, so that API callers read the names they
    passed and the command line shows its own flags instead (`for_command_line`:
    --num-perm).  `params` maps each name to its flag; given as names only, the flag
    is the name with dashes."""

    exit_status: int = EXIT_USAGE

    def __init__(self, message: str = "", *, params: Mapping[str, str] | Iterable[str] = ()):
        super().__init__(message)
        self.params: dict[str, str] = (
            dict(params)
            if isinstance(params, Mapping)
            else {p: "--" + p.replace("_", "-") for p in params}
        )

    def for_command_line(self) -> str:
        """The message with each `param` written as its command-line flag."""
        text = str(self)
        for name, flag in self.params.items():
            text = text.replace(f"`{name}`", flag)
        return text


class ConfigError(StreamDedupError):
    """Invalid options or configuration file."""


class BackfillFailedError(StreamDedupError):
    """The backfill's Spark job failed (a task failed more often than Spark retries
    it, an executor was lost, ...); no verdicts were written."""

    exit_status = EXIT_UNSAFE


class MissingTopicError(ConfigError):
    """A Kafka topic the command reads does not exist (a mistyped name, or nothing
    was produced to it yet)."""


class ParameterMismatchError(StreamDedupError):
    """An index was opened with parameters other than those it was built with."""


class IndexOpenError(StreamDedupError):
    """The index directory cannot be opened, is not an index, or is of another format."""

    exit_status = EXIT_INDEX


class IndexCorruptError(IndexOpenError):
    """LMDB found the index damaged (a torn or overwritten file); `reason` says what
    was found, without the advice the message adds for an index (a command reading a
    backup gives its own)."""

    reason: str = ""


class SegmentError(IndexOpenError):
    """A sealed segment cannot be used: its directory, manifest or data file is
    missing or garbled, its checksum does not match, or it was built with other
    parameters than its index.  An exit like the index's own damage (5): a segment
    is part of the index, and verdicts without it would be wrong."""


class SealRefusedError(StreamDedupError):
    """`seal` (or a backfill's segment build) will not run (the open index holds
    nothing, the destination is not empty, something it did not make is in the way
    at `SEGMENT_DIR.partial`, the index is mirrored to a changelog); nothing was
    changed."""


class DiskFullError(StreamDedupError):
    """No room on the index's filesystem for the next batch; nothing of it was written."""

    exit_status = EXIT_DISK_FULL


class InputOutputError(StreamDedupError):
    """An input or output file cannot be opened, read or written."""

    exit_status = EXIT_IO


class BrokerUnavailableError(StreamDedupError):
    """No broker answered within the connection timeout, or it refused us."""

    exit_status = EXIT_BROKER


class BrokerError(StreamDedupError):
    """The embedded broker (the demo's, `streamdedup broker`) could not be started."""

    exit_status = EXIT_BROKER


class TransactionStuckError(StreamDedupError):
    """A Kafka transaction call did not return within the transaction timeout (the
    worker aborts the batch and tries again; it never reaches the command line)."""


class UndeliveredError(StreamDedupError):
    """A record of the batch was not acknowledged: its transaction must not commit
    (handled inside the worker like a failed transaction)."""


class UnsafeToContinueError(StreamDedupError):
    """The worker found a state in which going on would drop input or give wrong
    verdicts; it stops and says what to do instead."""

    exit_status = EXIT_UNSAFE


class RemoteSegmentError(StreamDedupError):
    """A remote sealed segment cannot answer a probe: its server reported why (a probe
    it cannot read, a damaged segment), or the probe cannot be sent at all (larger
    than the producer or broker accepts).  The writer stops rather than decide a
    batch without that segment."""

    exit_status = EXIT_UNSAFE


class SegmentWaitInterrupted(StreamDedupError):
    """The writer was stopped (SIGINT, SIGTERM) while it waited for a remote sealed
    segment's answer; the batch was not decided, nothing of it is committed."""

    exit_status = EXIT_INTERRUPTED
