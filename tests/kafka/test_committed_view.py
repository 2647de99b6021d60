"""The committed view (streamdedup/kafka/txnlog.py) as a property: for any interleaving
of plain records and transactions that commit, abort or stay open, fed as real Kafka
record batches (built with kafka-python's own batch builder, control markers
included), it yields exactly the committed records below the last stable offset, once
each, in offset order -- whatever the batch boundaries the broker fetches them in."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from streamdedup.kafka.txnlog import CommittedView, committed_of

ATTRIBUTES = DefaultRecordBatch.ATTRIBUTES_OFFSET
CRC = DefaultRecordBatch.CRC_OFFSET


def batch(
    base_offset: int, producer_id: int, values: list[bytes], marker: bool | None = None
) -> DefaultRecordBatch:
    """A record batch as a broker stores it; `marker` True/False: a COMMIT/ABORT control
    batch of the producer's transaction."""
    transactional = producer_id >= 0
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=1 << 20,
    )
    if marker is None:
        for i, v in enumerate(values):
            builder.append(i, timestamp=0, key=None, value=v, headers=[])
    else:
        key = struct.pack(">hh", 0, 1 if marker else 0)
        builder.append(0, timestamp=0, key=key, value=b"\0" * 6, headers=[])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    if marker is not None:
        (attributes,) = struct.unpack_from(">h", buf, ATTRIBUTES)
        struct.pack_into(">h", buf, ATTRIBUTES, attributes | DefaultRecordBatch.CONTROL_MASK)
    struct.pack_into(">I", buf, CRC, calc_crc32c(bytes(buf[ATTRIBUTES:])))
    out = DefaultRecordBatch(bytes(buf))
    assert out.validate_crc()
    return out


@dataclass
class Log:
    batches: list[DefaultRecordBatch]
    expected: list[int]  # offsets a read_committed consumer sees


# events: (producer id or -1 for a plain producer, records, end of transaction?)
events = st.lists(
    st.tuples(
        st.integers(-1, 3),
        st.integers(1, 4),
        st.sampled_from([None, True, False]),  # None: the transaction goes on
    ),
    max_size=40,
)


def build_log(evs: list[tuple[int, int, bool | None]]) -> Log:
    offset = 0
    batches: list[DefaultRecordBatch] = []
    open_txns: dict[int, list[int]] = {}
    visible: list[int] = []
    for pid, n, end in evs:
        values = [b"v%d" % (offset + i) for i in range(n)]
        batches.append(batch(offset, pid, values))
        written = list(range(offset, offset + n))
        offset += n
        if pid < 0:
            visible += written
            continue
        open_txns.setdefault(pid, []).extend(written)
        if end is not None:
            batches.append(batch(offset, pid, [], marker=end))
            offset += 1
            fate = open_txns.pop(pid)
            if end:
                visible += fate
    stable = min((o[0] for o in open_txns.values()), default=offset)
    return Log(batches, sorted(o for o in visible if o < stable))


@given(events)
def test_committed_view_is_the_committed_records_below_the_stable_offset(
    evs: list[tuple[int, int, bool | None]],
) -> None:
    log = build_log(evs)
    got = committed_of(log.batches)
    assert [r.offset for r in got] == log.expected
    assert all(r.value == b"v%d" % r.offset for r in got)


@given(events)
def test_fed_batch_by_batch_each_record_comes_once_in_offset_order(
    evs: list[tuple[int, int, bool | None]],
) -> None:
    log = build_log(evs)
    view = CommittedView()
    seen: list[int] = []
    for b in log.batches:
        fresh = [r.offset for r in view.feed(b)]
        # nothing is released at or past an open transaction's first offset
        if view.stable_offset is not None:
            assert all(o < view.stable_offset for o in fresh)
        seen += fresh
    assert seen == log.expected  # in order, no repeats, nothing aborted
